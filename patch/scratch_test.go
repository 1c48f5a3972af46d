package patch

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestNeutralRepoInScratch: the throw-away git dir is made in the Git's
// scratch folder, not in $TMPDIR, and is gone after use.
func TestNeutralRepoInScratch(t *testing.T) {
	requireGit(t)
	repo, commit := committedRepo(t)
	scratch := filepath.Join(t.TempDir(), "scratch")
	g := Git{GitDir: filepath.Join(repo, ".git"), Scratch: scratch}
	d, err := NewTreeDiffer(g)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := filepath.Glob(filepath.Join(scratch, "conductor-git-*"))
	if len(in) != 1 {
		t.Fatalf("scratch folder holds %v, want one git dir", in)
	}
	if _, err := d.Diff(context.Background(), emptyTreeID, commit, io.Discard); err != nil {
		t.Fatal(err)
	}
	// In use: never cleaned, even by this process.
	if n, err := CleanScratch(scratch); err != nil || n != 0 {
		t.Fatalf("CleanScratch of a live git dir: %d, %v", n, err)
	}
	d.Close()
	if left, _ := filepath.Glob(filepath.Join(scratch, "conductor-git-*")); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

const emptyTreeID = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// TestCleanScratch: folders of a killed owner go (its lock is free, or it
// has no lock and its pid is gone); live ones, and what is not ours, stay.
func TestCleanScratch(t *testing.T) {
	requireGit(t)
	dir := t.TempDir()
	// A process that made a git dir and was killed -9 while using it.
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadPID := cmd.Process.Pid
	cmd.Process.Kill()
	cmd.Wait()
	mk := func(name string, lock bool) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Join(p, "refs"), 0o700); err != nil {
			t.Fatal(err)
		}
		if lock {
			if err := os.WriteFile(filepath.Join(p, scratchLock), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	killedLocked := mk("conductor-git-"+strconv.Itoa(deadPID)+"-111", true)
	killedBeforeLock := mk("conductor-git-"+strconv.Itoa(deadPID)+"-222", false)
	reusedPID := mk("conductor-git-"+strconv.Itoa(os.Getppid())+"-333", true) // pid alive, lock free: stale
	creating := mk("conductor-git-"+strconv.Itoa(os.Getppid())+"-444", false) // pid alive, no lock yet
	other := mk("not-ours", true)
	liveDir, liveLock, err := makeScratch(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer liveLock.Close()

	n, err := CleanScratch(dir)
	if err != nil || n != 3 {
		t.Fatalf("CleanScratch: %d, %v; want 3 removed", n, err)
	}
	for _, p := range []string{killedLocked, killedBeforeLock, reusedPID} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: not removed (%v)", p, err)
		}
	}
	for _, p := range []string{creating, other, liveDir} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: removed (%v)", p, err)
		}
	}
	if n, err := CleanScratch(filepath.Join(dir, "absent")); n != 0 || err != nil {
		t.Errorf("CleanScratch of a missing folder: %d, %v", n, err)
	}
}

// TestCleanScratchConcurrent: a cleaner running all the time never removes
// a git dir that is being made or used.
func TestCleanScratchConcurrent(t *testing.T) {
	dir := t.TempDir()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				CleanScratch(dir)
			}
		}
	}()
	for i := 0; i < 200; i++ {
		p, lock, err := makeScratch(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "HEAD"), []byte("x\n"), 0o600); err != nil {
			t.Fatalf("git dir %d removed while in use: %v", i, err)
		}
		if _, err := os.Stat(filepath.Join(p, "HEAD")); err != nil {
			t.Fatalf("git dir %d removed while in use: %v", i, err)
		}
		os.RemoveAll(p)
		lock.Close()
	}
	close(stop)
	<-done
}
