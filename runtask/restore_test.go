package runtask

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// noGitOnPath makes every git the process starts fail, for the duration of
// the test's call: what must not run git proves it by working anyway.
func noGitOnPath(t *testing.T) (restore func()) {
	t.Helper()
	dir := t.TempDir()
	marker := filepath.Join(dir, "git-ran")
	write(t, filepath.Join(dir, "git"), "#!/bin/sh\necho \"$@\" >> "+marker+"\nexit 1\n")
	if err := os.Chmod(filepath.Join(dir, "git"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := os.Getenv("PATH")
	os.Setenv("PATH", dir)
	return func() {
		os.Setenv("PATH", old)
		if b, err := os.ReadFile(marker); err == nil {
			t.Fatalf("git ran: %s", b)
		}
	}
}

// restoreRepo is a repository with an executable, a symlink and nested
// folders, and its pool.
func restoreRepo(t *testing.T) (*Pool, string, string) {
	t.Helper()
	p, repo, _ := newTestPool(t, 2)
	write(t, filepath.Join(repo, "bin", "run.sh"), "#!/bin/sh\necho run\n")
	if err := os.Chmod(filepath.Join(repo, "bin", "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("lib/util.go", filepath.Join(repo, "link.go")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(repo, "deep", "a", "b.txt"), "b\n")
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "more")
	return p, repo, git(t, repo, "rev-parse", "HEAD")
}

// clean fails unless the worktree is exactly base: same tree, nothing
// modified, untracked or ignored, and no folder the base lacks.
func clean(t *testing.T, wt, base string) {
	t.Helper()
	if got := git(t, wt, "status", "--porcelain", "--ignored", "--untracked-files=all"); got != "" {
		t.Fatalf("status not empty:\n%s", got)
	}
	if got := git(t, wt, "rev-parse", "HEAD"); got != base {
		t.Fatalf("HEAD %s, want %s", got, base)
	}
	for _, d := range []string{"new", "build", filepath.Join("deep", "a", "c")} {
		if _, err := os.Lstat(filepath.Join(wt, d)); err == nil {
			t.Fatalf("folder %s survived", d)
		}
	}
}

// TestReleaseKnownRestoresWithoutGit: the paths a file-tools-only run
// changed are put back in process — modified, deleted, re-moded and
// re-linked tracked files, new files in new folders, an ignored file — and
// the next take finds the worktree clean and reuses it.
func TestReleaseKnownRestoresWithoutGit(t *testing.T) {
	ctx := context.Background()
	p, _, base := restoreRepo(t)
	l, err := p.Acquire(ctx, base, "demo/s1")
	if err != nil {
		t.Fatal(err)
	}
	wt := l.Dir()
	write(t, filepath.Join(wt, "main.go"), "package main // changed\n")
	os.Remove(filepath.Join(wt, "deep", "a", "b.txt"))
	os.Chmod(filepath.Join(wt, "bin", "run.sh"), 0o644)
	os.Remove(filepath.Join(wt, "link.go"))
	os.Symlink("main.go", filepath.Join(wt, "link.go"))
	write(t, filepath.Join(wt, "new", "deeper", "n.txt"), "n\n")
	write(t, filepath.Join(wt, "deep", "a", "c", "d.txt"), "d\n")
	write(t, filepath.Join(wt, "build", "out.bin"), "ignored\n")
	paths := []string{"bin/run.sh", "build/out.bin", "deep/a/b.txt", "deep/a/c/d.txt", "link.go", "main.go", "new/deeper/n.txt"}

	done := noGitOnPath(t)
	err = l.ReleaseKnown(ctx, paths)
	done()
	if err != nil {
		t.Fatal(err)
	}
	clean(t, wt, base)
	if fi, err := os.Stat(filepath.Join(wt, "bin", "run.sh")); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Fatalf("run.sh lost its executable bit: %v %v", fi.Mode(), err)
	}
	if target, err := os.Readlink(filepath.Join(wt, "link.go")); err != nil || target != "lib/util.go" {
		t.Fatalf("link.go -> %q (%v), want lib/util.go", target, err)
	}
	l2, err := p.Acquire(ctx, base, "demo/s2")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if l2.Fresh || l2.Dir() != wt {
		t.Fatalf("the worktree was not reused (fresh %v, %s)", l2.Fresh, l2.Dir())
	}
}

// TestReleaseKnownTrustsNothing: a caller whose list misses changes (a
// modified file, an untracked and an ignored one, a branch) still gets a
// clean worktree from the next take: it verifies and resets with git.
func TestReleaseKnownTrustsNothing(t *testing.T) {
	ctx := context.Background()
	p, repo, base := restoreRepo(t)
	l, err := p.Acquire(ctx, base, "demo/s1")
	if err != nil {
		t.Fatal(err)
	}
	wt := l.Dir()
	write(t, filepath.Join(wt, "main.go"), "package main // listed\n")
	write(t, filepath.Join(wt, "lib", "util.go"), "package lib // not listed\n")
	write(t, filepath.Join(wt, "stray.txt"), "not listed\n")
	write(t, filepath.Join(wt, "x.log"), "ignored, not listed\n")
	if err := l.ReleaseKnown(ctx, []string{"main.go"}); err != nil {
		t.Fatal(err)
	}
	l2, err := p.Acquire(ctx, base, "demo/s2")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	clean(t, l2.Dir(), base)
	want := git(t, repo, "show", base+":lib/util.go")
	if b, _ := os.ReadFile(filepath.Join(l2.Dir(), "lib", "util.go")); strings.TrimSpace(string(b)) != want {
		t.Fatalf("lib/util.go holds %q", b)
	}
}

// TestReleaseKnownNeverFollowsLinks: a link on the way to a listed path (out
// of the worktree or inside it), a path into .git or out of the worktree:
// nothing outside is read, written or removed, and the worktree is reset by
// git instead.
func TestReleaseKnownNeverFollowsLinks(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, wt, outside string)
		paths []string
	}{
		{"link out of the worktree", func(t *testing.T, wt, outside string) {
			os.Symlink(outside, filepath.Join(wt, "out"))
		}, []string{"out/victim.txt", "out"}},
		{"tracked folder replaced by a link", func(t *testing.T, wt, outside string) {
			os.RemoveAll(filepath.Join(wt, "lib"))
			os.Symlink(outside, filepath.Join(wt, "lib"))
		}, []string{"lib/util.go", "lib/victim.txt"}},
		{"dot-dot", func(t *testing.T, wt, outside string) {}, []string{"../" + "victim.txt", "main.go"}},
		{".git", func(t *testing.T, wt, outside string) {}, []string{".git", ".GIT/config"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _, base := restoreRepo(t)
			outside := t.TempDir()
			victim := filepath.Join(outside, "victim.txt")
			write(t, victim, "keep\n")
			l, err := p.Acquire(ctx, base, "demo/s1")
			if err != nil {
				t.Fatal(err)
			}
			wt := l.Dir()
			tc.plant(t, wt, outside)
			if err := l.ReleaseKnown(ctx, tc.paths); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(victim); err != nil || string(b) != "keep\n" {
				t.Fatalf("outside file changed: %q %v", b, err)
			}
			if _, err := os.Lstat(filepath.Join(outside, "util.go")); err == nil {
				t.Fatal("a file was written outside the worktree")
			}
			l2, err := p.Acquire(ctx, base, "demo/s2")
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Release(ctx)
			clean(t, l2.Dir(), base)
		})
	}
}
