package git

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// Object is one object as read: what was asked (Name), its id ("" when it
// does not exist), type and content.
type Object struct {
	Name    string
	ID      string
	Type    string
	Content []byte
}

// Objects reads objects from one repository: objects named by id (and
// "<id>^{commit}", "<id>^{tree}", "<id>:<path>") through go-git's object
// reader, loose or packed, each checked against its id; everything else —
// refs by name, tags to peel, an object in an alternate, anything damaged
// or that go-git cannot read — through one long-lived `git cat-file
// --batch`, started on first need. Names are resolved when asked (a ref
// read twice can give two answers). Safe for concurrent use.
type Objects struct {
	ctx context.Context
	g   Git

	stMu sync.Mutex // go-git's storage is not safe for concurrent use
	st   *filesystem.Storage

	mu   sync.Mutex // the cat-file process
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	errb bytes.Buffer
	err  error // sticky: the process is unusable after a failed read

	// Answers to names that start with an object id are kept: what they
	// name cannot change (refs are asked again each time).
	cacheMu sync.Mutex
	cache   map[string]Object
}

// LongTimeout bounds git processes that live as long as an operation that
// may wait for something slow (a landing's gate): the cat-file process of
// Objects, an update-ref started early. They touch the object store and
// refs only, never a worktree; DefaultTimeout would end them under a long
// gate.
const LongTimeout = 12 * time.Hour

// maxObjectSize bounds an object read in process (a bigger one is read
// through cat-file).
const maxObjectSize = 64 << 20

// NewObjects returns a reader of g's objects (its common git dir). Close
// ends it.
func NewObjects(ctx context.Context, g Git) *Objects {
	g.Timeout = LongTimeout
	st := filesystem.NewStorageWithOptions(idxInMemory{osfs.New(g.CommonDir())}, cache.NewObjectLRUDefault(),
		filesystem.Options{KeepDescriptors: true, LargeObjectThreshold: maxObjectSize})
	return &Objects{ctx: ctx, g: g, st: st}
}

// Lookup resolves names in a reader of its own and returns their objects in
// order. Missing names have ID "".
func Lookup(ctx context.Context, g Git, names ...string) ([]Object, error) {
	o := NewObjects(ctx, g)
	defer o.Close()
	return o.GetAll(names...)
}

// Get resolves name (a ref, an id, "rev^{commit}", "rev^{tree}",
// "rev:path") and returns its object; ID is "" when it does not exist.
func (b *Objects) Get(name string) (Object, error) {
	if name == "" || strings.ContainsAny(name, "\n\r") {
		return Object{}, fmt.Errorf("lookup: bad object name %q", name)
	}
	byID := len(name) >= 40 && IsObjectID(name[:40])
	if byID {
		b.cacheMu.Lock()
		o, ok := b.cache[name]
		b.cacheMu.Unlock()
		if ok {
			return o, nil
		}
	}
	o, err := b.resolve(name)
	if err == nil && byID && o.ID != "" { // a missing object may appear later
		b.cacheMu.Lock()
		if b.cache == nil {
			b.cache = map[string]Object{}
		}
		b.cache[name] = o
		b.cacheMu.Unlock()
	}
	return o, err
}

// GetAll resolves names in order.
func (b *Objects) GetAll(names ...string) ([]Object, error) {
	objs := make([]Object, 0, len(names))
	for _, n := range names {
		o, err := b.Get(n)
		if err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
	return objs, nil
}

// Has reports whether the repository has the object id (without reading
// it, and without asking an alternate).
func (b *Objects) Has(id string) bool {
	if !IsObjectID(id) {
		return false
	}
	b.stMu.Lock()
	defer b.stMu.Unlock()
	return b.st.HasEncodedObject(plumbing.NewHash(id)) == nil
}

// Close ends the cat-file process, if one was started, and waits for it.
func (b *Objects) Close() {
	if b == nil {
		return
	}
	b.stMu.Lock()
	b.st.Close()
	b.stMu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		b.in.Close()
		b.cmd.Wait()
	}
}

