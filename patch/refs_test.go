package patch

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/conductor-dev/conductor/patch/git"
)

// TestReadRefs: loose, packed and symbolic refs read in process agree with
// git; a broken ref is an error (the caller asks git).
func TestReadRefs(t *testing.T) {
	requireGit(t)
	repo, head := committedRepo(t)
	testGit(t, repo, nil, "update-ref", "refs/heads/packed", head)
	testGit(t, repo, nil, "pack-refs", "--all")
	testGit(t, repo, nil, "update-ref", "refs/heads/loose", head)
	testGit(t, repo, nil, "symbolic-ref", "refs/heads/sym", "refs/heads/packed")
	gitDir := filepath.Join(repo, ".git")
	got, err := git.ReadRefs(gitDir, "HEAD", "refs/heads/packed", "refs/heads/loose", "refs/heads/sym", "refs/heads/none")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{head, head, head, head, ""}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadRefs = %v, want %v", got, want)
	}
	os.WriteFile(filepath.Join(gitDir, "refs", "heads", "broken"), []byte("not an id\n"), 0o644)
	if ids, err := git.ReadRefs(gitDir, "refs/heads/broken"); err == nil {
		t.Fatalf("a broken ref read as %q", ids)
	}
}
