package patch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/conductor-dev/conductor/patch/git"
)

// Hazard codes: what a worktree may hold that host git must never see.
const (
	// HazardNestedRepo is a .git file or folder below the worktree's top:
	// git would read its configuration (filters, hooks, fsmonitor) or its
	// HEAD (which may be a named pipe) as a repository's.
	HazardNestedRepo = "nested-repository"
	// HazardSpecialFile is a named pipe, socket or device: opening one can
	// block or reach something outside the worktree.
	HazardSpecialFile = "special-file"
	// HazardUnsafeName is a name with control characters or invalid UTF-8:
	// printed, it can drive the operator's terminal.
	HazardUnsafeName = "unsafe-path-name"
)

// Hazard is one thing found in a worktree by ScanWorktree.
type Hazard struct {
	Code string `json:"code"`
	// Path is slash-separated and relative to the worktree, escaped (see
	// EscapePath) when it is not a safe name.
	Path string `json:"path"`
	// Detail says what was found and what was done about it.
	Detail string `json:"detail,omitempty"`
}

func (h Hazard) String() string {
	if h.Detail == "" {
		return h.Code + " " + h.Path
	}
	return h.Code + " " + h.Path + ": " + h.Detail
}

// ScanOptions says what ScanWorktree does with what it finds.
type ScanOptions struct {
	// Remove deletes every nested .git (file, folder or link) and every
	// special file it finds, so that host git can run on the worktree
	// afterwards: neither can ever be part of a patch. Names are only
	// reported.
	Remove bool
}

// ScanWorktree walks the worktree dir before any host git touches it and
// returns its hazards, in path order: nested repositories (a .git entry at
// any depth below the top), special files (named pipes, sockets, devices)
// and unsafe names (control characters or invalid UTF-8). The top-level
// .git (the worktree's own link, masked in the sandbox) is the conductor's
// and is skipped.
//
// The walk only lists folders and lstats entries: it never opens a file,
// never follows a symbolic link (a folder is opened with O_NOFOLLOW and
// O_DIRECTORY, so a pipe or a link put in its place fails instead of
// blocking or leading elsewhere), and never enters a nested .git.
//
// An error means the worktree could not be scanned (or a hazard could not
// be removed): the caller must not run git on it.
func ScanWorktree(dir string, opts ScanOptions) ([]Hazard, error) {
	s := newScanner(dir, opts)
	return s.run()
}

// ScanWorktreeStats is ScanWorktree (without removing anything) that also
// lstats every entry it lists: the Stats say what the worktree held, to
// be compared with a later scan's. They are nil when an entry could not
// be stat'ed (it went away while the scan ran).
func ScanWorktreeStats(dir string) ([]Hazard, Stats, error) {
	s := newScanner(dir, ScanOptions{})
	s.stats = Stats{}
	hs, err := s.run()
	if err != nil || s.unsteady {
		return hs, nil, err
	}
	return hs, s.stats, nil
}

// StatKey is what lstat says of one entry. A file or link whose key is
// unchanged has not been written, replaced, renamed over, re-moded or
// linked to since, unless within the same tick of the file system's
// clock as the key's ctime: every such change moves the ctime, which no
// call sets back. A folder's key is its type and inode only (its times
// move with its entries, which have keys of their own).
type StatKey struct {
	Mode         uint32
	Dev, Ino     uint64
	Nlink        uint64
	Size         int64
	Mtime, Ctime int64 // nanoseconds
}

// Stats are the keys of a worktree's entries below its top (the top-level
// .git included), by slash path.
type Stats map[string]StatKey

// Equal reports whether both scans saw the same entries with the same keys.
func (a Stats) Equal(b Stats) bool { return maps.Equal(a, b) }

func statKey(st *unix.Stat_t) StatKey {
	k := StatKey{Mode: st.Mode, Dev: st.Dev, Ino: st.Ino}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		k.Nlink, k.Size = uint64(st.Nlink), st.Size
		k.Mtime, k.Ctime = st.Mtim.Nano(), st.Ctim.Nano()
	}
	return k
}

func newScanner(dir string, opts ScanOptions) *scanner {
	s := &scanner{top: dir, opts: opts, more: make(chan struct{}, scanWalkers-1)}
	s.bufs.New = func() any { b := make([]byte, 32<<10); return &b }
	return s
}

