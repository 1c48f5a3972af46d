package git

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// TestIndexMatchesGoGit is the differential test of the hand-written index
// reader: on indexes git writes (versions 2, 3 and 4; files, an executable,
// a symlink, a gitlink, an intent-to-add entry, a skip-worktree one), every
// entry's mode and name is what go-git's decoder reads, and IndexSeedable
// sees what go-git cannot (an assume-unchanged entry).
func TestIndexMatchesGoGit(t *testing.T) {
	r := newTestRepo(t)
	work := t.TempDir()
	wt := func(args ...string) string {
		return r.run(nil, append([]string{"--work-tree=" + work}, args...)...)
	}
	for name, body := range map[string]string{"a.txt": "a\n", "dir/b.go": "package b\n", "dir/deep/c.md": "c\n", "run.sh": "#!/bin/sh\n"} {
		p := filepath.Join(work, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(body), 0o644)
	}
	os.Chmod(filepath.Join(work, "run.sh"), 0o755)
	os.Symlink("a.txt", filepath.Join(work, "link"))
	wt("add", "a.txt", "dir", "run.sh", "link")
	blob := r.run(nil, "hash-object", "-w", "--stdin")
	wt("update-index", "--add", "--cacheinfo", "160000,"+blob+",vendor/sub")
	os.WriteFile(filepath.Join(work, "later.txt"), []byte("later\n"), 0o644)
	wt("add", "-N", "later.txt")
	indexFile := filepath.Join(r.gitDir, "index")
	read := func() []byte {
		b, err := os.ReadFile(indexFile)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	type entry struct {
		Mode uint32
		Name string
	}
	compare := func(name string) {
		t.Helper()
		b := read()
		var ours []entry
		if err := IndexEntries(b, func(mode uint32, n string) { ours = append(ours, entry{mode, n}) }); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var idx index.Index
		if err := index.NewDecoder(bytes.NewReader(b)).Decode(&idx); err != nil {
			t.Fatalf("%s: go-git: %v", name, err)
		}
		var theirs []entry
		for _, e := range idx.Entries {
			theirs = append(theirs, entry{uint32(e.Mode), e.Name})
		}
		if !reflect.DeepEqual(ours, theirs) {
			t.Fatalf("%s: entries\n ours   %v\n go-git %v", name, ours, theirs)
		}
		links, err := IndexGitlinks(indexFile)
		if err != nil || !reflect.DeepEqual(links, []string{"vendor/sub"}) {
			t.Fatalf("%s: gitlinks %v %v", name, links, err)
		}
	}
	for _, v := range []string{"2", "3", "4"} {
		wt("update-index", "--index-version", v)
		compare("version " + v)
	}
	if !IndexSeedable(read()) {
		t.Fatal("a plain index (intent-to-add included) is not seedable")
	}
	wt("update-index", "--skip-worktree", "a.txt")
	compare("skip-worktree")
	if IndexSeedable(read()) {
		t.Fatal("a skip-worktree entry is seedable")
	}
	wt("update-index", "--no-skip-worktree", "a.txt")
	wt("update-index", "--assume-unchanged", "dir/b.go")
	compare("assume-unchanged")
	if IndexSeedable(read()) || IndexIsPlain(indexFile) {
		t.Fatal("an assume-unchanged entry (which go-git's decoder does not report) is seedable")
	}
}
