package land

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	gitobject "github.com/go-git/go-git/v5/plumbing/object"

	"github.com/conductor-dev/conductor/patch"
)

// emptyTree is the id of the empty tree (SHA-1 repositories).
const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// object is one answer of `git cat-file --batch`.
type object struct {
	Name    string // what was asked
	OID     string // "" when missing
	Type    string
	Content []byte
}

// batch reads objects for a landing: objects named by id (the commits and
// trees a landing reads) straight from the object store, loose or packed
// (pack.go); everything else — refs by name, tags, objects in an alternate,
// anything damaged — through one long-lived `git cat-file --batch`, started
// on first need. Names are resolved when asked (a
// ref read twice can give two answers). Safe for concurrent use.
type batch struct {
	mu      sync.Mutex
	ctx     context.Context
	g       patch.Git
	objects string // the object store
	packs   *packs
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Reader
	errb    bytes.Buffer
	err     error // sticky: the process is unusable after a failed read

	// Answers to names that start with an object id are kept: what they
	// name cannot change (refs are asked again each time).
	cacheMu sync.Mutex
	cache   map[string]object
}

// landingGitTimeout bounds the git processes that live for the whole
// landing, gate included (the cat-file batch, the update-ref started at the
// beginning and given its transaction at the end). They touch the object
// store and refs only, never a worktree; git's default deadline
// (patch.DefaultTimeout) would end them under a long gate.
const landingGitTimeout = 12 * time.Hour

func newBatch(ctx context.Context, g patch.Git) *batch {
	g.Timeout = landingGitTimeout
	objects := filepath.Join(g.CommonDir(), "objects")
	return &batch{ctx: ctx, g: g, objects: objects, packs: newPacks(objects)}
}

// start starts cat-file; b.mu is held.
func (b *batch) start() error {
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
		return &patch.GitError{Args: []string{"cat-file", "--batch"}, Err: err}
	}
	b.out = bufio.NewReaderSize(stdout, 64<<10)
	return nil
}

// get resolves name (a ref, an id, "rev^{commit}", "rev^{tree}",
// "rev:path") and returns its object; OID is "" when it does not exist.
func (b *batch) get(name string) (object, error) {
	if name == "" || strings.ContainsAny(name, "\n\r") {
		return object{}, fmt.Errorf("lookup: bad object name %q", name)
	}
	byID := len(name) >= 40 && patch.IsObjectID(name[:40])
	if byID {
		b.cacheMu.Lock()
		o, ok := b.cache[name]
		b.cacheMu.Unlock()
		if ok {
			return o, nil
		}
	}
	o, err := b.resolve(name)
	if err == nil && byID && o.OID != "" { // a missing object may appear later
		b.cacheMu.Lock()
		if b.cache == nil {
			b.cache = map[string]object{}
		}
		b.cache[name] = o
		b.cacheMu.Unlock()
	}
	return o, err
}

