package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/mod/module"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/runrec"
)

// Warm Go caches (issue 23).
//
// A gate (a review check, a landing gate) and a worker's own commands run
// `go test` on worker-written code, so a Go build cache or module cache they
// can write must never be read by a later gate or by the host. Yet starting
// every gate from an empty cache recompiles the standard library and every
// dependency. The warm cache gives them both:
//
//   - a read-only lower layer, warmed only from the landed target's tip:
//     WarmGo fills the module cache from the host's module cache (only the
//     versions the tree's go.sum hashes, checked against them) and
//     compiles (never runs) the tree with the conductor's own toolchain,
//     in the sandbox (compiling reads files:
//     a cgo preamble can embed any file the compiler sees). Every warming
//     makes a new generation (root/gen-N, a copy of the previous one, then
//     warmed) and switches root/current to it atomically; a generation in
//     use is never changed or removed.
//   - a writable upper layer per scratch folder (one gate, or one run),
//     thrown away with it: an overlayfs mount (the conductor is root and
//     the kernel has overlayfs; the bwrap backend) or a plain copy of the
//     lower (otherwise, and always for docker, whose container would not
//     see a mount made after it started).
//
// Nothing the command writes reaches the lower layer: the lower is never
// bound into a sandbox (only the merged view is), an overlay writes to its
// upper layer, a copy is a copy. Anything wrong with the cache (missing,
// unreadable, a generation that does not match its manifest, a copy that
// does not fit) makes the command run with a cold cache, after one warning
// line; it never fails the command.
const (
	// EnvGoCache names the warm cache folder (conductor.EnvGoCache); "off" turns warm caches
	// off. Unset: DefaultGoCacheDir.
	EnvGoCache = conductor.EnvGoCache

	// warmDirName is the folder a scratch folder's upper layers live in.
	warmDirName  = ".conductor-warm"
	genPrefix    = "gen-"
	manifestName = "manifest.json"
)

// DefaultGoCacheDir is where the warm Go cache lives when EnvGoCache is
// unset: $XDG_CACHE_HOME/conductor/go-warm, else
// $HOME/.cache/conductor/go-warm; "" when neither is set.
func DefaultGoCacheDir(getenv func(string) string) string {
	if v := getenv("XDG_CACHE_HOME"); filepath.IsAbs(v) {
		return filepath.Join(v, "conductor", "go-warm")
	}
	if v := getenv("HOME"); filepath.IsAbs(v) {
		return filepath.Join(v, ".cache", "conductor", "go-warm")
	}
	return ""
}

// goCacheDir is the warm cache folder of the operator's setting (
// conductor.SandboxLimits.GoCache): "off" is none, "" the default folder.
// A folder the operator named is worth a warning when it is missing; the
// default folder before the first `conductor cache warm` is not.
func goCacheDir(v string) string {
	switch v {
	case "off":
		return ""
	case "":
		return DefaultGoCacheDir(os.Getenv)
	}
	return v
}

// manifest is a generation's record: written last, so a generation without
// one is unfinished. Files, Bytes and Digest are checked against the
// folder before each use (openGen): a cache cut short, half removed or
// changed in place, even at the same size, is not used.
type manifest struct {
	Created   time.Time `json:"created"`
	UID       int       `json:"uid"`
	GID       int       `json:"gid"`
	GoVersion string    `json:"goVersion"`
	Trees     []string  `json:"trees"` // what was warmed into it, latest last
	Files     int64     `json:"files"`
	Bytes     int64     `json:"bytes"`
	Digest    string    `json:"digest"` // genList.digest: every file's path, size and content
}

// warmGen is an open, verified generation, locked (shared) against removal
// until release.
type warmGen struct {
	dir          string
	lock         *os.File
	files, bytes int64
}

func (g *warmGen) release() {
	if g != nil && g.lock != nil {
		g.lock.Close() // drops the flock
	}
}

// absRoot refuses a cache folder named by a relative path (a library
// caller's Options; the config file and the environment refuse one): it
// would be found from whatever the current directory is when a command
// starts, a worktree perhaps.
func absRoot(root string) error {
	if !filepath.IsAbs(root) {
		return fmt.Errorf("the cache folder %q is not an absolute path", root)
	}
	return nil
}

