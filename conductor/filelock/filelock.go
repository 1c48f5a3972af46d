// Package filelock is the one exclusive file lock of the tree: flock(2) on a
// file, which the kernel drops when the process dies, so a killed holder
// never leaves a stale lock (the empty lock file stays and is reused).
//
// It owns taking and releasing the lock and the one subtlety of locks on
// files that are removed (a pool slot's lock goes with its slot): a lock is
// only returned when the locked file is still the one at the path. It never
// writes to the lock file and imports nothing of ours (a leaf).
package filelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Lock blocks until it holds an exclusive lock on path (made, with its
// folder, when missing). Release it with Unlock.
func Lock(path string) (*os.File, error) { return lock(path, false, true) }

// TryLock takes the lock on path when it is free; a held lock returns
// (nil, nil).
func TryLock(path string) (*os.File, error) { return lock(path, true, true) }

// TryLockExisting is TryLock for a checker that must never make the lock
// it checks: when path does not exist the error wraps fs.ErrNotExist.
func TryLockExisting(path string) (*os.File, error) { return lock(path, true, false) }

// Wait is Lock that gives up when ctx ends (it polls, since a blocked
// flock cannot be interrupted).
func Wait(ctx context.Context, path string) (*os.File, error) {
	wait := 5 * time.Millisecond
	for {
		f, err := TryLock(path)
		if err != nil || f != nil {
			return f, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// Unlock releases a lock taken by Lock, TryLock or Wait (nil is a no-op).
func Unlock(f *os.File) {
	if f != nil {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}
}

func lock(path string, try, create bool) (*os.File, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
	}
	how := syscall.LOCK_EX
	if try {
		how |= syscall.LOCK_NB
	}
	for {
		f, err := os.OpenFile(path, flags, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		for {
			err = syscall.Flock(int(f.Fd()), how)
			if err != syscall.EINTR {
				break
			}
		}
		if err != nil {
			f.Close()
			if try && errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, nil
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// The holder we waited for may have removed the file: a lock on a
		// file no longer at path locks nothing. Lock the one there now.
		held, err1 := f.Stat()
		now, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return f, nil
		}
		Unlock(f)
	}
}