func (s *scanner) run() ([]Hazard, error) {
	s.walk("")
	s.wg.Wait()
	// In path order whichever walker found them (stable: a path's own
	// findings keep their order).
	slices.SortStableFunc(s.found, func(a, b Hazard) int { return strings.Compare(a.Path, b.Path) })
	if s.err != nil {
		return s.found, fmt.Errorf("scan worktree %s: %w", s.top, s.err)
	}
	return s.found, nil
}

// scanWalkers is how many folders the scan lists at once: most of its
// time is the kernel's, which several cores share out.
const scanWalkers = 4

type scanner struct {
	top  string
	opts ScanOptions
	more chan struct{} // a token per extra walker
	wg   sync.WaitGroup
	bufs sync.Pool // getdents buffers

	mu       sync.Mutex
	found    []Hazard
	stats    Stats // when asked for: every entry's key
	unsteady bool  // an entry could not be stat'ed: no stats
	err      error // the first
}

func (s *scanner) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

func (s *scanner) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

// walk scans folder rel, handing subfolders to another walker when one is
// free; errors go to s.fail.
func (s *scanner) walk(rel string) {
	if err := s.walkOne(rel); err != nil {
		s.fail(err)
	}
}

// maxScanDepth bounds the folder depth the scan follows; a deeper tree is
// an error (git could not use it either).
const maxScanDepth = 512

func (s *scanner) walkOne(rel string) error {
	if s.failed() {
		return nil
	}
	if strings.Count(rel, "/") >= maxScanDepth {
		return fmt.Errorf("%s: folders nested too deep", EscapePath(rel))
	}
	ents, err := s.list(rel)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name, mode := e.name, e.mode
		// Paths are made only for what needs one (a folder to enter, a
		// hazard): most entries are plain files.
		plain := mode.IsRegular() || mode&fs.ModeSymlink != 0
		safe := SafeName(name)
		if plain && safe && name != ".git" {
			continue
		}
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		full := filepath.Join(s.top, filepath.FromSlash(p))
		if !safe {
			s.add(HazardUnsafeName, p, "a name with control characters or invalid UTF-8")
		}
		if name == ".git" && rel != "" {
			detail := "a nested repository's " + kindOf(mode)
			if s.opts.Remove {
				if err := removeTree(full); err != nil {
					return fmt.Errorf("remove %s: %w", EscapePath(p), bareErr(err))
				}
				detail += " (removed)"
			}
			s.add(HazardNestedRepo, p, detail)
			continue
		}
		switch {
		case rel == "" && name == ".git":
		case mode.IsDir():
			select {
			case s.more <- struct{}{}:
				s.wg.Add(1)
				go func() {
					defer s.wg.Done()
					s.walk(p)
					<-s.more
				}()
			default:
				if err := s.walkOne(p); err != nil {
					return err
				}
			}
		case plain:
		default:
			detail := "a " + kindOf(mode)
			if s.opts.Remove {
				if err := removeTree(full); err != nil {
					return fmt.Errorf("remove %s: %w", EscapePath(p), bareErr(err))
				}
				detail += " (removed)"
			}
			s.add(HazardSpecialFile, p, detail)
		}
	}
	return nil
}

// bareErr is err without the path a *fs.PathError names (a worker's raw
// name must not reach a message unescaped).
func bareErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// removeTree removes p (a file, link or folder tree, never followed
// through a link). Folders a command made unreadable or unwritable to
// their owner (the conductor when it is not root), p's parent included,
// are opened up first.
func removeTree(p string) error {
	err := os.RemoveAll(p)
	if err == nil {
		return nil
	}
	if fi, err := os.Lstat(filepath.Dir(p)); err == nil && fi.IsDir() {
		os.Chmod(filepath.Dir(p), fi.Mode().Perm()|0o700)
	}
	filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(q, 0o700)
		}
		return nil
	})
	return os.RemoveAll(p)
}

// entry is one name in a folder and its type (fs.FileMode type bits).
type entry struct {
	name string
	mode fs.FileMode
}

func (e entry) Name() string      { return e.name }
func (e entry) Type() fs.FileMode { return e.mode }

