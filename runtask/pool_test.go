package runtask

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/filelock"
	pgit "github.com/conductor-dev/conductor/patch/git" // git names a test helper in this package
)

func newTestPool(t *testing.T, max int) (*Pool, string, string) {
	t.Helper()
	repo := newTestRepo(t, nil)
	g, err := pgit.OpenRepo(repo)
	if err != nil {
		t.Fatal(err)
	}
	p := NewPool(filepath.Join(t.TempDir(), "worktrees"), g, conductor.Config{})
	p.MaxCount = max
	return p, repo, git(t, repo, "rev-parse", "HEAD")
}

func write(t testing.TB, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPoolResetIsComplete: after a task that leaves ignored and untracked
// files, a modified index, a stash and a branch, the next task sees exactly
// the base (tree hash and `git status --porcelain --ignored` empty).
func TestPoolResetIsComplete(t *testing.T) {
	ctx := context.Background()
	p, repo, base := newTestPool(t, 2)
	baseTree := git(t, repo, "rev-parse", base+"^{tree}")
	// The operator's own stash entry and branch must survive.
	write(t, filepath.Join(repo, "README.md"), "operator change\n")
	git(t, repo, "stash", "push", "-q", "-m", "operator")
	git(t, repo, "branch", "operator-branch")

	l, err := p.Acquire(ctx, base, "demo/s1")
	if err != nil {
		t.Fatal(err)
	}
	if !l.Fresh {
		t.Fatal("first lease should be a new worktree")
	}
	wt := l.Dir()
	write(t, filepath.Join(wt, "untracked.txt"), "u\n")
	write(t, filepath.Join(wt, "build", "ignored.bin"), "i\n")
	write(t, filepath.Join(wt, "x.log"), "ignored log\n")
	write(t, filepath.Join(wt, "main.go"), "package main // changed\n")
	git(t, wt, "add", "main.go")
	write(t, filepath.Join(wt, "staged-new.txt"), "n\n")
	git(t, wt, "add", "staged-new.txt")
	write(t, filepath.Join(wt, "lib", "util.go"), "stashed change\n")
	git(t, wt, "stash", "push", "-q", "--", "lib/util.go")
	git(t, wt, "checkout", "-q", "-b", "worker-branch")
	git(t, wt, "commit", "-q", "-m", "worker commit")
	// Index entries git would not look at again: their files changed.
	git(t, wt, "update-index", "--assume-unchanged", "README.md")
	write(t, filepath.Join(wt, "README.md"), "hidden by assume-unchanged\n")
	git(t, wt, "update-index", "--skip-worktree", "lib/util.go")
	write(t, filepath.Join(wt, "lib", "util.go"), "hidden by skip-worktree\n")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	l2, err := p.Acquire(ctx, base, "demo/s2")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if l2.Fresh || l2.Dir() != wt {
		t.Fatalf("the pooled worktree was not reused (fresh %v, %s)", l2.Fresh, l2.Dir())
	}
	if got := git(t, wt, "rev-parse", "HEAD^{tree}"); got != baseTree {
		t.Fatalf("tree %s, want %s", got, baseTree)
	}
	if got := git(t, wt, "status", "--porcelain", "--ignored", "--untracked-files=all"); got != "" {
		t.Fatalf("status not empty:\n%s", got)
	}
	if got := git(t, wt, "diff", "--cached", "--name-only", base); got != "" {
		t.Fatalf("index differs from base: %s", got)
	}
	if got := git(t, wt, "ls-files", "-v"); strings.Contains(got, "h ") || strings.Contains(got, "S ") {
		t.Fatalf("index flags survived:\n%s", got)
	}
	for _, f := range []string{"README.md", filepath.Join("lib", "util.go")} {
		want := git(t, repo, "show", base+":"+filepath.ToSlash(f))
		if b, _ := os.ReadFile(filepath.Join(wt, f)); strings.TrimSpace(string(b)) != want {
			t.Fatalf("%s holds %q, want the base's %q", f, b, want)
		}
	}
	if got := git(t, repo, "stash", "list"); got != "stash@{0}: On main: operator" {
		t.Fatalf("stash list: %q", got)
	}
	if _, err := gitErr(repo, "rev-parse", "--verify", "refs/heads/worker-branch"); err == nil {
		t.Fatal("the worker's branch survived")
	}
	git(t, repo, "rev-parse", "--verify", "refs/heads/operator-branch")
}

func TestPoolDiscardsBroken(t *testing.T) {
	ctx := context.Background()
	p, _, base := newTestPool(t, 2)
	l, err := p.Acquire(ctx, base, "o")
	if err != nil {
		t.Fatal(err)
	}
	slot := l.Meta.Slot
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Break the pooled worktree: its files vanish.
	if err := os.RemoveAll(l.Dir()); err != nil {
		t.Fatal(err)
	}
	l2, err := p.Acquire(ctx, base, "o")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if l2.Meta.Slot == slot || !l2.Fresh {
		t.Fatalf("a broken worktree was reused: %s", l2.Meta.Slot)
	}
	st, err := p.Status(ctx)
	if err != nil || len(st) != 1 {
		t.Fatalf("status %+v %v", st, err)
	}
}

func TestPoolBoundsAndNearest(t *testing.T) {
	ctx := context.Background()
	p, repo, c1 := newTestPool(t, 2)
	write(t, filepath.Join(repo, "second.txt"), "2\n")
	git(t, repo, "add", "second.txt")
	git(t, repo, "commit", "-q", "-m", "second")
	c2 := git(t, repo, "rev-parse", "HEAD")

	// Three concurrent leases get three distinct worktrees.
	var wg sync.WaitGroup
	leases := make([]*Lease, 3)
	errs := make([]error, 3)
	for i := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := c1
			if i == 2 {
				base = c2
			}
			leases[i], errs[i] = p.Acquire(ctx, base, "o")
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, l := range leases {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if seen[l.Dir()] {
			t.Fatal("two leases share a worktree")
		}
		seen[l.Dir()] = true
		// An extraction makes the slot's kept neutral git dir, which goes
		// with the slot.
		if _, err := extractPatch(ctx, l, l.Meta.Base, filepath.Join(t.TempDir(), "patch.diff")); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(l.neutralDir()); err != nil || !fi.IsDir() {
			t.Fatalf("no kept neutral git dir at %s: %v", l.neutralDir(), err)
		}
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st, err := p.Status(ctx)
	if err != nil || len(st) != 2 {
		t.Fatalf("pool keeps %d (want 2): %v", len(st), err)
	}
	// The least recently used (leases[0]) was evicted, its lock file too.
	if _, err := os.Stat(leases[0].Dir()); err == nil {
		t.Fatal("the least recently used worktree was kept")
	}
	if _, err := os.Stat(leases[0].Dir() + ".lock"); err == nil {
		t.Fatal("the evicted slot's lock file was left behind")
	}
	if _, err := os.Stat(leases[0].neutralDir()); err == nil {
		t.Fatal("the evicted slot's neutral git dir was left behind")
	}
	// The nearest pooled worktree is taken: the one at c2.
	l, err := p.Acquire(ctx, c2, "o")
	if err != nil {
		t.Fatal(err)
	}
	if l.Dir() != leases[2].Dir() {
		t.Fatalf("took %s, want the one already at c2 (%s)", l.Dir(), leases[2].Dir())
	}
	// Another base: the other pooled worktree moves to it.
	l2, err := p.Acquire(ctx, c2, "o")
	if err != nil || l2.Fresh || l2.Dir() != leases[1].Dir() {
		t.Fatalf("%v fresh=%v %s", err, l2.Fresh, l2.Dir())
	}
	if got := git(t, l2.Dir(), "rev-parse", "HEAD"); got != c2 {
		t.Fatalf("HEAD %s want %s", got, c2)
	}
	l.Release(ctx)
	l2.Release(ctx)
	removed, err := p.Prune(ctx, true, false)
	if err != nil || len(removed) != 2 {
		t.Fatalf("prune: %v %v", removed, err)
	}
	if out := git(t, repo, "worktree", "list", "--porcelain"); strings.Count(out, "worktree ") != 1 {
		t.Fatalf("worktrees left:\n%s", out)
	}
	if locks, _ := filepath.Glob(filepath.Join(p.Dir, "wt-*.lock")); len(locks) > 0 {
		t.Fatalf("pruned slots left their lock files: %v", locks)
	}
	if dirs, _ := filepath.Glob(filepath.Join(p.Dir, "wt-*.git")); len(dirs) > 0 {
		t.Fatalf("pruned slots left their neutral git dirs: %v", dirs)
	}
}

func TestPoolAdoptKeepsOwner(t *testing.T) {
	ctx := context.Background()
	p, _, base := newTestPool(t, 2)
	l, err := p.Acquire(ctx, base, "demo/a")
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(l.Dir(), "work.txt"), "in progress\n")
	if err := l.Keep(); err != nil {
		t.Fatal(err)
	}
	// Kept worktrees are not handed to others.
	other, err := p.Acquire(ctx, base, "demo/b")
	if err != nil || other.Dir() == l.Dir() {
		t.Fatalf("%v %s", err, other.Dir())
	}
	defer other.Release(ctx)
	if _, err := p.Adopt(ctx, l.Meta.Slot, "demo/b"); err == nil {
		t.Fatal("adopted another session's worktree")
	}
	a, err := p.Adopt(ctx, l.Meta.Slot, "demo/a")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(a.Dir(), "work.txt")); string(b) != "in progress\n" {
		t.Fatal("adopted worktree lost its work")
	}
	// A held worktree cannot be adopted twice.
	if _, err := p.Adopt(ctx, l.Meta.Slot, "demo/a"); err == nil {
		t.Fatal("adopted a worktree held by another lease")
	}
	a.Release(ctx)
}