// openGen opens the current generation of the warm cache in root for the
// sandbox identity id, after checking it against its manifest: its
// content is hashed unless trustStamp and its stamp says nothing was
// written since it last matched.
func openGen(root string, id identity, trustStamp bool) (*warmGen, error) {
	if err := absRoot(root); err != nil {
		return nil, err
	}
	target, err := os.Readlink(filepath.Join(root, "current"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s holds no warm cache (run `conductor cache warm REPO`): %w", root, fs.ErrNotExist)
		}
		return nil, err
	}
	if strings.ContainsRune(target, '/') || !strings.HasPrefix(target, genPrefix) {
		return nil, fmt.Errorf("%s/current points at %q, not a generation: corrupted", root, target)
	}
	dir := filepath.Join(root, target)
	// The generation is a folder of the cache's own: through a link it
	// could be any folder, which the manifest's check cannot vouch for
	// between the check and the mount.
	if fi, err := os.Lstat(dir); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a folder (%s): corrupted", dir, fi.Mode().Type())
	}
	mpath := filepath.Join(dir, manifestName)
	f, err := openRegular(mpath)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return nil, err
	}
	g := &warmGen{dir: dir, lock: f}
	var m manifest
	if err := json.NewDecoder(f).Decode(&m); err != nil {
		g.release()
		return nil, fmt.Errorf("%s: %v: corrupted", mpath, err)
	}
	if m.UID != id.uid || m.GID != id.gid {
		g.release()
		return nil, fmt.Errorf("%s was warmed for uid %d:%d, the sandbox runs as %d:%d: warm it again", dir, m.UID, m.GID, id.uid, id.gid)
	}
	if m.Digest == "" {
		g.release()
		return nil, fmt.Errorf("%s has no content digest in its manifest (warmed by an older conductor): warm it again", dir)
	}
	l, err := listGen(dir)
	if err != nil {
		g.release()
		return nil, err
	}
	if l.files != m.Files || l.bytes != m.Bytes {
		g.release()
		return nil, fmt.Errorf("%s holds %d files (%d bytes), its manifest says %d (%d bytes): corrupted", dir, l.files, l.bytes, m.Files, m.Bytes)
	}
	// Content as warmed but owners or modes changed since (a copy that did
	// not keep them, say) would fail the command: go could not write its
	// build cache.
	for uid, p := range l.owners {
		if int(uid) != id.uid {
			g.release()
			return nil, fmt.Errorf("%s is owned by uid %d, the sandbox runs as %d: warm it again", p, uid, id.uid)
		}
	}
	if l.unusable != "" {
		g.release()
		return nil, fmt.Errorf("%s: its owner may not use it as go does: warm it again", l.unusable)
	}
	g.files, g.bytes = l.files, l.bytes
	stamp := filepath.Join(dir, stampName)
	if trustStamp && readStamp(stamp) == l.stamp {
		return g, nil
	}
	digest, err := l.digest()
	if err != nil {
		g.release()
		return nil, err
	}
	if digest != m.Digest {
		g.release()
		return nil, fmt.Errorf("%s: the content of its files is not what its manifest says: corrupted", dir)
	}
	if l.settled {
		_ = runrec.WriteFileAtomic(stamp, []byte(l.stamp), 0o600)
	}
	return g, nil
}

// openRegular opens path for reading without blocking and checks that it
// is a regular file: a named pipe in a file's place would otherwise hold
// the gate until something wrote to it.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s is not a file (%s): corrupted", path, fi.Mode().Type())
		}
		return nil, err
	}
	return f, nil
}

// readStamp is the generation's recorded stamp ("" when there is none).
func readStamp(path string) string {
	f, err := openRegular(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 128))
	return string(b)
}

// genList is a generation's two caches as listed: their regular files
// (path relative to the generation, size) and a stamp of their metadata.
type genList struct {
	dir          string
	rel          []string
	files, bytes int64
	// stamp hashes each file's path, size, inode and change times. Every
	// write to a file through the file system moves its ctime, which no
	// program can set back: a generation whose stamp is the one recorded
	// after its content last matched its manifest has not been written to
	// since (media rot below the file system is that file system's to
	// catch).
	stamp string
	// settled: every file's ctime is over stampSettle old, older than any
	// later write can record (ctimes come from a coarse clock); only then
	// is the stamp recorded.
	settled bool
	// owners holds one path per owner uid of the generation's files and
	// folders; unusable, the first one the owner may not use as the go
	// command does (read a file, enter a folder, write in a build cache
	// folder).
	owners   map[uint32]string
	unusable string
}

const (
	stampName   = "verified" // beside the caches, never in them
	stampSettle = 2 * time.Second
)

// listGen lists the regular files of the generation in dir (one lstat
// each, no content read). Anything else but folders is an error: a link
// (the two caches themselves included) or a named pipe is neither counted
// nor hashed, yet a command would follow or open it.
func listGen(dir string) (genList, error) {
	l := genList{dir: dir, settled: true, owners: map[uint32]string{}}
	h := sha256.New()
	settle := time.Now().Add(-stampSettle)
	for _, d := range []string{"gocache", "gomodcache"} {
		err := filepath.WalkDir(filepath.Join(dir, d), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !e.IsDir() && !e.Type().IsRegular() {
				return fmt.Errorf("%s is neither a file nor a folder (%s): corrupted", p, e.Type())
			}
			fi, err := e.Info()
			if err != nil {
				return err
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				if _, seen := l.owners[st.Uid]; !seen {
					l.owners[st.Uid] = p
				}
			}
			need := fs.FileMode(0o400)
			switch {
			case e.IsDir() && d == "gocache":
				need = 0o700
			case e.IsDir():
				need = 0o500
			}
			if fi.Mode().Perm()&need != need && l.unusable == "" {
				l.unusable = fmt.Sprintf("%s (mode %s)", p, fi.Mode().Perm())
			}
			if e.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(dir, p)
			l.rel = append(l.rel, rel)
			l.files, l.bytes = l.files+1, l.bytes+fi.Size()
			st, _ := fi.Sys().(*syscall.Stat_t)
			if st == nil {
				return fmt.Errorf("%s: no inode information", p)
			}
			ctime := time.Unix(st.Ctim.Unix())
			if !ctime.Before(settle) {
				l.settled = false
			}
			fmt.Fprintf(h, "%s\x00%d\x00%d:%d\x00%d\x00%d\n", rel, fi.Size(), st.Dev, st.Ino, fi.ModTime().UnixNano(), ctime.UnixNano())
			return nil
		})
		if err != nil {
			return genList{}, err
		}
	}
	l.stamp = hex.EncodeToString(h.Sum(nil))
	return l, nil
}

