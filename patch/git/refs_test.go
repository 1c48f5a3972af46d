package git

import (
	"reflect"
	"strings"
	"testing"
)

// TestListRefsMatchesForEachRef: ListRefs reads what `git for-each-ref`
// lists for the same patterns, loose and packed, a symbolic branch
// followed, refs/stash matched as a ref and not as a prefix of
// refs/stashed.
func TestListRefsMatchesForEachRef(t *testing.T) {
	r := newTestRepo(t)
	ids := r.history()
	var commits []string
	for _, id := range ids {
		if strings.TrimSpace(r.run(nil, "cat-file", "-t", id)) == "commit" {
			commits = append(commits, id)
		}
	}
	if len(commits) < 2 {
		t.Fatalf("only %d commits", len(commits))
	}
	r.run(nil, "update-ref", "refs/heads/packed", commits[0])
	r.run(nil, "update-ref", "refs/tags/t1", commits[0])
	r.run(nil, "pack-refs", "--all")
	r.run(nil, "update-ref", "refs/heads/loose/a", commits[1])
	r.run(nil, "update-ref", "refs/stash", commits[1])
	r.run(nil, "update-ref", "refs/stashed", commits[0])
	r.run(nil, "symbolic-ref", "refs/heads/sym", "refs/heads/packed")
	want := []Ref{}
	out := strings.TrimSpace(r.run(nil, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/", "refs/stash"))
	for _, line := range strings.Split(out, "\n") {
		id, name, _ := strings.Cut(line, " ")
		want = append(want, Ref{Name: name, ID: id})
	}
	got, err := ListRefs(r.gitDir, "refs/heads/", "refs/stash")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ListRefs:\n%v\nfor-each-ref:\n%v", got, want)
	}
	if len(got) < 4 {
		t.Fatalf("too few refs listed to prove anything: %v", got)
	}
}