// resolve answers name in process, else through cat-file.
func (b *Objects) resolve(name string) (Object, error) {
	if o, ok := b.local(name); ok {
		return o, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil && b.cmd == nil {
		b.err = b.start()
	}
	if b.err != nil {
		return Object{}, b.err
	}
	obj, err := b.ask(name)
	if err != nil {
		b.err = fmt.Errorf("lookup %s: %w (git: %s)", name, err, strings.TrimSpace(b.errb.String()))
		return Object{}, b.err
	}
	return obj, nil
}

// local answers "<id>", "<id>^{commit}", "<id>^{tree}" and "<id>:<path>"
// in process; ok is false when cat-file must answer (another form, a
// missing object, a tag to peel, cat-file's own path rules).
func (b *Objects) local(name string) (Object, bool) {
	id, rest := name, ""
	if len(name) > 40 {
		id, rest = name[:40], name[40:]
	}
	if !IsObjectID(id) {
		return Object{}, false
	}
	o, ok := b.read(id)
	if !ok {
		return Object{}, false
	}
	o.Name = name
	switch {
	case rest == "":
		return o, true
	case rest == "^{commit}":
		return o, o.Type == "commit"
	case rest == "^{tree}" && o.Type == "tree":
		return o, true
	case rest == "^{tree}" && o.Type == "commit":
		c, err := ParseCommit(o.ID, o.Content)
		if err != nil {
			return Object{}, false
		}
		t, ok := b.read(c.Tree)
		t.Name = name
		return t, ok && t.Type == "tree"
	case strings.HasPrefix(rest, ":") && len(rest) > 1 && o.Type == "tree":
		return b.walk(o, name, rest[1:])
	}
	return Object{}, false
}

// walk follows path from tree o, one folder at a time.
func (b *Objects) walk(o Object, name, path string) (Object, bool) {
	for _, part := range strings.Split(path, "/") {
		if o.Type != "tree" || part == "" || part == "." || part == ".." {
			return Object{}, false // cat-file's own path rules apply
		}
		es, err := ParseTree(o.Content)
		if err != nil {
			return Object{}, false
		}
		i := slices.IndexFunc(es, func(e TreeEntry) bool { return e.Name == part })
		if i < 0 {
			return Object{Name: name}, true // not in the tree
		}
		var ok bool
		if o, ok = b.read(es[i].Hash.String()); !ok {
			return Object{}, false
		}
	}
	o.Name = name
	return o, true
}

// read reads an object through go-git, loose or packed, and checks it
// against its id; false when go-git does not have it or it does not hash
// to its id (cat-file then says what is wrong).
func (b *Objects) read(id string) (Object, bool) {
	h := plumbing.NewHash(id)
	b.stMu.Lock()
	eo, err := b.st.EncodedObject(plumbing.AnyObject, h)
	var raw []byte
	if err == nil && eo.Size() <= maxObjectSize {
		var r io.ReadCloser
		if r, err = eo.Reader(); err == nil {
			raw, err = io.ReadAll(r)
			r.Close()
		}
	} else if err == nil {
		err = errors.New("too large to read in process")
	}
	b.stMu.Unlock()
	if err != nil || int64(len(raw)) != eo.Size() || plumbing.ComputeHash(eo.Type(), raw) != h {
		return Object{}, false
	}
	return Object{ID: id, Type: eo.Type().String(), Content: raw}, true
}

// start starts cat-file; b.mu is held.
func (b *Objects) start() error {
	b.cmd = b.g.Command(b.ctx, "cat-file", "--batch")
	b.cmd.Stderr = &b.errb
	var err error
	if b.in, err = b.cmd.StdinPipe(); err != nil {
		return err
	}
	stdout, err := b.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := b.cmd.Start(); err != nil {
		b.cmd = nil
		return &GitError{Args: []string{"cat-file", "--batch"}, Err: err}
	}
	b.out = bufio.NewReaderSize(stdout, 64<<10)
	return nil
}

// ask asks cat-file for name; b.mu is held.
func (b *Objects) ask(name string) (Object, error) {
	if _, err := io.WriteString(b.in, name+"\n"); err != nil {
		return Object{}, err
	}
	line, err := b.out.ReadString('\n')
	if err != nil {
		return Object{}, fmt.Errorf("short cat-file output: %w", err)
	}
	f := strings.Fields(line)
	if len(f) == 2 && (f[1] == "missing" || f[1] == "ambiguous") {
		return Object{Name: name}, nil
	}
	if len(f) != 3 {
		return Object{}, fmt.Errorf("unexpected cat-file output %q", line)
	}
	size, err := strconv.Atoi(f[2])
	if err != nil || size < 0 {
		return Object{}, fmt.Errorf("bad size in %q", line)
	}
	body := make([]byte, size+1)
	if _, err := io.ReadFull(b.out, body); err != nil {
		return Object{}, fmt.Errorf("short object: %w", err)
	}
	return Object{Name: name, ID: f[0], Type: f[1], Content: body[:size]}, nil
}

// idxInMemory hands go-git a pack's .idx file read whole: go-git's index
// decoder reads it unbuffered, one object id at a time (a read system call
// per object: tens of milliseconds on a repository of some ten thousand
// objects), where one read of the file costs well under one.
type idxInMemory struct{ billy.Filesystem }

func (fs idxInMemory) Open(name string) (billy.File, error) {
	f, err := fs.Filesystem.Open(name)
	if err != nil || !strings.HasSuffix(name, ".idx") {
		return f, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	return &memFile{name: f.Name(), Reader: bytes.NewReader(b)}, nil
}

// memFile is a read-only billy.File over bytes.
type memFile struct {
	name string
	*bytes.Reader
}

func (f *memFile) Name() string              { return f.name }
func (f *memFile) Write([]byte) (int, error) { return 0, errors.New("read-only") }
func (f *memFile) Truncate(int64) error      { return errors.New("read-only") }
func (f *memFile) Close() error              { return nil }
func (f *memFile) Lock() error               { return nil }
func (f *memFile) Unlock() error             { return nil }

// objectsDir is the object store of a git dir.
func objectsDir(gitDir string) string { return filepath.Join(gitDir, "objects") }
