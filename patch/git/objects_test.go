package git

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
)

// repo is a real repository for the tests: a bare git dir and an isolated
// git to run in it.
type repo struct {
	t      testing.TB
	gitDir string
	home   string
}

func newTestRepo(t *testing.T) *repo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("git not installed (required when CI=true)")
		}
		t.Skip("git not installed")
	}
	r := &repo{t: t, gitDir: filepath.Join(t.TempDir(), "repo.git"), home: t.TempDir()}
	r.run(nil, "init", "-q", "--bare", "-b", "main", r.gitDir)
	return r
}

func (r *repo) run(stdin []byte, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	if args[0] != "init" {
		cmd.Args = append([]string{"git", "--git-dir=" + r.gitDir}, args...)
	}
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + r.home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=T", "GIT_AUTHOR_EMAIL=t@example.test", "GIT_COMMITTER_NAME=T", "GIT_COMMITTER_EMAIL=t@example.test",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z"}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// history writes, with fast-import, a history whose blobs and trees change
// a little per commit (so a repack deltifies them), with a binary blob, a
// symlink, an executable and a deep folder, and an annotated tag; it
// returns every object id in the repository.
func (r *repo) history() []string {
	r.t.Helper()
	var s bytes.Buffer
	body := func(i, n int) string {
		var b strings.Builder
		for j := range n {
			fmt.Fprintf(&b, "line %d of version %d\n", j, min(j, i))
		}
		return b.String()
	}
	data := func(d string) { fmt.Fprintf(&s, "data %d\n%s\n", len(d), d) }
	for i := range 40 {
		fmt.Fprintf(&s, "commit refs/heads/main\ncommitter T <t@example.test> %d +0100\n", 1700000000+i)
		data(fmt.Sprintf("version %d\n\nwith a body", i))
		for k := range 5 {
			fmt.Fprintf(&s, "M 100644 inline dir%d/deep/er/file%d.txt\n", k%3, k)
			data(body(i+k, 200+i))
		}
		bin := bytes.Repeat([]byte{0, 1, 2, byte(i)}, 3000)
		fmt.Fprintf(&s, "M 100755 inline tools/blob.bin\ndata %d\n%s\n", len(bin), bin)
		fmt.Fprintf(&s, "M 120000 inline link\n")
		data(fmt.Sprintf("dir%d/deep", i%3))
	}
	r.run(s.Bytes(), "fast-import", "--quiet")
	r.run(nil, "tag", "-a", "-m", "tagged", "v1", "refs/heads/main~3")
	return strings.Fields(r.run(nil, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"))
}

// catFile reads ids through `git cat-file --batch` alone.
func (r *repo) catFile(ids []string) map[string]Object {
	r.t.Helper()
	cmd := exec.Command("git", "--git-dir="+r.gitDir, "cat-file", "--batch")
	cmd.Stdin = strings.NewReader(strings.Join(ids, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		r.t.Fatal(err)
	}
	m := map[string]Object{}
	for len(out) > 0 {
		nl := bytes.IndexByte(out, '\n')
		f := strings.Fields(string(out[:nl]))
		var size int
		fmt.Sscan(f[2], &size)
		m[f[0]] = Object{ID: f[0], Type: f[1], Content: out[nl+1 : nl+1+size]}
		out = out[nl+1+size+1:]
	}
	return m
}

// inProcess reads ids through go-git only (no cat-file fallback).
func inProcess(t *testing.T, g Git, ids []string) map[string]Object {
	t.Helper()
	o := NewObjects(context.Background(), g)
	defer o.Close()
	m := map[string]Object{}
	for _, id := range ids {
		got, ok := o.read(id)
		if !ok {
			t.Fatalf("%s not read in process", id)
		}
		m[id] = got
	}
	return m
}

// TestObjectsMatchCatFile is the differential test of the object reader:
// every object of a fixture repository — loose, then packed with offset
// deltas, with ref deltas, with 64-bit offsets, in two packs — read in
// process is exactly what `git cat-file` gives; a damaged pack is not read
// in process (every object is checked against its id) and the reader's
// fallback still answers right.
func TestObjectsMatchCatFile(t *testing.T) {
	r := newTestRepo(t)
	ids := r.history()
	if len(ids) < 200 {
		t.Fatalf("only %d objects", len(ids))
	}
	g := Git{GitDir: r.gitDir}
	packDir := filepath.Join(r.gitDir, "objects", "pack")
	check := func(name string) {
		t.Helper()
		want := r.catFile(ids)
		if got := inProcess(t, g, ids); !reflect.DeepEqual(got, want) {
			for _, id := range ids {
				if !reflect.DeepEqual(got[id], want[id]) {
					t.Fatalf("%s: %s read as %s (%d bytes), cat-file says %s (%d bytes)", name, id,
						got[id].Type, len(got[id].Content), want[id].Type, len(want[id].Content))
				}
			}
		}
	}
	// fast-import packs what it writes: unpack to loose objects first.
	packs, _ := filepath.Glob(filepath.Join(packDir, "pack-*.pack"))
	for _, p := range packs {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(p)
		os.Remove(strings.TrimSuffix(p, ".pack") + ".idx")
		r.run(raw, "unpack-objects", "-q")
	}
	if m, _ := filepath.Glob(filepath.Join(packDir, "pack-*.pack")); len(m) != 0 {
		t.Fatalf("still packed: %v", m)
	}
	check("loose")
	r.run(nil, "repack", "-adfq")
	r.run(nil, "prune-packed")
	check("offset deltas")
	r.run(nil, "-c", "repack.useDeltaBaseOffset=false", "repack", "-adfq")
	check("ref deltas")
	onlyPack := func() string {
		m, _ := filepath.Glob(filepath.Join(packDir, "pack-*.pack"))
		if len(m) != 1 {
			t.Fatalf("packs: %v", m)
		}
		return m[0]
	}
	p := onlyPack()
	os.Remove(strings.TrimSuffix(p, ".pack") + ".idx")
	r.run(nil, "index-pack", "--index-version=2,4096", p)
	check("64-bit offsets")
	r.run(nil, "repack", "-adfq")
	var half bytes.Buffer
	for _, id := range ids[:len(ids)/2] {
		half.WriteString(id + "\n")
	}
	r.run(half.Bytes(), "pack-objects", "-q", filepath.Join(packDir, "pack"))
	check("two packs")

	// A damaged pack: what does not hash to its id is not read in process,
	// and the reader answers through cat-file (which says what is wrong).
	r.run(nil, "repack", "-adfq")
	p = onlyPack()
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := 40; i < len(raw)-20; i += 97 { // damage entries, not the trailer
		raw[i] ^= 0x55
	}
	os.Chmod(p, 0o644)
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	o := NewObjects(context.Background(), g)
	defer o.Close()
	read := 0
	for _, id := range ids {
		if got, ok := o.read(id); ok {
			read++
			if plumbing.ComputeHash(mustType(got.Type), got.Content).String() != id {
				t.Fatalf("damaged pack: %s read as another object", id)
			}
		}
	}
	if read == len(ids) {
		t.Fatal("a damaged pack read completely")
	}
	// The fallback: cat-file reports the damage as an error or answers
	// what it can; it never hands out another object's content.
	for _, id := range ids {
		got, err := o.Get(id)
		if err != nil {
			break // the cat-file process is unusable after a failed read (sticky)
		}
		if got.ID != "" && plumbing.ComputeHash(mustType(got.Type), got.Content).String() != id {
			t.Fatalf("damaged pack: %s answered as another object", id)
		}
	}
}

func mustType(s string) plumbing.ObjectType {
	t, _ := plumbing.ParseObjectType(s)
	return t
}

// TestObjectsNamesMatchCatFile: every name form the reader answers in
// process gets exactly cat-file's answer, in fast-import's pack and after
// a repack, and names it leaves to cat-file (refs, tags, odd paths) are
// answered too.
func TestObjectsNamesMatchCatFile(t *testing.T) {
	r := newTestRepo(t)
	r.history()
	c := r.run(nil, "rev-parse", "refs/heads/main")
	tree := r.run(nil, "rev-parse", c+"^{tree}")
	tag := r.run(nil, "rev-parse", "refs/tags/v1")
	names := []string{
		c, c + "^{commit}", c + "^{tree}", tree, tree + "^{tree}", tree + "^{commit}",
		tree + ":dir0", tree + ":dir0/deep/er/file0.txt", tree + ":dir0/nope", tree + ":link", tree + ":link/x",
		tree + ":tools/blob.bin/x", tree + ":dir0/", tree + ":dir0//deep", tag, tag + "^{commit}", tag + "^{tree}",
		"refs/heads/main", "refs/heads/main^{tree}", strings.Repeat("0", 40), strings.Repeat("0", 40) + "^{commit}",
	}
	ctx := context.Background()
	g := Git{GitDir: r.gitDir}
	viaCatFile := func() []Object {
		o := NewObjects(ctx, g)
		defer o.Close()
		var objs []Object
		for _, n := range names {
			o.mu.Lock()
			if o.cmd == nil {
				o.err = o.start()
			}
			got, err := o.ask(n)
			o.mu.Unlock()
			if err != nil {
				t.Fatalf("%s: %v (%s)", n, err, o.errb.String())
			}
			objs = append(objs, got)
		}
		return objs
	}
	want := viaCatFile()
	for _, repacked := range []bool{false, true} {
		if repacked {
			r.run(nil, "repack", "-adq")
			r.run(nil, "prune-packed")
		}
		got, err := Lookup(ctx, g, names...)
		if err != nil {
			t.Fatal(err)
		}
		for i := range names {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Errorf("%s: reader %+v, cat-file %+v", names[i], got[i].ID, want[i].ID)
			}
		}
	}
	if want[0].ID != c || want[2].ID != tree || want[8].ID != "" || want[7].Type != "blob" {
		t.Fatalf("unexpected answers: %+v", want[:9])
	}
}

// TestWrittenObjectsAreGits: objects written in process have git's ids,
// read back with git, pass fsck; a tree encodes in git's order; a commit
// encodes as git's commit-tree writes it; nothing temporary is left.
func TestWrittenObjectsAreGits(t *testing.T) {
	r := newTestRepo(t)
	blob := NewLoose("blob", []byte("note\n"))
	blob2 := NewLoose("blob", []byte("other\n"))
	h := plumbing.NewHash
	subRaw, err := EncodeTree([]TreeEntry{{Mode: ModeFile, Name: "f", Hash: h(blob.ID)}})
	if err != nil {
		t.Fatal(err)
	}
	sub := NewLoose("tree", subRaw)
	entries := []TreeEntry{
		{Mode: ModeFile, Name: "a.b", Hash: h(blob.ID)}, {Mode: ModeTree, Name: "a", Hash: h(sub.ID)}, {Mode: ModeFile, Name: "a-b", Hash: h(blob2.ID)},
		{Mode: ModeExec, Name: "a0", Hash: h(blob.ID)}, {Mode: ModeSymlink, Name: "z", Hash: h(blob2.ID)}, {Mode: ModeFile, Name: "A", Hash: h(blob.ID)},
	}
	raw, err := EncodeTree(entries)
	if err != nil {
		t.Fatal(err)
	}
	tree := NewLoose("tree", raw)
	var mk strings.Builder
	for _, e := range entries {
		typ := "blob"
		if e.Mode == ModeTree {
			typ = "tree"
		}
		fmt.Fprintf(&mk, "%o %s %s\t%s\n", uint32(e.Mode), typ, e.Hash, e.Name)
	}
	// A shared repository's object store: new fan-out folders follow it.
	objects := filepath.Join(r.gitDir, "objects")
	if err := os.Chmod(objects, 0o775|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	if err := WriteLoose(r.gitDir, blob, blob2, sub, tree); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(objects, blob.ID[:2])); err != nil || fi.Mode()&(os.ModePerm|os.ModeSetgid) != 0o775|os.ModeSetgid {
		t.Fatalf("fan-out folder mode %v (%v), want the object store's", fi.Mode(), err)
	}
	if got := r.run([]byte(mk.String()), "mktree"); got != tree.ID {
		t.Fatalf("git mktree gives %s, EncodeTree %s", got, tree.ID)
	}
	if got := r.run(nil, "cat-file", "blob", blob.ID); got != "note" {
		t.Fatalf("blob reads back as %q", got)
	}
	if err := WriteLoose(r.gitDir, blob); err != nil { // already there: left alone
		t.Fatal(err)
	}
	es, err := ParseTree(raw)
	if err != nil || len(es) != len(entries) {
		t.Fatalf("ParseTree: %v %v", es, err)
	}

	// A commit as commit-tree writes it (the zone of each date kept).
	when := time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", -(3*3600+1800)))
	c := Commit{Tree: tree.ID, Author: NewSignature("T", "t@example.test", when),
		Committer: NewSignature("T", "t@example.test", when.UTC()), Message: "subject\n\nbody\n"}
	craw, err := EncodeCommit(c)
	if err != nil {
		t.Fatal(err)
	}
	commit := NewLoose("commit", craw)
	if err := WriteLoose(r.gitDir, commit); err != nil {
		t.Fatal(err)
	}
	if got := r.run(nil, "cat-file", "commit", commit.ID); got+"\n" != string(craw) {
		t.Fatalf("commit reads back as %q, wrote %q", got, craw)
	}
	if hdr := r.run(nil, "log", "-1", "--format=%an <%ae> %ad|%cd", "--date=raw", commit.ID); hdr != "T <t@example.test> 1767238200 -0330|1767238200 +0000" {
		t.Fatalf("git reads the commit's idents as %q", hdr)
	}
	back, err := ParseCommit(commit.ID, craw)
	if err != nil || back.Tree != tree.ID || !back.Author.When.Equal(when) || back.Message != c.Message {
		t.Fatalf("ParseCommit: %+v %v", back, err)
	}
	r.run(nil, "update-ref", "refs/test/tree", commit.ID)
	r.run(nil, "fsck", "--strict", "--no-dangling")
	if left, _ := filepath.Glob(filepath.Join(objects, "*", "tmp_obj_*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}

	// What git would not write is refused.
	for name, es := range map[string][]TreeEntry{
		"a slash":    {{Mode: ModeFile, Name: "a/b", Hash: h(blob.ID)}},
		"empty name": {{Mode: ModeFile, Name: "", Hash: h(blob.ID)}},
		"twice":      {{Mode: ModeFile, Name: "a", Hash: h(blob.ID)}, {Mode: ModeFile, Name: "a", Hash: h(blob2.ID)}},
		"no id":      {{Mode: ModeFile, Name: "a"}},
	} {
		if _, err := EncodeTree(es); err == nil {
			t.Errorf("a tree entry with %s was encoded", name)
		}
	}
	for name, s := range map[string]Signature{
		"no email":     NewSignature("T", "", when),
		"a line break": NewSignature("T\nX", "t@example.test", when),
		"a '>'":        NewSignature("T", "t>@example.test", when),
		"no date":      {Name: "T", Email: "t@example.test"},
	} {
		if _, err := EncodeCommit(Commit{Tree: tree.ID, Author: s, Committer: c.Committer}); err == nil {
			t.Errorf("an identity with %s was encoded", name)
		}
	}
}