// A .git a worker's command replaced is restored before the worktree is
// kept or pooled: it never runs anything for the operator.
func TestPoolRestoresDotGit(t *testing.T) {
	ctx := context.Background()
	p, _, base := newTestPool(t, 2)
	for _, keep := range []bool{true, false} {
		l, err := p.Acquire(ctx, base, "o")
		if err != nil {
			t.Fatal(err)
		}
		dotgit := filepath.Join(l.Dir(), ".git")
		want, err := os.ReadFile(dotgit)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(dotgit); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dotgit, "config"), "[core]\n\tfsmonitor = touch /tmp/pwned\n")
		write(t, filepath.Join(dotgit, "HEAD"), "ref: refs/heads/main\n")
		if keep {
			err = l.Keep()
		} else {
			err = l.Release(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(dotgit)
		if err != nil || string(got) != string(want) {
			t.Fatalf("keep=%v: .git = %q, %v; want %q", keep, got, err, want)
		}
		if keep {
			l2, err := p.Adopt(ctx, l.Meta.Slot, "o")
			if err != nil {
				t.Fatal(err)
			}
			l2.Release(ctx)
		}
	}
}

// submodulePool is a pool of a repository with an uninitialised submodule
// at vendor/lib (a gitlink; a checkout has an empty folder there).
func submodulePool(t *testing.T) (*Pool, string) {
	t.Helper()
	p, repo, _ := newTestPool(t, 2)
	write(t, filepath.Join(repo, ".gitmodules"), "[submodule \"lib\"]\n\tpath = vendor/lib\n\turl = https://example.invalid/lib.git\n")
	git(t, repo, "update-index", "--add", "--cacheinfo", "160000,1111111111111111111111111111111111111111,vendor/lib")
	git(t, repo, "add", ".gitmodules")
	git(t, repo, "commit", "-q", "-m", "submodule")
	return p, git(t, repo, "rev-parse", "HEAD")
}

