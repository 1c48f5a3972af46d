package runtask

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/conductor-dev/conductor/patch"
	pgit "github.com/conductor-dev/conductor/patch/git"
)

// maxKnownPaths bounds the paths ReleaseKnown puts back one by one; a run
// that changed more is reset by git.
const maxKnownPaths = 256

// ReleaseKnown ends the lease like Release, for a caller that knows every
// path of the worktree that can differ from the base: the worktree was
// taken clean in this process, no command ran in it (so HEAD, the index,
// refs and the stash are as taken), and paths lists what the file tools
// wrote and what the extraction found changed. Those paths are put back in
// process, without git: a tracked one gets its content and mode at the
// base again, an untracked one is removed with the folders it leaves
// empty. Nothing here is trusted: the next take verifies the worktree with
// `git status` (ignored files included) and resets it with git when
// anything is left. A path that cannot be put back this way (a gitlink, a
// folder where a file was, a link on the way) falls back to Release.
func (l *Lease) ReleaseKnown(ctx context.Context, paths []string) error {
	if l.lock == nil {
		return nil
	}
	if l.pool.MaxCount <= 0 || len(paths) > maxKnownPaths || l.headBranch() != "" {
		return l.Release(ctx)
	}
	if err := l.checkHazards(false); err != nil {
		return l.discard(ctx)
	}
	if err := l.restoreDotGit(); err != nil {
		return l.Release(ctx)
	}
	if err := l.restorePaths(ctx, paths); err != nil {
		return l.Release(ctx)
	}
	l.leaveMark(paths)
	return l.free(ctx)
}

// leaveMark leaves a clean mark for the next take in this process when
// the worktree, scanned again, differs from the state it was taken in
// only at the paths just put back: present again where the base has them
// (that take compares their content with the base's), gone where it does
// not. Anything else that differs leaves no mark, and the next take
// asks git.
func (l *Lease) leaveMark(paths []string) {
	v := l.verified
	l.verified = nil
	if v == nil || v.base != l.Meta.Base {
		return
	}
	if err := l.checkHazards(true); err != nil || l.scan == nil {
		return
	}
	put := map[string]bool{}
	for _, p := range paths {
		put[p] = true
	}
	for p, k := range l.scan {
		was, ok := v.files[p]
		switch {
		case !ok:
			return // new since the take
		case put[p]:
			if k.Mode&0o170000 != was.Mode&0o170000 {
				return
			}
		case k != was:
			return
		}
	}
	for p := range v.files {
		if _, ok := l.scan[p]; !ok {
			return // gone since the take
		}
	}
	if m := l.markHere(v.base); m != nil && m.head == v.head && m.index == v.index {
		m.recheck = put
		putMark(l.Meta.GitDir, *m)
	}
}

// baseBlobs reads paths of a lease's base tree, opening the object reader
// at the first read.
type baseBlobs struct {
	ctx  context.Context
	repo patch.Git
	base string
	objs *pgit.Objects
	tree string
}

// get returns the object at p in the base tree (ID "" when it has none).
func (b *baseBlobs) get(p string) (pgit.Object, error) {
	if b.objs == nil {
		b.objs = pgit.NewObjects(b.ctx, b.repo)
		t, err := b.objs.Get(b.base + "^{tree}")
		if err != nil {
			return pgit.Object{}, err
		}
		if t.ID == "" {
			return pgit.Object{}, fmt.Errorf("base %s has no tree", b.base)
		}
		b.tree = t.ID
	}
	return b.objs.Get(b.tree + ":" + p) // by the tree's id: read in process
}

func (b *baseBlobs) close() {
	if b.objs != nil {
		b.objs.Close()
	}
}

// restorePaths puts each path back as the base has it.
func (l *Lease) restorePaths(ctx context.Context, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	paths = slices.Compact(slices.Sorted(slices.Values(paths)))
	index, err := os.ReadFile(filepath.Join(l.Meta.GitDir, "index"))
	if err != nil {
		return err
	}
	if !pgit.IndexSeedable(index) {
		return errors.New("the index is not plain")
	}
	tracked := map[string]uint32{}
	dirs := map[string]bool{} // folders of tracked paths
	err = pgit.IndexEntries(index, func(mode uint32, name string) {
		tracked[name] = mode
		for d := path.Dir(name); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	})
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(l.Meta.Worktree)
	if err != nil {
		return err
	}
	defer root.Close()
	blobs := &baseBlobs{ctx: ctx, repo: l.pool.Repo, base: l.Meta.Base}
	defer blobs.close()
	for _, p := range paths {
		if !restorable(p) {
			return fmt.Errorf("path %q cannot be restored in process", p)
		}
		if err := plainParents(root, p); err != nil {
			return err
		}
		mode, ok := tracked[p]
		if !ok {
			if err := root.RemoveAll(filepath.FromSlash(p)); err != nil {
				return err
			}
			removeEmptyParents(root, p, dirs)
			continue
		}
		if err := restoreTracked(root, blobs, p, mode); err != nil {
			return err
		}
	}
	return nil
}

// restorable reports whether p is a clean relative path outside .git.
func restorable(p string) bool {
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == "." || strings.HasPrefix(p, "../") || p == ".." {
		return false
	}
	first, _, _ := strings.Cut(p, "/")
	return !strings.EqualFold(first, ".git")
}

// plainParents checks that everything on the way to p that exists is a
// folder: a link or file a worker put there is put right by git, never
// followed or replaced here.
func plainParents(root *os.Root, p string) error {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		fi, err := root.Lstat(filepath.FromSlash(d))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return err
		case !fi.IsDir():
			return fmt.Errorf("%s is not a folder", d)
		}
	}
	return nil
}

// removeEmptyParents removes the folders of an untracked path that the base
// does not have, while they are empty.
func removeEmptyParents(root *os.Root, p string, dirs map[string]bool) {
	for d := path.Dir(p); d != "." && !dirs[d]; d = path.Dir(d) {
		if root.Remove(filepath.FromSlash(d)) != nil {
			return // not empty (or gone)
		}
	}
}

// restoreTracked writes a tracked path's content in the base tree with its
// mode.
func restoreTracked(root *os.Root, blobs *baseBlobs, p string, mode uint32) error {
	var perm os.FileMode
	switch mode & 0o170000 {
	case 0o100000:
		perm = 0o644
		if mode&0o111 != 0 {
			perm = 0o755
		}
	case 0o120000:
	default:
		return fmt.Errorf("%s: mode %o is not restored in process", p, mode)
	}
	o, err := blobs.get(p)
	if err != nil {
		return err
	}
	if o.ID == "" || o.Type != "blob" {
		return fmt.Errorf("%s: not a blob at the base", p)
	}
	name := filepath.FromSlash(p)
	if err := root.RemoveAll(name); err != nil {
		return err
	}
	if d := path.Dir(p); d != "." {
		if err := root.MkdirAll(filepath.FromSlash(d), 0o755); err != nil {
			return err
		}
	}
	if perm == 0 {
		return root.Symlink(string(o.Content), name)
	}
	return root.WriteFile(name, o.Content, perm)
}
