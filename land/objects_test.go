package land

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/patch"
)

// TestBatchLooseMatchesCatFile: every name form the in-process loose reader
// answers gets exactly cat-file's answer, and after a repack (nothing
// loose) the fallback answers the same.
func TestBatchLooseMatchesCatFile(t *testing.T) {
	f := newFixture(t)
	c := f.commit("refs/heads/main", "", map[string]string{
		"docs/guide/intro.md": "intro\n",
		"docs/a.b":            "dot\n",
		"docs/a-b":            "dash\n",
		"bin/run":             "x> #!/bin/sh\n",
		"link":                "-> docs/a.b",
	}, "more")
	f.git("tag", "-a", "-m", "tagged", "v1", c)
	tag := f.rev("refs/tags/v1")
	tree := f.rev(c + "^{tree}")
	names := []string{
		c, c + "^{commit}", c + "^{tree}", tree, tree + "^{tree}", tree + "^{commit}",
		tree + ":docs", tree + ":docs/guide/intro.md", tree + ":docs/nope", tree + ":link", tree + ":link/x",
		tree + ":README.md/x", tree + ":docs/", tree + ":docs//guide", tree + ":./docs", tag, tag + "^{commit}", tag + "^{tree}",
		"refs/heads/main", "refs/heads/main^{tree}", strings.Repeat("0", 40), strings.Repeat("0", 40) + "^{commit}",
	}
	ctx := context.Background()
	answers := func(objects string) []object {
		b := newBatch(ctx, f.g)
		if objects != "" {
			b.objects = objects
		}
		defer b.close()
		objs, err := b.getAll(names...)
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
	loose := answers("")
	viaCatFile := answers(filepath.Join(t.TempDir(), "nothing-loose-here"))
	for i := range names {
		if !reflect.DeepEqual(loose[i], viaCatFile[i]) {
			t.Errorf("%s: loose %+v, cat-file %+v", names[i], loose[i], viaCatFile[i])
		}
	}
	if loose[0].OID != c || loose[2].OID != tree || loose[8].OID != "" || loose[7].Type != "blob" {
		t.Fatalf("unexpected answers: %+v", loose[:9])
	}
	f.git("repack", "-adq")
	f.git("prune-packed")
	if packed := answers(""); !reflect.DeepEqual(packed, loose) {
		t.Fatalf("after a repack the answers changed:\n%+v\n%+v", packed, loose)
	}
}

// TestWrittenObjectsAreGits: objects written in process have git's ids,
// read back with git, pass fsck, and a tree encodes in git's order.
func TestWrittenObjectsAreGits(t *testing.T) {
	f := newFixture(t)
	blob := newObject("blob", []byte("note\n"))
	blob2 := newObject("blob", []byte("other\n"))
	entries := []treeEntry{
		{"100644", "a.b", blob.oid}, {"40000", "a", ""}, {"100644", "a-b", blob2.oid},
		{"100755", "a0", blob.oid}, {"120000", "z", blob2.oid}, {"100644", "A", blob.oid},
	}
	subRaw, err := encodeTree([]treeEntry{{"100644", "f", blob.oid}})
	if err != nil {
		t.Fatal(err)
	}
	sub := newObject("tree", subRaw)
	entries[1].OID = sub.oid
	raw, err := encodeTree(entries)
	if err != nil {
		t.Fatal(err)
	}
	tree := newObject("tree", raw)
	var mk strings.Builder
	for _, e := range entries {
		typ := "blob"
		if e.Mode == "40000" {
			typ = "tree"
		}
		fmt.Fprintf(&mk, "%s %s %s\t%s\n", e.Mode, typ, e.OID, e.Name)
	}
	// A shared repository's object store: new fan-out folders follow it.
	objects := filepath.Join(f.gitdir, "objects")
	if err := os.Chmod(objects, 0o775|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(objects, blob.oid[:2]))
	created, err := writeObjects(f.gitdir, blob, blob2, sub, tree)
	if err != nil || len(created) != 4 {
		t.Fatal(created, err)
	}
	if fi, err := os.Stat(filepath.Join(objects, blob.oid[:2])); err != nil || fi.Mode()&(os.ModePerm|os.ModeSetgid) != 0o775|os.ModeSetgid {
		t.Fatalf("fan-out folder mode %v (%v), want the object store's", fi.Mode(), err)
	}
	if got := f.runIn("", strings.NewReader(mk.String()), "git", "--git-dir="+f.gitdir, "mktree"); got != tree.oid {
		t.Fatalf("git mktree gives %s, encodeTree %s", got, tree.oid)
	}
	if got := f.git("cat-file", "blob", blob.oid); got != "note" {
		t.Fatalf("blob reads back as %q", got)
	}
	if created, err := writeObjects(f.gitdir, blob); err != nil || len(created) != 0 { // already there: left alone
		t.Fatal(created, err)
	}
	c, err := commitFor(f, tree.oid)
	if err != nil {
		t.Fatal(err)
	}
	f.git("update-ref", "refs/test/tree", c)
	f.git("fsck", "--strict", "--no-dangling")
	left, _ := filepath.Glob(filepath.Join(f.gitdir, "objects", "*", "tmp_obj_*"))
	if len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	if _, err := encodeTree([]treeEntry{{"100644", "a/b", blob.oid}}); err == nil {
		t.Fatal("a name with a slash was encoded")
	}
}

func commitFor(f *fixture, tree string) (string, error) {
	ci, err := ident{Name: "T", Email: "t@example.test", Date: "1767225600 +0000"}.line()
	if err != nil {
		return "", err
	}
	o := newObject("commit", []byte("tree "+tree+"\nauthor "+ci+"\ncommitter "+ci+"\n\nt\n"))
	_, err = writeObjects(f.gitdir, o)
	return o.oid, err
}

// TestLandAfterRepack: a landing whose objects are all packed (nothing
// loose) goes through cat-file and lands the same commit tree.
func TestLandAfterRepack(t *testing.T) {
	f := newFixture(t)
	id, _ := f.approved("a", change)
	f.git("repack", "-adq")
	f.git("prune-packed")
	f.git("pack-refs", "--all")
	out, err := f.land(id, nil)
	if err != nil || out.Status != StatusLanded {
		t.Fatalf("land: %v %+v", err, out)
	}
	f.git("fsck", "--strict", "--no-dangling")
	if note := f.git("notes", "--ref", NotesRef, "show", out.Commit); !strings.Contains(note, `"decision": "`+id+`"`) {
		t.Fatalf("note: %s", note)
	}
}

// TestQuietTargetSquash: when the target tip is the approved commit's only
// parent, the squash taken without merge-tree is merge-tree's tree, and its
// patch-id is the one its own canonical diff has.
func TestQuietTargetSquash(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	tip := f.rev("refs/heads/main")
	work := f.commit("refs/heads/work/q", tip, map[string]string{"docs/a.md": "a\n", "bin/x": "x> run\n", "README.md": "", "l": "-> docs/a.md"}, "quiet")
	l := &lander{g: f.g, bg: ctx, approved: commit{OID: work}}
	l.cat = newBatch(ctx, f.g)
	defer l.cat.close()
	if _, ok := l.quietTarget(tip, work); !ok {
		t.Fatal("the work's parent is the tip, but the quiet path was not taken")
	}
	l.startDiffer()
	res := l.at(tip, work).squash()
	l.wg.Wait()
	d, err := l.differ()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if res.err != nil {
		t.Fatal(res.err)
	}
	merged := strings.Fields(f.git("merge-tree", "--write-tree", tip, work))[0]
	if res.tree != merged {
		t.Fatalf("quiet squash tree %s, merge-tree says %s", res.tree, merged)
	}
	want, err := patch.DiffTrees(ctx, f.g, tip, merged, io.Discard)
	if err != nil || res.pid != want || want == "" {
		t.Fatalf("quiet squash patch-id %s, its canonical diff has %s (%v)", res.pid, want, err)
	}
	// A moved target takes the general path.
	moved := f.commit("refs/heads/main", tip, map[string]string{"other.md": "o\n"}, "moved")
	if _, ok := l.quietTarget(moved, work); ok {
		t.Fatal("the quiet path was taken for a moved target")
	}
}

// looseObjects lists the repository's loose object ids.
func looseObjects(t *testing.T, f *fixture) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(f.gitdir, "objects", "[0-9a-f][0-9a-f]", "*"))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, p := range files {
		ids[filepath.Base(filepath.Dir(p))+filepath.Base(p)] = true
	}
	return ids
}