// plantFilterTrap makes dir a repository whose clean filter runs a program
// that leaves marker, with a staged file whose stat data no longer matches:
// any host git that entered it (status, checkout, add) would run the
// filter, as the conductor. This is what a landing gate (or a worker) can
// leave in a submodule's folder, which a reset keeps.
func plantFilterTrap(t *testing.T, dir, marker string) {
	t.Helper()
	write(t, filepath.Join(dir, "f.txt"), "secret\n")
	git(t, dir, "init", "-q")
	git(t, dir, "add", "f.txt")
	git(t, dir, "config", "filter.evil.clean", "touch "+marker+"; cat")
	git(t, dir, "config", "core.fsmonitor", "touch "+marker)
	write(t, filepath.Join(dir, ".gitattributes"), "* filter=evil\n")
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(dir, "f.txt"), old, old); err != nil {
		t.Fatal(err)
	}
}

// TestPoolDiscardsPlantedTraps (issue 14, item 2): a worktree whose
// submodule folder holds a repository with a hostile filter, a nested
// repository elsewhere, a named pipe, or just files in a submodule folder
// is discarded, never reset and reused: no host git runs in it, the trap
// never fires, and the next task gets a fresh worktree. Planted while the
// lease is held (as by a worker or a gate) or into a free worktree.
func TestPoolDiscardsPlantedTraps(t *testing.T) {
	ctx := context.Background()
	traps := map[string]func(t *testing.T, wt, marker string){
		"submodule filter": func(t *testing.T, wt, marker string) {
			plantFilterTrap(t, filepath.Join(wt, "vendor", "lib"), marker)
		},
		"nested repository": func(t *testing.T, wt, marker string) {
			plantFilterTrap(t, filepath.Join(wt, "lib", "nested"), marker)
		},
		"named pipe as a nested HEAD": func(t *testing.T, wt, marker string) {
			if err := os.MkdirAll(filepath.Join(wt, "pkg", "nest", ".git", "objects"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(filepath.Join(wt, "pkg", "nest", ".git", "HEAD"), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"files in a submodule folder": func(t *testing.T, wt, marker string) {
			write(t, filepath.Join(wt, "vendor", "lib", "later.sh"), "touch "+marker+"\n")
		},
	}
	for name, plant := range traps {
		for _, when := range []string{"held", "free"} {
			t.Run(name+", "+when, func(t *testing.T) {
				p, base := submodulePool(t)
				marker := filepath.Join(t.TempDir(), "ran")
				l, err := p.Acquire(ctx, base, "gate")
				if err != nil {
					t.Fatal(err)
				}
				slot, wt := l.Meta.Slot, l.Dir()
				if when == "held" {
					plant(t, wt, marker)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if when == "free" {
					if _, err := os.Stat(wt); err != nil {
						t.Fatalf("a clean worktree was not kept: %v", err)
					}
					plant(t, wt, marker)
				}
				l2, err := p.Acquire(ctx, base, "next")
				if err != nil {
					t.Fatal(err)
				}
				defer l2.Release(ctx)
				if _, err := os.Stat(marker); err == nil {
					t.Fatal("the planted trap ran on the host")
				}
				if l2.Meta.Slot == slot || !l2.Fresh {
					t.Fatalf("the worktree with the trap was reused (slot %s)", slot)
				}
				if _, err := os.Lstat(wt); !os.IsNotExist(err) {
					t.Fatalf("the worktree with the trap is still there: %v", err)
				}
			})
		}
	}
}

// TestChangedFilesNeverEntersSubmodules: even with a populated submodule
// whose repository has a hostile filter and a .gitmodules asking for
// "ignore = none" (which overrides the guards' diff.ignoreSubmodules=all
// for git status), changedFiles' git status does not enter it: the second
// layer under the worktree scan.
func TestChangedFilesNeverEntersSubmodules(t *testing.T) {
	ctx := context.Background()
	p, base := submodulePool(t)
	l, err := p.Acquire(ctx, base, "o")
	if err != nil {
		t.Fatal(err)
	}
	defer l.discard(ctx)
	marker := filepath.Join(t.TempDir(), "ran")
	write(t, filepath.Join(l.Dir(), ".gitmodules"), "[submodule \"lib\"]\n\tpath = vendor/lib\n\turl = x\n\tignore = none\n")
	plantFilterTrap(t, filepath.Join(l.Dir(), "vendor", "lib"), marker)
	files, err := changedFiles(ctx, l.Git)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("git status entered the submodule and ran its filter")
	}
	if len(files) != 1 || files[0] != ".gitmodules" {
		t.Fatalf("changed files %q", files)
	}
}

// TestPoolMetaWritesOutsideThePoolLock: a lease's own metadata (the take's
// busy mark once its slot is picked, the release's free mark, Keep) is
// written under its slot's lock alone, so a process that holds the
// pool-wide lock (another worker scanning the pool) does not hold up a
// release; and many takes and releases at once never share a worktree.
func TestPoolMetaWritesOutsideThePoolLock(t *testing.T) {
	ctx := context.Background()
	p, _, base := newTestPool(t, 4)
	l, err := p.Acquire(ctx, base, "o")
	if err != nil {
		t.Fatal(err)
	}
	held, err := filelock.Lock(filepath.Join(p.Dir, "pool.lock"))
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() { released <- l.Release(ctx) }()
	select {
	case err := <-released:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		filelock.Unlock(held)
		t.Fatal("the release waited for the pool-wide lock")
	}
	filelock.Unlock(held)
	if st, err := p.Status(ctx); err != nil || len(st) != 1 || st[0].State != SlotFree {
		t.Fatalf("pool after the release: %+v %v", st, err)
	}

	var mu sync.Mutex
	inUse := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 6; i++ {
				l, err := p.Acquire(ctx, base, fmt.Sprintf("o%d", g))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if inUse[l.Dir()] {
					errs <- fmt.Errorf("two leases share %s", l.Dir())
				}
				inUse[l.Dir()] = true
				mu.Unlock()
				time.Sleep(time.Millisecond) // held a while: another take would overlap
				mu.Lock()
				delete(inUse, l.Dir())
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st, err := p.Status(ctx)
	if err != nil || len(st) > 4 {
		t.Fatalf("pool keeps %d worktrees (at most 4): %v", len(st), err)
	}
	for _, s := range st {
		if s.State != SlotFree {
			t.Fatalf("slot %s left %s", s.Slot, s.State)
		}
	}
}
