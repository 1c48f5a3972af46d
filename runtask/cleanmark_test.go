package runtask

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/patch"
)

// gitCounted puts a git first on PATH that logs each call and runs the
// real one; ran reports whether any git ran since the last call of ran.
func gitCounted(t *testing.T) (ran func() bool) {
	t.Helper()
	real, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	write(t, filepath.Join(dir, "git"), "#!/bin/sh\necho \"$@\" >> "+log+"\nexec "+real+" \"$@\"\n")
	if err := os.Chmod(filepath.Join(dir, "git"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return func() bool {
		b, _ := os.ReadFile(log)
		os.Remove(log)
		return len(b) > 0
	}
}

// fileRun changes the worktree as a file-tools-only run would and returns
// the paths it touched.
func fileRun(t *testing.T, wt string) []string {
	t.Helper()
	write(t, filepath.Join(wt, "main.go"), "package main // changed by the run\n")
	write(t, filepath.Join(wt, "notes", "n1.md"), "note\n")
	write(t, filepath.Join(wt, "build", "out.log"), "ignored\n")
	return []string{"main.go", "notes/n1.md", "build/out.log"}
}

// marked takes a worktree of a fresh pool and puts it back after a
// file-tools-only run: it carries a clean mark.
func marked(t *testing.T) (*Pool, *Lease, string) {
	t.Helper()
	p, _, base := restoreRepo(t)
	l, err := p.Acquire(context.Background(), base, "demo/s0")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseKnown(context.Background(), fileRun(t, l.Dir())); err != nil {
		t.Fatal(err)
	}
	return p, l, base
}

// takeAsksGit fails unless the next take of p at base runs git, and
// leaves the worktree it gets exactly the base.
func takeAsksGit(t *testing.T, p *Pool, base, why string) {
	t.Helper()
	ran := gitCounted(t)
	l, err := p.Acquire(context.Background(), base, "demo/s1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if !ran() {
		t.Fatal(why)
	}
	clean(t, l.Dir(), base)
}

// TestCleanMarkSkipsGit: a worktree put back by ReleaseKnown is taken again
// by this process without git, as long as nothing changed it, take after
// take; it is exactly the base each time.
func TestCleanMarkSkipsGit(t *testing.T) {
	ctx := context.Background()
	p, _, base := restoreRepo(t)
	l, err := p.Acquire(ctx, base, "demo/s0")
	if err != nil {
		t.Fatal(err)
	}
	wt := l.Dir()
	for i := 1; i <= 3; i++ {
		if err := l.ReleaseKnown(ctx, fileRun(t, wt)); err != nil {
			t.Fatal(err)
		}
		done := noGitOnPath(t)
		l, err = p.Acquire(ctx, base, "demo/s")
		done()
		if err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		if l.Fresh || l.Dir() != wt {
			t.Fatalf("take %d: not the marked worktree (fresh %v, %s)", i, l.Fresh, l.Dir())
		}
	}
	clean(t, wt, base)
	l.Release(ctx)
}

// TestCleanMarkCatchesChanges: whatever changes a marked free worktree —
// a file rewritten to the same size with its mtime put back, a new
// untracked or ignored file, a file turned into a link, a mode, the index,
// HEAD, the worktree's .git — the next take asks git, which puts it right.
func TestCleanMarkCatchesChanges(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, l *Lease)
	}{
		{"same size, mtime put back", func(t *testing.T, l *Lease) {
			f := filepath.Join(l.Dir(), "lib", "util.go")
			fi, _ := os.Stat(f)
			b, _ := os.ReadFile(f)
			write(t, f, strings.Replace(string(b), "41", "42", 1))
			os.Chtimes(f, fi.ModTime(), fi.ModTime())
		}},
		{"untracked file", func(t *testing.T, l *Lease) { write(t, filepath.Join(l.Dir(), "stray.txt"), "x\n") }},
		{"ignored file", func(t *testing.T, l *Lease) { write(t, filepath.Join(l.Dir(), "x.log"), "x\n") }},
		{"file turned into a link", func(t *testing.T, l *Lease) {
			f := filepath.Join(l.Dir(), "README.md")
			os.Remove(f)
			os.Symlink("main.go", f)
		}},
		{"mode", func(t *testing.T, l *Lease) { os.Chmod(filepath.Join(l.Dir(), "README.md"), 0o755) }},
		{"index", func(t *testing.T, l *Lease) { git(t, l.Dir(), "update-index", "--chmod=+x", "README.md") }},
		{"HEAD", func(t *testing.T, l *Lease) {
			parent := git(t, l.Dir(), "rev-parse", "HEAD~1")
			write(t, filepath.Join(l.Meta.GitDir, "HEAD"), parent+"\n")
		}},
		{"the worktree's .git", func(t *testing.T, l *Lease) {
			write(t, filepath.Join(l.Dir(), ".git"), "gitdir: "+l.Meta.GitDir+"\n") // same content, a new file
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, l, base := marked(t)
			c.change(t, l)
			takeAsksGit(t, p, base, "the take used the mark: no git ran")
		})
	}
}

