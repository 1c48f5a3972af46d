package land

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
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
	if err := writeObjects(f.gitdir, blob, blob2, sub, tree); err != nil {
		t.Fatal(err)
	}
	if got := f.runIn("", strings.NewReader(mk.String()), "git", "--git-dir="+f.gitdir, "mktree"); got != tree.oid {
		t.Fatalf("git mktree gives %s, encodeTree %s", got, tree.oid)
	}
	if got := f.git("cat-file", "blob", blob.oid); got != "note" {
		t.Fatalf("blob reads back as %q", got)
	}
	if err := writeObjects(f.gitdir, blob); err != nil { // already there: left alone
		t.Fatal(err)
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
	return o.oid, writeObjects(f.gitdir, o)
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