// TestPrewriteLeavesNothingBehind: the commit and note objects written
// ahead of the checks are exactly the ones a landing commits, and a
// refusal after they were written removes them: the object store is as it
// was.
// TestPrewriteNeverDeletes: a landing never deletes an object. A refusal
// after objects were written ahead leaves them unreferenced for git gc (as
// git itself does); a landing adds only its own objects.
func TestPrewriteNeverDeletes(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	// A quiet target and a verdict bound to the patch-id of an earlier
	// version: the objects are written with that patch-id, then refused.
	base := f.rev("refs/heads/main")
	reviewed := f.commit("refs/heads/work/w", base, change, "reviewed")
	c := f.commit("refs/heads/work/w", base, map[string]string{"lib/new.go": "package  lib\n"}, "edited")
	if _, err := f.store.PutVerdict(ctx, bus.Verdict{WorkRef: "work/w", Commit: c, PatchID: f.patchID(base, reviewed),
		Verdict: bus.VerdictApprove}); err != nil {
		t.Fatal(err)
	}
	id := f.decide("w", c, "main", "", bus.OptionMerge)
	before := looseObjects(t, f)
	var rf *refusal.Refusal
	if _, err := f.land(id, nil); !errors.As(err, &rf) || rf.Code != "patch-id-mismatch" {
		t.Fatalf("want a patch-id-mismatch refusal, got %v", err)
	}
	after := looseObjects(t, f)
	for id := range before {
		if !after[id] {
			t.Fatalf("a refusal deleted object %s", id)
		}
	}
	// What it wrote is referenced by nothing: gc's to collect.
	unreachable := f.git("fsck", "--unreachable", "--no-reflogs", "--no-progress")
	for id := range after {
		if !before[id] && !strings.Contains(unreachable, id) {
			t.Errorf("object %s written by a refused landing is reachable:\n%s", id, unreachable)
		}
	}

	// A landing on a quiet target adds its commit, the note blob and the
	// notes tree and commit: nothing else.
	id, _ = f.approved("a", change)
	before = looseObjects(t, f)
	out, err := f.land(id, nil)
	if err != nil || out.Status != StatusLanded {
		t.Fatalf("land: %v %+v", err, out)
	}
	notes := f.rev(NotesRef)
	want := map[string]bool{out.Commit: true, notes: true, f.rev(notes + "^{tree}"): true, f.rev(notes + ":" + out.Commit): true}
	for id := range looseObjects(t, f) {
		if !before[id] && !want[id] {
			t.Errorf("object %s was left in the store", id)
		}
		delete(want, id)
	}
	if len(want) > 0 {
		t.Errorf("landed objects not in the store: %v", want)
	}
	f.git("fsck", "--strict", "--no-dangling")
}