// resolve answers name from the object store, else through cat-file.
func (b *batch) resolve(name string) (object, error) {
	if o, ok := b.local(name); ok {
		return o, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil && b.cmd == nil {
		b.err = b.start()
	}
	if b.err != nil {
		return object{}, b.err
	}
	obj, err := b.ask(name)
	if err != nil {
		b.err = fmt.Errorf("lookup %s: %w (git: %s)", name, err, strings.TrimSpace(b.errb.String()))
		return object{}, b.err
	}
	return obj, nil
}

// local answers "<id>", "<id>^{commit}", "<id>^{tree}" and "<id>:<path>"
// from the object store; ok is false when cat-file must answer (another
// form, a missing object, a tag to peel).
func (b *batch) local(name string) (object, bool) {
	id, rest := name, ""
	if len(name) > 40 {
		id, rest = name[:40], name[40:]
	}
	if !patch.IsObjectID(id) {
		return object{}, false
	}
	o, ok := b.read(id)
	if !ok {
		return object{}, false
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
		c, err := parseCommit(o.OID, o.Content)
		if err != nil {
			return object{}, false
		}
		t, ok := b.read(c.Tree)
		t.Name = name
		return t, ok && t.Type == "tree"
	case strings.HasPrefix(rest, ":") && len(rest) > 1 && o.Type == "tree":
		for _, part := range strings.Split(rest[1:], "/") {
			if o.Type != "tree" || part == "" || part == "." || part == ".." {
				return object{}, false // cat-file's own path rules apply
			}
			es, err := parseTree(o.Content)
			if err != nil {
				return object{}, false
			}
			i := slices.IndexFunc(es, func(e treeEntry) bool { return e.Name == part })
			if i < 0 {
				return object{Name: name}, true // not in the tree
			}
			if o, ok = b.read(es[i].OID); !ok {
				return object{}, false
			}
		}
		o.Name = name
		return o, true
	}
	return object{}, false
}

// read reads an object, loose or packed; false when it is in neither (or
// damaged: cat-file then says what is wrong).
func (b *batch) read(id string) (object, bool) {
	if o, ok := b.readLoose(id); ok {
		return o, true
	}
	return b.packs.read(id)
}

// has reports whether the object store has the object id, loose or
// packed (without reading it).
func (b *batch) has(id string) bool {
	if !patch.IsObjectID(id) {
		return false
	}
	if _, err := os.Lstat(filepath.Join(b.objects, id[:2], id[2:])); err == nil {
		return true
	}
	return b.packs.has(id)
}

// readLoose reads a loose object.
func (b *batch) readLoose(id string) (object, bool) {
	f, err := os.Open(filepath.Join(b.objects, id[:2], id[2:]))
	if err != nil {
		return object{}, false
	}
	defer f.Close()
	zr, err := zlib.NewReader(bufio.NewReader(f))
	if err != nil {
		return object{}, false
	}
	defer zr.Close()
	raw, err := io.ReadAll(io.LimitReader(zr, 64<<20))
	if err != nil {
		return object{}, false
	}
	nul := bytes.IndexByte(raw, 0)
	if nul < 0 {
		return object{}, false
	}
	typ, size, ok := strings.Cut(string(raw[:nul]), " ")
	if n, err := strconv.Atoi(size); !ok || err != nil || n != len(raw)-nul-1 {
		return object{}, false
	}
	return object{OID: id, Type: typ, Content: raw[nul+1:]}, true
}

func (b *batch) ask(name string) (object, error) {
	if _, err := io.WriteString(b.in, name+"\n"); err != nil {
		return object{}, err
	}
	line, err := b.out.ReadString('\n')
	if err != nil {
		return object{}, fmt.Errorf("short cat-file output: %w", err)
	}
	f := strings.Fields(line)
	if len(f) == 2 && (f[1] == "missing" || f[1] == "ambiguous") {
		return object{Name: name}, nil
	}
	if len(f) != 3 {
		return object{}, fmt.Errorf("unexpected cat-file output %q", line)
	}
	size, err := strconv.Atoi(f[2])
	if err != nil || size < 0 {
		return object{}, fmt.Errorf("bad size in %q", line)
	}
	body := make([]byte, size+1)
	if _, err := io.ReadFull(b.out, body); err != nil {
		return object{}, fmt.Errorf("short object: %w", err)
	}
	return object{Name: name, OID: f[0], Type: f[1], Content: body[:size]}, nil
}

// close ends the process, if one was started, and waits for it.
func (b *batch) close() {
	if b == nil {
		return
	}
	b.packs.close()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		b.in.Close()
		b.cmd.Wait()
	}
}

