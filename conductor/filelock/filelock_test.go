package filelock

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A waiter for a lock whose holder removes the lock file must not think it
// holds a lock on the path: it locks the new file.
func TestLockSurvivesRemoval(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "wt-1.lock")
	first, err := Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *os.File)
	go func() {
		f, err := Lock(path)
		if err != nil {
			t.Error(err)
		}
		got <- f
	}()
	// The holder removes the file, then lets go.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	Unlock(first)
	second := <-got
	defer Unlock(second)
	held, _ := second.Stat()
	now, err := os.Stat(path)
	if err != nil || !os.SameFile(held, now) {
		t.Fatalf("the waiter holds a lock on a removed file (%v)", err)
	}
	// And it excludes a third taker.
	if third, err := TryLock(path); err != nil || third != nil {
		t.Fatalf("a second holder of the same lock: %v %v", third, err)
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sub", "x.lock")
	held, err := Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		f, err := Wait(ctx, path)
		Unlock(f)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a held lock after cancel: %v, want context.Canceled", err)
	}
	// Released, it is taken.
	Unlock(held)
	f, err := Wait(context.Background(), path)
	if err != nil || f == nil {
		t.Fatalf("Wait on a free lock: %v %v", f, err)
	}
	Unlock(f)
}

func TestLockErrorNamesThePath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Lock(filepath.Join(blocker, "x.lock")) // a folder that is a file
	if err == nil || !strings.Contains(err.Error(), blocker) {
		t.Fatalf("lock under a file: %v, want an error naming %s", err, blocker)
	}
}

func TestTryLockExistingNeverMakesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "owner.lock")
	if f, err := TryLockExisting(path); !errors.Is(err, fs.ErrNotExist) || f != nil {
		t.Fatalf("missing file: %v %v", f, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("TryLockExisting made %s: %v", path, err)
	}
	held, err := Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := TryLockExisting(path); err != nil || f != nil {
		t.Fatalf("held lock: %v %v", f, err)
	}
	Unlock(held)
	f, err := TryLockExisting(path)
	if err != nil || f == nil {
		t.Fatalf("free lock: %v %v", f, err)
	}
	Unlock(f)
}