// digest hashes the listed files' content: sha256 over each file's path,
// size and sha256, in order. A file gone, added, cut short or changed in
// place (even at the same size, which Go's build cache does not notice: it
// checks an object's size, then compiles against it) changes it. The
// files are hashed on every core. Only regular files are opened, without
// blocking; one that cannot be read is an error.
func (l genList) digest() (string, error) {
	type sum struct {
		size int64
		sum  [sha256.Size]byte
	}
	sums := make([]sum, len(l.rel))
	var next atomic.Int64
	errs := make([]error, min(runtime.GOMAXPROCS(0), len(l.rel)))
	var wg sync.WaitGroup
	for w := range errs {
		wg.Go(func() {
			buf := make([]byte, 128<<10)
			for {
				i := int(next.Add(1) - 1)
				if i >= len(l.rel) || errs[w] != nil {
					return
				}
				sums[i].size, sums[i].sum, errs[w] = hashFile(filepath.Join(l.dir, l.rel[i]), buf)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	h := sha256.New()
	for i, rel := range l.rel {
		fmt.Fprintf(h, "%s\x00%d\x00%x\n", rel, sums[i].size, sums[i].sum)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashFile returns the size and sha256 of the regular file at path.
func hashFile(path string, buf []byte) (int64, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	f, err := openRegular(path)
	if err != nil {
		return 0, sum, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, buf)
	if err != nil {
		return 0, sum, err
	}
	copy(sum[:], h.Sum(nil))
	return n, sum, nil
}

// layerMode is how a scratch folder gets its writable layer over a
// generation.
type layerMode int

const (
	layerCopy    layerMode = iota // a copy of the lower layer
	layerOverlay                  // an overlayfs mount, upper layer in the scratch folder
)

// warmer gives commands their warm caches; one per backend.
type warmer struct {
	root     string
	explicit bool
	id       identity
	allowOv  bool // the backend can use an overlay mount (bwrap); docker copies

	once    sync.Once
	mode    layerMode
	modeWhy string // why overlays are not used, for doctor

	mu     sync.Mutex
	dirs   map[string]layerRef // scratch folder → its layer folder
	warned map[string]bool     // scratch folders told they run cold
}

func newWarmer(o Options, id identity, allowOverlay bool) *warmer {
	return &warmer{root: o.GoCache, explicit: o.GoCacheExplicit, id: id, allowOv: allowOverlay}
}

// probeMode decides once whether overlay mounts work here.
func (w *warmer) probeMode() (layerMode, string) {
	w.once.Do(func() {
		w.mode, w.modeWhy = layerCopy, ""
		switch {
		case !w.allowOv:
			w.modeWhy = "the docker backend copies the warm cache (a container does not see mounts made after it started)"
		case os.Geteuid() != 0:
			w.modeWhy = "the conductor is not root: no overlay mount on the host, the warm cache is copied per gate"
		default:
			if err := probeOverlay(); err != nil {
				w.modeWhy = "overlayfs does not mount here (" + err.Error() + "): the warm cache is copied per gate"
			} else {
				w.mode = layerOverlay
			}
		}
	})
	return w.mode, w.modeWhy
}

// probeOverlay mounts and unmounts one overlay in a temporary folder.
func probeOverlay() error {
	d, err := os.MkdirTemp("", "conductor-ovl-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(d)
	for _, s := range []string{"l", "u", "w", "m"} {
		if err := os.Mkdir(filepath.Join(d, s), 0o700); err != nil {
			return err
		}
	}
	m := filepath.Join(d, "m")
	if err := syscall.Mount("overlay", m, "overlay", syscall.MS_NOSUID|syscall.MS_NODEV,
		"lowerdir="+filepath.Join(d, "l")+",upperdir="+filepath.Join(d, "u")+",workdir="+filepath.Join(d, "w")); err != nil {
		return err
	}
	return syscall.Unmount(m, syscall.MNT_DETACH)
}

// warmLayer is a command's warm caches: the variables that point at them,
// the binds that show them and what to undo after the command.
type warmLayer struct {
	env     [][2]string
	binds   [][2]string // host folder, where it appears inside
	cleanup func()
}

// layer prepares scratch's warm layer for one command, or explains (in one
// line on warn, once per scratch folder) why the command runs cold.
// writable are the host folders the command may write, env its
// environment (for GOFLAGS). A nil layer means cold.
func (w *warmer) layer(scratch string, writable []string, env [][2]string, warn io.Writer) *warmLayer {
	if w == nil || w.root == "" || scratch == "" {
		return nil
	}
	l, err := w.prepare(scratch, writable, env)
	if err == nil {
		return l
	}
	if !w.explicit && errors.Is(err, fs.ErrNotExist) && !pathExists(filepath.Join(w.root, "current")) {
		return nil // never warmed here: cold, as before warm caches existed
	}
	w.mu.Lock()
	warned := w.warned[scratch]
	if w.warned == nil {
		w.warned = map[string]bool{}
	}
	w.warned[scratch] = true
	w.mu.Unlock()
	if !warned && warn != nil {
		fmt.Fprintf(warn, "conductor: warm Go cache not used, running with a cold cache: %v\n", err)
	}
	return nil
}

// layersRoot is where upper layers (or copies) live: a folder of the
// conductor's in the system's temporary folder, which the sandbox uid can
// traverse (mode 0711) but not list or change, with one folder of a random
// name per scratch folder. Never inside the scratch folder: a command
// could swap a folder there for a link before the next mount.
func (w *warmer) layersRoot() (string, error) { return layersRootDir() }

func layersRootDir() (string, error) {
	d := filepath.Join(os.TempDir(), "conductor-warm-"+strconv.Itoa(os.Geteuid()))
	if err := os.Mkdir(d, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	fi, err := os.Lstat(d)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("%s is not a folder of the conductor's that only it may change: not used", d)
	}
	return d, nil
}

// layerRef is a scratch folder's layer folder, and which folder (device
// and inode) the scratch folder was when the layer was made.
type layerRef struct {
	dir      string
	dev, ino uint64
}

// layerDir returns scratch's layer folder, making it on first use. The
// layer belongs to the folder, not to its path: a scratch folder removed
// and made again at the same path (another gate) gets a new layer, never
// what the earlier one's commands wrote.
func (w *warmer) layerDir(scratch string) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(scratch, &st); err != nil {
		return "", err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := w.dirs[scratch]; ok {
		if r.dev == uint64(st.Dev) && r.ino == st.Ino && pathExists(r.dir) {
			return r.dir, nil
		}
		if !mountedUnder(r.dir) {
			_ = removeTree(r.dir)
		}
	}
	root, err := w.layersRoot()
	if err != nil {
		return "", err
	}
	d, err := newOwnedDir(root, "l-", scratch)
	if err != nil {
		return "", err
	}
	if w.dirs == nil {
		w.dirs = map[string]layerRef{}
	}
	w.dirs[scratch] = layerRef{dir: d, dev: uint64(st.Dev), ino: st.Ino}
	return d, nil
}

// newOwnedDir makes a folder of a random name in the layers root (after
// reaping the dead ones), mode 0711, with an owner file naming this
// process and the folder it serves ("": itself), which reapLayers reads: it
// is removed once either is gone.
func newOwnedDir(root, prefix, serves string) (string, error) {
	reapLayers(root)
	d, err := os.MkdirTemp(root, prefix)
	if err != nil {
		return "", err
	}
	if serves == "" {
		serves = d
	}
	owner := fmt.Sprintf("%d %s\n%s", os.Getpid(), procStart(os.Getpid()), serves)
	err = os.Chmod(d, 0o711)
	if err == nil {
		err = os.WriteFile(filepath.Join(d, "owner"), []byte(owner), 0o600)
	}
	if err != nil {
		_ = os.RemoveAll(d)
		return "", err
	}
	return d, nil
}

// reapLayers removes the layer folders whose scratch folder is gone or
// whose conductor process is (a crash mid-command can leave a mount).
func reapLayers(root string) {
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		d := filepath.Join(root, e.Name())
		b, err := os.ReadFile(filepath.Join(d, "owner"))
		if err != nil {
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
				unmountUnder(d)
				_ = removeTree(d)
			}
			continue
		}
		head, scratch, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(head)
		alive := false
		if len(f) == 2 {
			if pid, _ := strconv.Atoi(f[0]); pid > 0 && procStart(pid) == f[1] {
				alive = true
			}
		}
		if alive && pathExists(scratch) {
			continue
		}
		if alive && mountedUnder(d) {
			continue // a command of a live conductor is running in it
		}
		unmountUnder(d)
		_ = removeTree(d)
	}
}

// mountedUnder lists the mount points at or below dir.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var ms []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && within(f[4], dir) {
			ms = append(ms, f[4])
		}
	}
	return ms
}

func mountedUnder(dir string) bool { return len(mountsUnder(dir)) > 0 }

func unmountUnder(dir string) {
	ms := mountsUnder(dir)
	sort.Sort(sort.Reverse(sort.StringSlice(ms)))
	for _, m := range ms {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
}

func (w *warmer) prepare(scratch string, writable []string, env [][2]string) (*warmLayer, error) {
	// A cache folder in one the command can write (named inside a
	// worktree, say) is a lower layer a worker could change while a gate
	// reads it.
	if real, err := filepath.Abs(w.root); err == nil {
		if r, err := filepath.EvalSymlinks(real); err == nil {
			real = r
		}
		for _, d := range writable {
			if d != "" && within(real, d) {
				return nil, fmt.Errorf("%s lies in %s, which the command can write", w.root, d)
			}
		}
	}
	g, err := openGen(w.root, w.id, true)
	if err != nil {
		return nil, err
	}
	base, err := w.layerDir(scratch)
	if err != nil {
		g.release()
		return nil, err
	}
	// The layer belongs to one generation: a scratch folder that last
	// used another starts its layer again.
	genFile := filepath.Join(base, "generation")
	if b, err := os.ReadFile(genFile); err == nil && string(b) != filepath.Base(g.dir) {
		for _, n := range []string{"gocache", "gomodcache"} {
			if err := removeTree(filepath.Join(base, n)); err != nil {
				g.release()
				return nil, err
			}
		}
	}
	if err := os.WriteFile(genFile, []byte(filepath.Base(g.dir)), 0o600); err != nil {
		g.release()
		return nil, err
	}
	mode, _ := w.probeMode()
	if err := layerRoom(base, mode, g.bytes); err != nil {
		g.release()
		return nil, err
	}
	var mounted []string
	undo := func() {
		for _, m := range mounted {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
		g.release()
	}
	l := &warmLayer{cleanup: undo}
	for _, name := range []string{"gocache", "gomodcache"} {
		lower := filepath.Join(g.dir, name)
		d := filepath.Join(base, name)
		inside := filepath.Join(scratch, warmDirName, name)
		switch mode {
		case layerOverlay:
			up, work, m := filepath.Join(d, "upper"), filepath.Join(d, "work"), filepath.Join(d, "merged")
			for _, x := range []string{d, up, work, m} {
				if err := os.Mkdir(x, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
					undo()
					return nil, err
				}
			}
			// The merged root takes the upper root's owner: the
			// sandbox uid writes there.
			if err := os.Chown(up, w.id.uid, w.id.gid); err != nil {
				undo()
				return nil, err
			}
			if err := os.Chmod(up, 0o755); err != nil {
				undo()
				return nil, err
			}
			opts := "lowerdir=" + lower + ",upperdir=" + up + ",workdir=" + work
			if err := syscall.Mount("overlay", m, "overlay", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
				undo()
				return nil, fmt.Errorf("overlay mount of %s: %w", lower, err)
			}
			mounted = append(mounted, m)
			l.binds = append(l.binds, [2]string{m, inside})
		default:
			m := filepath.Join(d, "copy")
			if !pathExists(filepath.Join(d, "complete")) {
				if err := removeTree(d); err != nil {
					undo()
					return nil, err
				}
				if err := os.Mkdir(d, 0o711); err != nil {
					undo()
					return nil, err
				}
				if err := copyTree(lower, m); err != nil {
					_ = removeTree(d)
					undo()
					return nil, fmt.Errorf("copy the warm cache (%s): %w", lower, err)
				}
				if err := os.WriteFile(filepath.Join(d, "complete"), nil, 0o600); err != nil {
					undo()
					return nil, err
				}
			}
			l.binds = append(l.binds, [2]string{m, inside})
		}
		v := "GOCACHE"
		if name == "gomodcache" {
			v = "GOMODCACHE"
		}
		l.env = append(l.env, [2]string{v, inside})
	}
	goflags := ""
	for _, kv := range env {
		if kv[0] == "GOFLAGS" {
			goflags = kv[1]
		}
	}
	l.env = append(l.env, [2]string{"GOFLAGS", withTrimpath(goflags)})
	return l, nil
}

// minLayerFree is the room a writable layer must have for a command's own
// compiling (what the gate builds of the worker's change and what depends
// on it).
const minLayerFree = 128 << 20

// layerRoom refuses a layer folder whose file system is (nearly) full: the
// layer could be made, but the command's own cache writes would then fail
// in it (ENOSPC; go reports "cannot find package") and fail the command
// because of the cache. A copy needs the generation's bytes on top, unless
// the folder already holds one.
func layerRoom(base string, mode layerMode, genBytes int64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(base, &st); err != nil {
		return err
	}
	need := int64(minLayerFree)
	if mode == layerCopy && !pathExists(filepath.Join(base, "gocache", "complete")) {
		need += genBytes
	}
	if free := int64(st.Bavail) * st.Bsize; free < need {
		return fmt.Errorf("%s has %s free, a layer needs %s: full", base, bytesize(free), bytesize(need))
	}
	return nil
}

// withTrimpath adds -trimpath to GOFLAGS: without it the build cache keys
// hold each package's folder, and every gate's tree lives in a folder of
// its own (nothing would ever hit).
func withTrimpath(goflags string) string {
	for _, f := range strings.Fields(goflags) {
		if f == "-trimpath" || f == "-trimpath=true" {
			return goflags
		}
	}
	return strings.TrimSpace(goflags + " -trimpath")
}

// copyTree copies src to dst (which must not exist): cp -a, which clones
// with reflinks where the file system can and keeps the owner when root.
// Never hard links: a command could write through one into the lower
// layer.
func copyTree(src, dst string) error {
	out, err := exec.Command("cp", "-a", "--reflink=auto", "--", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cp: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// removeTree removes dir, making read-only folders (the module cache's)
// writable first.
func removeTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// WarmOptions is one warming of the warm Go cache.
type WarmOptions struct {
	Tree    string              // the trusted tree: the landed target's tip, exported
	Getenv  func(string) string // the conductor's environment (GOFLAGS, CGO_ENABLED, PATH and the host module cache)
	Sandbox Options             // the identity and the cache folder (GoCache)
	// Box compiles the tree (nil: a new sandbox of Sandbox's options, bwrap
	// or docker): the landed tree is a worker's code, never compiled on the
	// host.
	Box   Sandbox
	Log   io.Writer // progress and warnings (each go command's failure)
	Label string    // what Tree is, recorded in the manifest ("repo@commit")
	// Timeout bounds each go command; 0: 20 minutes.
	Timeout time.Duration
}

// WarmResult says what a warming did.
type WarmResult struct {
	Dir      string        `json:"dir"`   // the new generation
	Files    int64         `json:"files"` // in it
	Bytes    int64         `json:"bytes"`
	Removed  []string      `json:"removed"` // older generations removed (none in use)
	Duration time.Duration `json:"duration"`
	Warnings []string      `json:"warnings,omitempty"` // go commands that failed (the cache is warm for what compiled)
}

// maxWarmModules bounds the modules one warming compiles: a tree is a
// worker's, and each module costs a download and three compiles.
const maxWarmModules = 16

// goModule is one folder of a tree a warming compiles in.
type goModule struct {
	dir      string // slash-separated, relative to the tree ("." for its root)
	hasGoMod bool   // false: the root's go.work alone
}

// args is a go command's arguments run in the module's folder from the
// tree's root.
func (m goModule) args(args ...string) []string {
	if m.dir == "." {
		return args
	}
	return append([]string{"-C", m.dir}, args...)
}

// goModules lists the tree's Go modules, the root first, then in path
// order: each folder holding a go.mod that is a regular file, and the root
// when it holds only a go.work. It follows no link and, as the go command,
// skips vendor and testdata folders and those whose names start with "."
// or "_" (and node_modules). skipped counts those beyond maxWarmModules.
func goModules(tree string) (mods []goModule, skipped int) {
	regular := func(p string) bool {
		fi, err := os.Lstat(p)
		return err == nil && fi.Mode().IsRegular()
	}
	if !regular(filepath.Join(tree, "go.mod")) && regular(filepath.Join(tree, "go.work")) {
		mods = append(mods, goModule{dir: "."})
	}
	_ = filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil // an unreadable folder is not warmed; nothing else is looked at
		}
		name := d.Name()
		if p != tree && (name == "vendor" || name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if !regular(filepath.Join(p, "go.mod")) {
			return nil
		}
		rel, err := filepath.Rel(tree, p)
		if err != nil {
			return nil
		}
		if len(mods) == maxWarmModules {
			skipped++
			return nil
		}
		mods = append(mods, goModule{dir: filepath.ToSlash(rel), hasGoMod: true})
		return nil
	})
	return mods, skipped
}

// WarmGo warms a new generation of the warm Go cache from the landed tip
// and makes it current. It compiles and never runs: `go mod download` on
// the host (from the host's module cache only, as a file proxy of the
// versions the tree's go.sum files pin; no network, no version control),
// then in the sandbox `go build ./...`,
// `go vet ./...` and `go test -exec=/bin/true ./...` (test binaries are
// linked, never started; test results are not cached), with the gate's Go
// settings (-trimpath, GOTOOLCHAIN=local, GOENV=off, a fresh HOME). A go
// command that fails is a warning: what compiled is warm. Each of the
// tree's modules (goModules) is warmed so, the root's first.
func WarmGo(ctx context.Context, o WarmOptions) (WarmResult, error) {
	start := time.Now()
	var res WarmResult
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	so := o.Sandbox
	root := so.GoCache
	if root == "" {
		return res, fmt.Errorf("warm Go cache: no cache folder (%s=off, or neither HOME nor XDG_CACHE_HOME is set)", EnvGoCache)
	}
	if err := absRoot(root); err != nil {
		return res, fmt.Errorf("warm Go cache: %w", err)
	}
	id, err := so.identity()
	if err != nil {
		return res, err
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Timeout <= 0 {
		o.Timeout = 20 * time.Minute
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return res, fmt.Errorf("warm Go cache: %w", err)
	}
	// Only the conductor may reach the generations: nothing but the
	// overlay (or a copy) ever shows them to a sandbox.
	if err := os.Chmod(root, 0o700); err != nil {
		return res, fmt.Errorf("warm Go cache: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(root, "warm.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return res, fmt.Errorf("warm Go cache: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return res, fmt.Errorf("warm Go cache: lock: %w", err)
	}

	box := o.Box
	if box == nil {
		b, err := NewWithOptions(BackendAuto, so)
		if err != nil {
			return res, fmt.Errorf("warm Go cache: the landed code is compiled in the sandbox: %w", err)
		}
		defer Close(b)
		box = b
	}
	if box.Name() == BackendNone {
		return res, errors.New("warm Go cache: the landed code is compiled in a sandbox, not with --sandbox none")
	}

	gen := filepath.Join(root, fmt.Sprintf("%s%d", genPrefix, time.Now().UnixNano()))
	tmp := gen + ".tmp"
	// The stage is where go runs, in the sandbox: a copy of the current
	// generation (never links into it) in a folder the sandbox uid can
	// reach, copied back as the new generation when the compiling is done.
	lroot, err := layersRootDir()
	if err != nil {
		return res, fmt.Errorf("warm Go cache: %w", err)
	}
	owned, err := newOwnedDir(lroot, "w-", "")
	if err != nil {
		return res, fmt.Errorf("warm Go cache: %w", err)
	}
	defer removeTree(owned)
	stage := filepath.Join(owned, "stage") // the sandbox's; the owner file beside it is not
	if err := os.Mkdir(stage, 0o755); err != nil {
		return res, fmt.Errorf("warm Go cache: %w", err)
	}
	var prev manifest
	// The generation copied is hashed in full, stamp or not: a warming
	// never builds on (and blesses with a new digest) content that rotted
	// under its stamp.
	if cur, err := openGen(root, id, false); err == nil {
		if b, err := os.ReadFile(filepath.Join(cur.dir, manifestName)); err == nil {
			_ = json.Unmarshal(b, &prev)
		}
		for _, c := range []string{"gocache", "gomodcache"} {
			if err == nil {
				err = copyTree(filepath.Join(cur.dir, c), filepath.Join(stage, c))
			}
		}
		cur.release()
		if err != nil {
			return res, fmt.Errorf("warm Go cache: copy %s: %w", cur.dir, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(o.Log, "conductor: the current warm cache is not reused (%v): warming from empty\n", err)
	}
	for _, d := range []string{"gocache", "gomodcache", "home", "tmp"} {
		if err := os.MkdirAll(filepath.Join(stage, d), 0o755); err != nil {
			return res, fmt.Errorf("warm Go cache: %w", err)
		}
	}

	// The go environment: the gates' own (GateEnv) with the stage's caches.
	env := append(GateEnv(getenv, stage),
		"GOCACHE="+filepath.Join(stage, "gocache"),
		"GOMODCACHE="+filepath.Join(stage, "gomodcache"),
		"GOFLAGS="+withTrimpath(getenv("GOFLAGS")),
		"GOENV=off", "GOSUMDB=off", "GOTOOLCHAIN=local",
	)
	var warnings []string
	// report logs a go command's end: its time, or its failure as a
	// warning.
	report := func(args []string, t0 time.Time, err error, out []byte) {
		if err == nil {
			fmt.Fprintf(o.Log, "conductor: warm: go %s (%.1fs)\n", strings.Join(args, " "), time.Since(t0).Seconds())
			return
		}
		w := fmt.Sprintf("go %s: %v: %s", strings.Join(args, " "), err, lastLine(out))
		warnings = append(warnings, w)
		fmt.Fprintln(o.Log, "conductor: warm:", w)
	}
	// Every module of the tree is warmed, the root's first: a repository
	// with modules in subfolders (or a go.work at its root) has gates that
	// build each of them.
	mods, skipped := goModules(o.Tree)
	if skipped > 0 {
		warnings = append(warnings, fmt.Sprintf("%d more modules not warmed (at most %d)", skipped, maxWarmModules))
		fmt.Fprintln(o.Log, "conductor: warm:", warnings[len(warnings)-1])
	}
	if len(mods) == 0 {
		// Without a module every go command fails the same way: one line
		// says so, not three failures.
		const none = "no go.mod or go.work in the tree: nothing compiled"
		warnings = append(warnings, none)
		fmt.Fprintln(o.Log, "conductor: warm:", none)
	}
	proxy := "off"
	if len(mods) > 0 {
		if dl := hostModuleDownloads(ctx, getenv); dl != "" {
			if proxy, err = pinnedModuleProxy(dl, o.Tree, mods, filepath.Join(owned, "proxy")); err != nil {
				return res, fmt.Errorf("warm Go cache: module proxy: %w", err)
			}
		}
	}
	// Every download first: the conductor writes into the stage and reads
	// the tree only before any sandboxed command could write either.
	for _, mod := range mods {
		if ctx.Err() != nil {
			break
		}
		downloadModule(ctx, o, env, proxy, mod, report)
	}
	for _, mod := range mods {
		if ctx.Err() != nil {
			break
		}
		compileModule(ctx, o, box, env, stage, mod, report)
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	gover := goVersion(env)
	// The new generation: the stage's two caches, copied (only they: go
	// may have left its own files in the stage's HOME and TMPDIR).
	for _, c := range []string{"gocache", "gomodcache"} {
		err := os.MkdirAll(tmp, 0o755)
		if err == nil {
			err = copyTree(filepath.Join(stage, c), filepath.Join(tmp, c))
		}
		if err != nil {
			_ = removeTree(tmp)
			return res, fmt.Errorf("warm Go cache: %w", err)
		}
	}
	if id.drop { // the sandbox uid's, as the stage was
		if err := handOver(tmp, id); err != nil {
			_ = removeTree(tmp)
			return res, fmt.Errorf("warm Go cache: %w", err)
		}
	}
	// The files settle before they are listed, so that the stamp can be
	// recorded with the digest and the first gate need not hash them
	// again.
	select {
	case <-ctx.Done():
		_ = removeTree(tmp)
		return res, ctx.Err()
	case <-time.After(stampSettle + 10*time.Millisecond):
	}
	l, err := listGen(tmp)
	if err != nil {
		_ = removeTree(tmp)
		return res, fmt.Errorf("warm Go cache: %w", err)
	}
	digest, err := l.digest()
	if err != nil {
		_ = removeTree(tmp)
		return res, fmt.Errorf("warm Go cache: %w", err)
	}
	files, bytes := l.files, l.bytes
	m := manifest{Created: time.Now().UTC(), UID: id.uid, GID: id.gid, GoVersion: gover,
		Trees: append(lastN(prev.Trees, 19), o.Label), Files: files, Bytes: bytes, Digest: digest}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := writeFileSync(filepath.Join(tmp, manifestName), append(b, '\n')); err != nil {
		_ = removeTree(tmp)
		return res, fmt.Errorf("warm Go cache: %w", err)
	}
	if l.settled {
		if err := writeFileSync(filepath.Join(tmp, stampName), []byte(l.stamp)); err != nil {
			_ = removeTree(tmp)
			return res, fmt.Errorf("warm Go cache: %w", err)
		}
	}
	if err := os.Rename(tmp, gen); err != nil {
		_ = removeTree(tmp)
		return res, fmt.Errorf("warm Go cache: %w", err)
	}
	link := filepath.Join(root, "current.tmp")
	_ = os.Remove(link)
	if err := os.Symlink(filepath.Base(gen), link); err != nil {
		return res, fmt.Errorf("warm Go cache: %w", err)
	}
	if err := os.Rename(link, filepath.Join(root, "current")); err != nil {
		return res, fmt.Errorf("warm Go cache: %w", err)
	}
	syncDir(root)
	res.Removed = pruneGens(root, filepath.Base(gen))
	res.Dir, res.Files, res.Bytes, res.Warnings = gen, files, bytes, warnings
	res.Duration = time.Since(start)
	return res, nil
}

// pruneGens removes the generations other than keep that no command holds,
// and every unfinished one (gen-N.tmp: the caller holds the warming lock,
// so each is a crashed warming's).
func pruneGens(root, keep string) []string {
	ents, _ := os.ReadDir(root)
	var removed []string
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, genPrefix) || n == keep {
			continue
		}
		dir := filepath.Join(root, n)
		// Without blocking: a named pipe in the manifest's place would hold
		// the warming.
		f, err := os.OpenFile(filepath.Join(dir, manifestName), os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
				f.Close()
				continue // in use by a gate
			}
		}
		if removeTree(dir) == nil {
			removed = append(removed, dir)
		}
		if f != nil {
			f.Close()
		}
	}
	sort.Strings(removed)
	return removed
}

// downloadModule downloads mod's modules into the stage's module cache,
// reporting the go command's end.
func downloadModule(ctx context.Context, o WarmOptions, env []string, proxy string, mod goModule, report func(args []string, t0 time.Time, err error, out []byte)) {
	// Downloading runs on the host: it reads go.mod and go.sum and copies
	// checked module files from the host's module cache (a file proxy, no
	// network, no version control), and compiles nothing.
	if !mod.hasGoMod {
		return
	}
	args := mod.args("mod", "download")
	cctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, "go", args...)
	cmd.Dir = o.Tree
	cmd.Env = append(env, "GOPROXY="+proxy, "GOVCS=*:off", "TMPDIR="+os.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	report(args, t0, err, out)
}

// compileModule compiles mod into the stage's caches, in the sandbox,
// reporting each go command's end.
func compileModule(ctx context.Context, o WarmOptions, box Sandbox, env []string, stage string, mod goModule, report func(args []string, t0 time.Time, err error, out []byte)) {
	// Compiling runs in the sandbox: the landed tree is a worker's code,
	// and compiling reads files (a cgo preamble's .incbin, a replace with a
	// host path) into the objects every later command sees. The whole tree
	// is the sandbox's folder (a module may replace another with a relative
	// path); go -C enters the module.
	for _, args := range [][]string{mod.args("build", "./..."), mod.args("vet", "./..."), mod.args("test", "-exec=/bin/true", "-run=^$", "-count=1", "./...")} {
		t0 := time.Now()
		r, err := box.Run(ctx, Spec{Dir: o.Tree, Scratch: stage, Argv: append([]string{"go"}, args...), Env: env, Timeout: o.Timeout, OutputLimit: 1 << 20})
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("exit status %d", r.ExitCode)
		}
		report(args, t0, err, r.Output)
	}
}

// hostModuleDownloads is the host module cache's download folder (a
// module proxy's layout), or "" when there is none.
func hostModuleDownloads(ctx context.Context, getenv func(string) string) string {
	dir := getenv("GOMODCACHE")
	if dir == "" {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, "go", "env", "GOMODCACHE")
		cmd.Env = []string{"PATH=" + getenv("PATH"), "HOME=" + getenv("HOME"), "GOPATH=" + getenv("GOPATH")}
		if out, err := cmd.Output(); err == nil {
			dir = strings.TrimSpace(string(out))
		}
	}
	dl := filepath.Join(dir, "cache", "download")
	if dir == "" || !pathExists(dl) {
		return ""
	}
	return dl
}

// pinnedModuleProxy is GOPROXY for warming: a file proxy in dir holding
// only the module versions the tree's go.sum and go.work.sum files hash,
// linked from the host module cache's download folder dl, then off (never
// the network). go checks each download against those hashes. The host's
// cache may hold the operator's private modules: with GOSUMDB off, a tree
// naming one in its go.mod without its hash had go trust whatever the
// proxy served (adding the hash itself), and the module ended up in the
// cache every later gate and worker command reads. A hash is the content:
// a tree can pin only what its author already has.
func pinnedModuleProxy(dl, tree string, mods []goModule, dir string) (string, error) {
	t, err := os.OpenRoot(tree)
	if err != nil {
		return "", err
	}
	defer t.Close()
	sums := []string{"go.work.sum"}
	for _, m := range mods {
		sums = append(sums, path.Join(m.dir, "go.sum"))
	}
	n := 0
	for _, name := range sums {
		// Through the tree's root, without blocking: a link out of the
		// tree or a named pipe is not read.
		f, err := t.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		fi, err := f.Stat()
		var b []byte
		if err == nil && fi.Mode().IsRegular() {
			b, _ = io.ReadAll(io.LimitReader(f, 16<<20))
		}
		f.Close()
		for _, line := range strings.Split(string(b), "\n") {
			fs := strings.Fields(line)
			if len(fs) != 3 || !strings.HasPrefix(fs[2], "h1:") {
				continue
			}
			ver, modOnly := strings.CutSuffix(fs[1], "/go.mod")
			// Escaped as a proxy names them; a path or version go would
			// refuse (an element "..", say) is skipped.
			mp, err1 := module.EscapePath(fs[0])
			ev, err2 := module.EscapeVersion(ver)
			if err1 != nil || err2 != nil {
				continue
			}
			exts := []string{".info", ".mod", ".zip"}
			if modOnly {
				exts = exts[:2]
			}
			for _, ext := range exts {
				src := filepath.Join(dl, filepath.FromSlash(mp), "@v", ev+ext)
				dst := filepath.Join(dir, filepath.FromSlash(mp), "@v", ev+ext)
				if fi, err := os.Lstat(src); err != nil || !fi.Mode().IsRegular() || pathExists(dst) {
					continue
				}
				if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
					return "", err
				}
				if err := os.Symlink(src, dst); err != nil {
					return "", err
				}
				n++
			}
		}
	}
	if n == 0 {
		return "off", nil
	}
	return "file://" + dir + ",off", nil
}

func goVersion(env []string) string {
	cmd := exec.Command("go", "env", "GOVERSION")
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func lastN(s []string, n int) []string {
	if len(s) > n {
		return append([]string(nil), s[len(s)-n:]...)
	}
	return append([]string(nil), s...)
}

func lastLine(out []byte) string {
	s := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		_ = f.Sync()
		f.Close()
	}
}

// WarmReport is what doctor says about warm caches.
type WarmReport struct {
	Dir     string `json:"dir"`
	Works   bool   `json:"works"`
	Mode    string `json:"mode"` // "overlay", "copy" or "" (not usable)
	Detail  string `json:"detail"`
	Current string `json:"current,omitempty"`
	Files   int64  `json:"files,omitempty"`
	Bytes   int64  `json:"bytes,omitempty"`
}

// ProbeWarm says whether warm caches work here for the named backend
// (bwrap overlays; docker copies) and why not.
func ProbeWarm(o Options, backend string) WarmReport {
	r := WarmReport{Dir: o.GoCache}
	if o.GoCache == "" {
		r.Detail = "off (" + EnvGoCache + "=off, or no HOME): every gate compiles from a cold cache"
		return r
	}
	id, err := o.identity()
	if err != nil {
		r.Detail = err.Error()
		return r
	}
	w := newWarmer(o, id, backend != BackendDocker)
	mode, why := w.probeMode()
	r.Mode = "copy"
	if mode == layerOverlay {
		r.Mode = "overlay"
	}
	g, err := openGen(o.GoCache, id, true)
	if err != nil {
		r.Detail = "not usable, gates compile from a cold cache: " + err.Error()
		return r
	}
	defer g.release()
	r.Current = g.dir
	r.Files, r.Bytes = g.files, g.bytes
	lr, err := w.layersRoot()
	if err == nil {
		err = layerRoom(lr, mode, g.bytes)
	}
	if err != nil {
		r.Detail = "not usable, gates compile from a cold cache: " + err.Error()
		return r
	}
	r.Works = true
	r.Detail = g.dir + ": "
	if why != "" {
		r.Detail += why
	} else {
		r.Detail += "an overlayfs upper layer per gate and per run over this generation, thrown away after"
	}
	return r
}

// State is the report's one word for people, with the mode and size when
// it works: "works (overlay, 58 MiB in 1023 files)", "unavailable".
func (r WarmReport) State() string {
	if !r.Works {
		return "unavailable"
	}
	return "works (" + r.Mode + ", " + bytesize(r.Bytes) + " in " + strconv.FormatInt(r.Files, 10) + " files)"
}

// cmpWarn is the command's warning writer: its own, else the backend's.
func cmpWarn(spec, opts io.Writer) io.Writer {
	if spec != nil {
		return spec
	}
	return opts
}
