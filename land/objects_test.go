package land

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
)

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
	l := &lander{g: f.g, bg: ctx, approved: git.Commit{ID: work}}
	l.cat = git.NewObjects(ctx, f.g)
	defer l.cat.Close()
	if _, ok := l.quietTarget(tip, work); !ok {
		t.Fatal("the work's parent is the tip, but the quiet path was not taken")
	}
	l.startDiffer()
	res := l.at(tip, work).squash()
	l.wg.Wait()
	defer l.closeDiffer()
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

// newObjects lists the objects in the store now that were not in before.
func newObjects(t *testing.T, f *fixture, before map[string]bool) map[string]bool {
	t.Helper()
	after := looseObjects(t, f)
	for id := range before {
		if !after[id] {
			t.Fatalf("a landing deleted object %s", id)
		}
	}
	added := map[string]bool{}
	for id := range after {
		if !before[id] {
			added[id] = true
		}
	}
	return added
}

// TestRefusalKeepsEveryObject: a landing never deletes an object from the
// repository. A refusal leaves every object that was there and every
// object the landing wrote (merge-tree's trees, the commit and the receipt
// note's objects written before the last checks), unreferenced, for git
// gc, as git itself does; a landing that lands adds only its own objects.
func TestRefusalKeepsEveryObject(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	unreachable := func(added map[string]bool) {
		t.Helper()
		out := f.git("fsck", "--unreachable", "--no-reflogs", "--no-progress")
		for id := range added {
			if !strings.Contains(out, id) {
				t.Errorf("object %s written by a refused landing is reachable:\n%s", id, out)
			}
		}
	}

	// A target that moved: merge-tree writes the squash's trees, then the
	// patch-id (bound to an earlier version) is refused.
	base := f.rev("refs/heads/main")
	reviewed := f.commit("refs/heads/work/w", base, change, "reviewed")
	c := f.commit("refs/heads/work/w", base, map[string]string{"lib/new.go": "package  lib\n"}, "edited")
	f.commit("refs/heads/main", base, map[string]string{"docs/other.md": "other\n"}, "moved")
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
	added := newObjects(t, f, before)
	if len(added) == 0 {
		t.Fatal("merge-tree wrote no tree: the case is not covered")
	}
	unreachable(added)

	// A refusal right before the compare-and-swap: the commit and the
	// note's objects are written, then the verdict changes.
	id, work := f.approved("late", change)
	before = looseObjects(t, f)
	_, err := f.land(id, func(o *Options) {
		o.Fault = func(step string) {
			if step == "commit" {
				if _, err := f.store.PutVerdict(ctx, bus.Verdict{WorkRef: "work/late", Commit: work, PatchID: "p",
					Verdict: bus.VerdictRequestChanges, Reviewer: "late"}); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
	if !errors.As(err, &rf) || rf.Code != "verdict-stale" {
		t.Fatalf("want a verdict-stale refusal, got %v", err)
	}
	added = newObjects(t, f, before)
	types := map[string]int{}
	for id := range added {
		types[f.git("cat-file", "-t", id)]++
	}
	if types["commit"] != 2 || types["blob"] != 1 || types["tree"] < 1 {
		t.Fatalf("the refused landing's commit, note commit, note blob and notes tree are not all kept: %v", types)
	}
	unreachable(added)

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
	for id := range newObjects(t, f, before) {
		if !want[id] {
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
	who := git.NewSignature("T", "t@example.test", time.Unix(1767225600, 0).UTC())
	filler := git.NewLoose("blob", []byte("filler\n"))
	var flat []git.TreeEntry
	for i := range maxFlatNotes {
		flat = append(flat, git.TreeEntry{Mode: git.ModeFile, Name: fmt.Sprintf("%040x", i*7919+1), Hash: plumbing.NewHash(filler.ID)})
	}
	raw, err := git.EncodeTree(flat)
	if err != nil {
		t.Fatal(err)
	}
	tree := git.NewLoose("tree", raw)
	craw, err := git.EncodeCommit(git.Commit{Tree: tree.ID, Author: who, Committer: who, Message: "notes\n"})
	if err != nil {
		t.Fatal(err)
	}
	c := git.NewLoose("commit", craw)
	if err := git.WriteLoose(f.gitdir, filler, tree, c); err != nil {
		t.Fatal(err)
	}
	f.git("update-ref", NotesRef, c.ID)

	// note adds (or replaces) the note on commit through noteObjects.
	note := func(commit, text string) {
		t.Helper()
		l := &lander{g: f.g, cat: git.NewObjects(ctx, f.g)}
		defer l.cat.Close()
		blob := git.NewLoose("blob", []byte(text))
		old, objs, err := l.noteObjects(commit, blob.ID, who)
		if err != nil {
			t.Fatal(err)
		}
		if err := git.WriteLoose(f.gitdir, append(objs, blob)...); err != nil {
			t.Fatal(err)
		}
		f.git("update-ref", NotesRef, objs[len(objs)-1].ID, old)
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
