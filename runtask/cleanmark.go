package runtask

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/conductor-dev/conductor/patch"
	pgit "github.com/conductor-dev/conductor/patch/git"
)

// A clean mark lets a take skip `git status`: it is what this process
// saw of a free worktree it knew to be exactly its base (every entry's
// lstat key, HEAD, a hash of the index), left by a release that put back
// what a file-tools-only run changed. The next take in this process scans
// the worktree anyway (checkHazards); when that scan and the git dir
// match the mark, nothing was written, replaced, added or removed since,
// so the worktree is still exactly the base.
//
// A change within the same tick of the file system's clock as an entry's
// ctime would keep its key: such racy entries (ctime or mtime within
// racyWindow of the mark's scan) are compared with the base's content
// instead, as git compares racily clean files.
//
// Marks live in this process only: another process, or a restart, asks
// git.
type cleanMark struct {
	base  string
	files patch.Stats
	at    time.Time // when the scan of files began
	head  string    // HEAD's content
	index [sha256.Size]byte
	// recheck are paths compared with the base's content whatever their
	// times: the ones the release put back in process.
	recheck map[string]bool
}

// racyWindow bounds the file system's timestamp granularity (coarse
// kernel clocks tick every 1–10 ms; some file systems keep seconds).
const racyWindow = 2 * time.Second

// maxRacy bounds the entries a take compares with the base's content; a
// mark with more (a worktree checked out a moment ago) is left to git.
const maxRacy = 256

// cleanMarks are this process's marks, by the worktree's private git dir
// (unique per slot).
var cleanMarks struct {
	sync.Mutex
	m map[string]cleanMark
}

func putMark(gitDir string, m cleanMark) {
	cleanMarks.Lock()
	defer cleanMarks.Unlock()
	if cleanMarks.m == nil {
		cleanMarks.m = map[string]cleanMark{}
	}
	cleanMarks.m[gitDir] = m
}

// takeMark removes and returns gitDir's mark: a mark is used by one take.
func takeMark(gitDir string) (cleanMark, bool) {
	cleanMarks.Lock()
	defer cleanMarks.Unlock()
	m, ok := cleanMarks.m[gitDir]
	delete(cleanMarks.m, gitDir)
	return m, ok
}

// gitDirState reads what a mark keeps of the worktree's git dir: HEAD and
// the index (the caller hashes it).
func (l *Lease) gitDirState() (head string, index []byte, ok bool) {
	h, err := os.ReadFile(filepath.Join(l.Meta.GitDir, "HEAD"))
	if err != nil {
		return "", nil, false
	}
	ix, err := os.ReadFile(filepath.Join(l.Meta.GitDir, "index"))
	if err != nil {
		return "", nil, false
	}
	return string(h), ix, true
}

// markHere is the mark of the worktree as the lease's last scan saw it,
// when that scan is the state the lease knows clean at base.
func (l *Lease) markHere(base string) *cleanMark {
	head, index, ok := l.gitDirState()
	if !ok || l.scan == nil {
		return nil
	}
	return &cleanMark{base: base, files: l.scan, at: l.scanAt, head: head, index: sha256.Sum256(index)}
}

// stillClean reports whether the worktree, as the take's scan saw it, is
// the marked one at base.
func (l *Lease) stillClean(ctx context.Context, m cleanMark, base string) bool {
	if m.base != base || l.Meta.Base != base || l.scan == nil || !m.files.Equal(l.scan) {
		return false
	}
	head, index, ok := l.gitDirState()
	if !ok || head != m.head || head != base+"\n" || sha256.Sum256(index) != m.index {
		return false
	}
	return l.racyUnchanged(ctx, m, index)
}

// racyUnchanged compares each racy entry of m, and each it names for a
// recheck, with the base: a link's target, a file's content and
// executable bit (the worktree's own .git with what the conductor writes
// there).
//
// index is the worktree's index as stillClean read it (the mark's): the
// modes come from it.
func (l *Lease) racyUnchanged(ctx context.Context, m cleanMark, index []byte) bool {
	since := m.at.Add(-racyWindow).UnixNano()
	var racy []string
	for p, k := range m.files {
		if k.Mode&0o170000 != 0o040000 && (k.Ctime >= since || k.Mtime >= since || m.recheck[p]) {
			racy = append(racy, p)
		}
	}
	if len(racy) > maxRacy {
		return false // git is cheaper than reading that much (a worktree just made)
	}
	var modes map[string]uint32
	blobs := &baseBlobs{ctx: ctx, repo: l.pool.Repo, base: m.base}
	defer blobs.close()
	for _, p := range racy {
		full := filepath.Join(l.Meta.Worktree, filepath.FromSlash(p))
		if p == ".git" {
			b, err := os.ReadFile(full)
			if err != nil || string(b) != "gitdir: "+l.Meta.GitDir+"\n" {
				return false
			}
			continue
		}
		if modes == nil {
			modes = map[string]uint32{}
			if pgit.IndexEntries(index, func(mode uint32, name string) { modes[name] = mode }) != nil {
				return false
			}
		}
		o, err := blobs.get(p)
		if err != nil || o.ID == "" || o.Type != "blob" {
			return false
		}
		fi, err := os.Lstat(full)
		if err != nil {
			return false
		}
		var got []byte
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(full)
			if err != nil {
				return false
			}
			got = []byte(t)
		case fi.Mode().IsRegular():
			if got, err = os.ReadFile(full); err != nil {
				return false
			}
		default:
			return false
		}
		if !bytes.Equal(got, o.Content) || !modeMatches(modes[p], fi.Mode()) {
			return false
		}
	}
	return true
}

// modeMatches compares an entry's type and executable bit with its mode
// in the index (which the mark holds as it was when the worktree was
// verified against the base).
func modeMatches(want uint32, mode fs.FileMode) bool {
	switch want {
	case 0o120000:
		return mode&fs.ModeSymlink != 0
	case 0o100755:
		return mode.IsRegular() && mode.Perm()&0o100 != 0
	case 0o100644:
		return mode.IsRegular() && mode.Perm()&0o100 == 0
	}
	return false
}