// TestCleanMarkRacyEntries: a change the lstat keys cannot show (made in
// the same clock tick as the entry's ctime: simulated by a mark made after
// the change) is caught by comparing racy entries, and the paths the
// release put back whatever their times, with the base's content.
func TestCleanMarkRacyEntries(t *testing.T) {
	for _, c := range []struct {
		name, path string
		at         time.Duration // the mark's scan time, from now
	}{
		{"racy untouched file", "README.md", 0},
		{"put-back file, not racy", "main.go", time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, l, base := marked(t)
			wt := l.Dir()
			m, ok := takeMark(l.Meta.GitDir)
			if !ok || !m.recheck["main.go"] {
				t.Fatalf("no mark, or main.go not to recheck: %v %v", ok, m.recheck)
			}
			f := filepath.Join(wt, c.path)
			b, _ := os.ReadFile(f)
			write(t, f, strings.ToUpper(string(b)))
			_, stats, err := patch.ScanWorktreeStats(wt)
			if err != nil || stats == nil {
				t.Fatal(err)
			}
			m.files, m.at = stats, time.Now().Add(c.at)
			putMark(l.Meta.GitDir, m)
			takeAsksGit(t, p, base, "the take used the mark over a changed file")
		})
	}
}

// TestCleanMarkOnlyFromAKnownState: a release whose list misses a change,
// a take that moved the worktree to another base, and a plain Release
// leave no mark.
func TestCleanMarkOnlyFromAKnownState(t *testing.T) {
	ctx := context.Background()
	p, repo, base := restoreRepo(t)
	parent := git(t, repo, "rev-parse", "HEAD~1")

	l, err := p.Acquire(ctx, base, "demo/s0")
	if err != nil {
		t.Fatal(err)
	}
	paths := fileRun(t, l.Dir())
	write(t, filepath.Join(l.Dir(), "lib", "util.go"), "package lib // not listed\n")
	if err := l.ReleaseKnown(ctx, paths); err != nil {
		t.Fatal(err)
	}
	if _, ok := takeMark(l.Meta.GitDir); ok {
		t.Fatal("a release that missed a change left a mark")
	}

	l, err = p.Acquire(ctx, parent, "demo/s1") // checked out at another base
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseKnown(ctx, fileRun(t, l.Dir())); err != nil {
		t.Fatal(err)
	}
	if _, ok := takeMark(l.Meta.GitDir); ok {
		t.Fatal("a take that moved the worktree left a verified state")
	}

	l, err = p.Acquire(ctx, parent, "demo/s2")
	if err != nil {
		t.Fatal(err)
	}
	fileRun(t, l.Dir())
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := takeMark(l.Meta.GitDir); ok {
		t.Fatal("a release by git left a mark")
	}
}

// TestCleanMarkBoundsTheContentCheck: a mark whose racy entries are more
// than maxRacy (a large worktree checked out a moment ago) is left to git
// rather than read file by file.
func TestCleanMarkBoundsTheContentCheck(t *testing.T) {
	ctx := context.Background()
	p, repo, _ := restoreRepo(t)
	for i := 0; i <= maxRacy; i++ {
		write(t, filepath.Join(repo, "many", fmt.Sprintf("f%03d.txt", i)), fmt.Sprintln(i))
	}
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "many")
	base := git(t, repo, "rev-parse", "HEAD")
	l, err := p.Acquire(ctx, base, "demo/s0")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseKnown(ctx, fileRun(t, l.Dir())); err != nil {
		t.Fatal(err)
	}
	ran := gitCounted(t)
	l2, err := p.Acquire(ctx, base, "demo/s1")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if !ran() {
		t.Fatal("the take compared every racy file instead of asking git")
	}
}