// getAll resolves names in order.
func (b *batch) getAll(names ...string) ([]object, error) {
	objs := make([]object, 0, len(names))
	for _, n := range names {
		o, err := b.get(n)
		if err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
	return objs, nil
}

// lookup resolves names through the landing's cat-file process.
func (l *lander) lookup(names ...string) ([]object, error) { return l.cat.getAll(names...) }

// lookup resolves names in a git process of its own and returns their
// objects in order. Missing names have OID "".
func lookup(ctx context.Context, g patch.Git, names ...string) ([]object, error) {
	b := newBatch(ctx, g)
	defer b.close()
	return b.getAll(names...)
}

// treeEntry is one entry of a tree object.
type treeEntry struct {
	Mode, Name, OID string
}

// parseTree decodes a raw tree object ("<mode> <name>\0<20-byte id>"...).
func parseTree(raw []byte) ([]treeEntry, error) {
	var es []treeEntry
	for len(raw) > 0 {
		sp := bytes.IndexByte(raw, ' ')
		nul := bytes.IndexByte(raw, 0)
		if sp <= 0 || nul < sp || len(raw) < nul+21 {
			return nil, errors.New("malformed tree object")
		}
		es = append(es, treeEntry{Mode: string(raw[:sp]), Name: string(raw[sp+1 : nul]), OID: hex.EncodeToString(raw[nul+1 : nul+21])})
		raw = raw[nul+21:]
	}
	return es, nil
}

// encodeTree encodes entries as a tree object, in git's order (a tree's
// name sorts as if it ended in "/").
func encodeTree(es []treeEntry) ([]byte, error) {
	key := func(e treeEntry) string {
		if e.Mode == "40000" || e.Mode == "040000" {
			return e.Name + "/"
		}
		return e.Name
	}
	es = slices.Clone(es)
	slices.SortFunc(es, func(a, b treeEntry) int { return strings.Compare(key(a), key(b)) })
	var buf bytes.Buffer
	for _, e := range es {
		id, err := hex.DecodeString(e.OID)
		if err != nil || len(id) != 20 || e.Name == "" || strings.ContainsAny(e.Name, "/\x00") {
			return nil, fmt.Errorf("bad tree entry %q %q %q", e.Mode, e.Name, e.OID)
		}
		fmt.Fprintf(&buf, "%s %s\x00", strings.TrimPrefix(e.Mode, "0"), e.Name)
		buf.Write(id)
	}
	return buf.Bytes(), nil
}

// zlibWriters keeps compressors (each allocates some hundred KB) for reuse.
var zlibWriters = sync.Pool{New: func() any { return zlib.NewWriter(nil) }}

// looseObject is an object built in memory, its id computed, not yet
// written.
type looseObject struct {
	typ, oid string
	content  []byte
}

func newObject(typ string, content []byte) looseObject {
	return looseObject{typ: typ, oid: looseID(typ, content), content: content}
}

// writeObjects writes objects into the repository's object store side by
// side (file creation, not CPU, is what they cost) and returns once all
// are there, with the files it created (objects already present are left
// alone).
func writeObjects(gitDir string, objs ...looseObject) ([]string, error) {
	type written struct {
		path string
		err  error
	}
	ch := make(chan written, len(objs))
	for _, o := range objs {
		go func() {
			path, err := o.write(gitDir)
			ch <- written{path, err}
		}()
	}
	var created []string
	var first error
	for range objs {
		w := <-ch
		if w.path != "" {
			created = append(created, w.path)
		}
		if w.err != nil && first == nil {
			first = w.err
		}
	}
	return created, first
}

// write stores the object as a loose object the way git does (zlib, a
// temporary file in the fan-out folder, fsync, then a rename) and returns
// the file's path when it created it ("" when it was there already). A ref
// may point at the object only afterwards.
func (o looseObject) write(gitDir string) (string, error) {
	dir := filepath.Join(gitDir, "objects", o.oid[:2])
	final := filepath.Join(dir, o.oid[2:])
	if _, err := os.Lstat(final); err == nil {
		return "", nil
	}
	if err := os.Mkdir(dir, 0o755); err == nil {
		// A fan-out folder gets the object store's own permissions (a
		// shared repository's group-writable, setgid ones included), as
		// git makes them.
		if fi, err := os.Stat(filepath.Dir(dir)); err == nil {
			os.Chmod(dir, fi.Mode()&(fs.ModePerm|fs.ModeSetgid))
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	f, err := os.CreateTemp(dir, "tmp_obj_")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	zw := zlibWriters.Get().(*zlib.Writer)
	defer zlibWriters.Put(zw)
	zw.Reset(f)
	fmt.Fprintf(zw, "%s %d\x00", o.typ, len(o.content))
	_, err = zw.Write(o.content)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o444)
	}
	if err == nil {
		err = os.Rename(f.Name(), final)
	}
	if err != nil {
		return "", fmt.Errorf("write %s object %s: %w", o.typ, o.oid, err)
	}
	return final, nil
}

// commit is the part of a commit object land reads.
type commit struct {
	OID     string
	Tree    string
	Parents []string
	Author  ident
	Message string
}

// ident is an author or committer line: name, email, raw date ("<unix> <tz>").
type ident struct {
	Name, Email, Date string
}

// line renders the ident as a commit header value, refusing what git would
// not write: an empty email, or '<', '>' or a line break in either part.
func (i ident) line() (string, error) {
	if i.Email == "" || strings.ContainsAny(i.Name+i.Email, "<>\n\x00") || i.Date == "" {
		return "", fmt.Errorf("bad identity %q <%s>", i.Name, i.Email)
	}
	return i.Name + " <" + i.Email + "> " + i.Date, nil
}

func parseIdent(s string) (ident, bool) {
	lt := strings.IndexByte(s, '<')
	gt := strings.LastIndexByte(s, '>')
	if lt < 0 || gt < lt {
		return ident{}, false
	}
	return ident{
		Name:  strings.TrimSpace(s[:lt]),
		Email: s[lt+1 : gt],
		Date:  strings.TrimSpace(s[gt+1:]),
	}, true
}

// parseCommit decodes a raw commit object with go-git's commit decoder (it
// knows every header, multi-line signatures included).
func parseCommit(oid string, raw []byte) (commit, error) {
	obj := &plumbing.MemoryObject{}
	obj.SetType(plumbing.CommitObject)
	if _, err := obj.Write(raw); err != nil {
		return commit{OID: oid}, err
	}
	var gc gitobject.Commit
	if err := gc.Decode(obj); err != nil {
		return commit{OID: oid}, fmt.Errorf("commit %s: %w", oid, err)
	}
	if gc.TreeHash.IsZero() {
		return commit{OID: oid}, fmt.Errorf("commit %s: no tree", oid)
	}
	if gc.Author.Email == "" && gc.Author.Name == "" {
		return commit{OID: oid}, fmt.Errorf("commit %s: bad author line", oid)
	}
	c := commit{OID: oid, Tree: gc.TreeHash.String(), Message: gc.Message,
		Author: ident{Name: gc.Author.Name, Email: gc.Author.Email,
			Date: fmt.Sprintf("%d %s", gc.Author.When.Unix(), gc.Author.When.Format("-0700"))}}
	for _, p := range gc.ParentHashes {
		c.Parents = append(c.Parents, p.String())
	}
	return c, nil
}

// readCommit resolves rev to a commit and parses it.
func readCommit(ctx context.Context, g patch.Git, rev string) (commit, error) {
	objs, err := lookup(ctx, g, rev+"^{commit}")
	if err != nil {
		return commit{}, err
	}
	if objs[0].OID == "" {
		return commit{}, fmt.Errorf("%s: no such commit", rev)
	}
	return parseCommit(objs[0].OID, objs[0].Content)
}

// Trailer is one "Key: value" line of a commit message's trailer block.
type Trailer struct {
	Key, Value string
}

// splitTrailers returns the message without its trailing trailer block and
// the trailers of that block. A block is the last paragraph (not the first)
// when every line of it is "Token: value".
func splitTrailers(msg string) (string, []Trailer) {
	body := strings.TrimRight(msg, "\n")
	i := strings.LastIndex(body, "\n\n")
	if i < 0 {
		// The first paragraph is the subject, never a trailer block.
		return msg, nil
	}
	var ts []Trailer
	for _, line := range strings.Split(strings.TrimSpace(body[i+2:]), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok || !isToken(k) {
			return msg, nil
		}
		ts = append(ts, Trailer{Key: k, Value: strings.TrimSpace(v)})
	}
	if len(ts) == 0 {
		return msg, nil
	}
	return strings.TrimRight(body[:i], "\n") + "\n", ts
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// trailer returns the last value of key (case-insensitive) or "".
func trailer(ts []Trailer, key string) string {
	v := ""
	for _, t := range ts {
		if strings.EqualFold(t.Key, key) {
			v = t.Value
		}
	}
	return v
}
