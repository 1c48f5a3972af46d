package patch

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/patch/git"
)

// TestStarted: a git started before its input runs it like RunInput; one
// abandoned does nothing (an empty `update-ref --stdin` moves no ref); a
// failure is a *git.GitError carrying git's message; Wait may be repeated.
func TestStarted(t *testing.T) {
	requireGit(t)
	repo, head := committedRepo(t)
	g := Git{GitDir: filepath.Join(repo, ".git")}
	ctx := context.Background()

	s := g.Start(ctx, "hash-object", "--stdin")
	out, err := s.Run("f\n")
	if want := strings.TrimSpace(string(testGit(t, repo, nil, "rev-parse", "HEAD:f"))); err != nil || strings.TrimSpace(string(out)) != want {
		t.Fatalf("hash-object: %q %v, want %s", out, err, want)
	}
	if err := s.Wait(); err != nil {
		t.Fatalf("a second Wait: %v", err)
	}

	s = g.Start(ctx, "update-ref", "--stdin")
	s.Abandon()
	s.Abandon()
	if ids, _ := git.ReadRefs(g.GitDir, "refs/heads/x"); ids[0] != "" {
		t.Fatalf("an abandoned update-ref wrote %s", ids[0])
	}
	if _, err := g.Start(ctx, "update-ref", "--stdin").Run("update refs/heads/x " + head + "\n"); err != nil {
		t.Fatal(err)
	}
	if ids, _ := git.ReadRefs(g.GitDir, "refs/heads/x"); ids[0] != head {
		t.Fatalf("update-ref: x is %q", ids[0])
	}

	_, err = g.Start(ctx, "update-ref", "--stdin").Run("update refs/heads/x " + head + " " + strings.Repeat("1", 40) + "\n")
	var ge *git.GitError
	if !errors.As(err, &ge) || !strings.Contains(string(ge.Stderr), "cannot lock ref") {
		t.Fatalf("a failed compare-and-swap: %v", err)
	}
	if _, err := g.Start(ctx, "no-such-command").Run(""); !errors.As(err, &ge) {
		t.Fatalf("an unknown command: %v", err)
	}
}