// list returns the entries of folder rel, sorted by name. The folder is
// opened without following a link and without blocking (a pipe swapped in
// fails O_DIRECTORY) and read with getdents(2): the types come from the
// listing (lstat only where the file system does not say).
func (s *scanner) list(rel string) ([]entry, error) {
	full := filepath.Join(s.top, filepath.FromSlash(rel))
	fd, err := syscall.Open(full, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: EscapePath(full), Err: err}
	}
	defer syscall.Close(fd)
	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	buf := *bp
	var ents []entry
	for {
		n, err := syscall.ReadDirent(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "readdirent", Path: EscapePath(full), Err: err}
		}
		if n <= 0 {
			break
		}
		for b := buf[:n]; len(b) > 0; {
			// struct linux_dirent64: ino u64, off s64, reclen u16,
			// type u8, then the NUL-terminated name.
			const nameOff = 19
			if len(b) < nameOff {
				return nil, fmt.Errorf("%s: short directory entry", EscapePath(full))
			}
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < nameOff || reclen > len(b) {
				return nil, fmt.Errorf("%s: bad directory entry", EscapePath(full))
			}
			rec := b[nameOff:reclen]
			typ := b[18]
			b = b[reclen:]
			name := rec
			if i := bytes.IndexByte(rec, 0); i >= 0 {
				name = rec[:i]
			}
			if len(name) == 0 || string(name) == "." || string(name) == ".." {
				continue
			}
			e := entry{name: string(name)}
			switch typ {
			case syscall.DT_REG:
			case syscall.DT_DIR:
				e.mode = fs.ModeDir
			case syscall.DT_LNK:
				e.mode = fs.ModeSymlink
			case syscall.DT_FIFO:
				e.mode = fs.ModeNamedPipe
			case syscall.DT_SOCK:
				e.mode = fs.ModeSocket
			case syscall.DT_CHR:
				e.mode = fs.ModeDevice | fs.ModeCharDevice
			case syscall.DT_BLK:
				e.mode = fs.ModeDevice
			default: // DT_UNKNOWN: the file system does not say
				fi, err := os.Lstat(filepath.Join(full, e.name))
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err != nil {
					return nil, fmt.Errorf("lstat %s: %w", EscapePath(filepath.Join(full, e.name)), bareErr(err))
				}
				e.mode = fi.Mode().Type()
				if e.mode == 0 && !fi.Mode().IsRegular() {
					e.mode = fs.ModeIrregular
				}
			}
			ents = append(ents, e)
		}
	}
	slices.SortFunc(ents, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	if s.stats != nil {
		// An entry that cannot be stat'ed (gone since the listing) leaves
		// the scan without stats; the hazards are found all the same.
		keys := make([]StatKey, len(ents))
		for i, e := range ents {
			var st unix.Stat_t
			if err := unix.Fstatat(fd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				s.mu.Lock()
				s.unsteady = true
				s.mu.Unlock()
				return ents, nil
			}
			keys[i] = statKey(&st)
		}
		s.mu.Lock()
		for i, e := range ents {
			p := e.name
			if rel != "" {
				p = rel + "/" + e.name
			}
			s.stats[p] = keys[i]
		}
		s.mu.Unlock()
	}
	return ents, nil
}

func (s *scanner) add(code, p, detail string) {
	s.mu.Lock()
	s.found = append(s.found, Hazard{Code: code, Path: EscapePath(p), Detail: detail})
	s.mu.Unlock()
}

func kindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "folder"
	case m.IsRegular():
		return "file"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "special file (" + m.Type().String() + ")"
}

// SafeName reports whether s is valid UTF-8 without control characters
// (C0, DEL, C1): a name that can be printed to a terminal as it is.
func SafeName(s string) bool {
	ascii := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			ascii = false
			break
		}
	}
	if ascii {
		return true
	}
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// EscapePath returns p unchanged when it is a safe name, else with every
// control character and invalid byte written as \xNN (and backslashes
// doubled), so that it can be printed and recorded without reaching a
// terminal as raw bytes.
func EscapePath(p string) string {
	if SafeName(p) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRuneInString(p[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, p[i])
		case r == '\\':
			b.WriteString(`\\`)
		case unicode.IsControl(r) && r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

// IndexGitlinks is git.IndexGitlinks: the gitlink paths of an index file.
func IndexGitlinks(path string) ([]string, error) { return git.IndexGitlinks(path) }