// TestNotesFanOut: past maxFlatNotes notes at the top level of the notes
// tree, a new note goes into the fan-out folder of its first two hex
// digits; git reads every note of the mixed layout, a note is replaced
// where it is, and the store stays valid.
func TestNotesFanOut(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	who, err := ident{Name: "T", Email: "t@example.test", Date: "1767225600 +0000"}.line()
	if err != nil {
		t.Fatal(err)
	}
	filler := newObject("blob", []byte("filler\n"))
	var flat []treeEntry
	for i := range maxFlatNotes {
		flat = append(flat, treeEntry{Mode: "100644", Name: fmt.Sprintf("%040x", i*7919+1), OID: filler.oid})
	}
	raw, err := encodeTree(flat)
	if err != nil {
		t.Fatal(err)
	}
	tree := newObject("tree", raw)
	c := newObject("commit", []byte("tree "+tree.oid+"\nauthor "+who+"\ncommitter "+who+"\n\nnotes\n"))
	if _, err := writeObjects(f.gitdir, filler, tree, c); err != nil {
		t.Fatal(err)
	}
	f.git("update-ref", NotesRef, c.oid)

	// note adds (or replaces) the note on commit through noteObjects.
	note := func(commit, text string) {
		t.Helper()
		l := &lander{g: f.g, cat: newBatch(ctx, f.g)}
		defer l.cat.close()
		blob := newObject("blob", []byte(text))
		old, objs, err := l.noteObjects(commit, blob.oid, who)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := writeObjects(f.gitdir, append(objs, blob)...); err != nil {
			t.Fatal(err)
		}
		f.git("update-ref", NotesRef, objs[len(objs)-1].oid, old)
	}
	work := f.commit("refs/heads/work/n", "", map[string]string{"n.txt": "n\n"}, "annotated")
	note(work, "first\n")
	if got := f.git("notes", "--ref="+NotesRef, "show", work); got != "first" {
		t.Fatalf("note on %s: %q", work, got)
	}
	if typ := f.git("cat-file", "-t", NotesRef+"^{tree}:"+work[:2]); typ != "tree" {
		t.Fatalf("the 257th note is not in a fan-out folder: %s", typ)
	}
	note(work, "second\n")
	if got := f.git("notes", "--ref="+NotesRef, "show", work); got != "second" {
		t.Fatalf("replaced note on %s: %q", work, got)
	}
	note(flat[3].Name, "flat, replaced\n")
	list := strings.Split(f.git("notes", "--ref="+NotesRef, "list"), "\n")
	if len(list) != maxFlatNotes+1 {
		t.Fatalf("git lists %d notes, want %d", len(list), maxFlatNotes+1)
	}
	if got := f.git("cat-file", "blob", NotesRef+"^{tree}:"+flat[3].Name); got != "flat, replaced" {
		t.Fatalf("flat note replaced as %q", got)
	}
	f.git("fsck", "--strict", "--no-dangling")
}
