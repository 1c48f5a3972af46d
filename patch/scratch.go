package patch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/conductor-dev/conductor/conductor/filelock"
)

// A throw-away git dir is a folder "conductor-git-<pid>-<random>" in the
// scratch folder, holding "owner.lock", flocked by its owner for as long as
// the folder is in use. The kernel drops the flock when the owner dies
// (kill -9 included), so CleanScratch can tell a stale folder from a live
// one without trusting the pid alone (pids are reused).
const (
	scratchPrefix = "conductor-git-"
	scratchLock   = "owner.lock"
)

// makeScratch makes a throw-away folder in dir (os.TempDir() when empty)
// and returns it with its held lock.
func makeScratch(dir string) (string, *os.File, error) {
	if dir == "" {
		dir = os.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("scratch folder: %w", err)
	}
	path, err := os.MkdirTemp(dir, fmt.Sprintf("%s%d-", scratchPrefix, os.Getpid()))
	if err != nil {
		return "", nil, err
	}
	// The lock is taken under a temporary name and renamed into place, so
	// a cleaner never finds an owner.lock that is not locked yet.
	tmp := filepath.Join(path, scratchLock+".new")
	f, err := filelock.TryLock(tmp)
	if err == nil && f == nil {
		err = errors.New("held by another process")
	}
	if err == nil {
		if err = os.Rename(tmp, filepath.Join(path, scratchLock)); err != nil {
			filelock.Unlock(f)
		}
	}
	if err != nil {
		os.RemoveAll(path)
		return "", nil, fmt.Errorf("scratch folder %s: lock: %w", path, err)
	}
	return path, f, nil
}

// CleanScratch removes the throw-away git dirs in dir whose owner is gone
// (a killed process): those whose lock can be taken, and those without a
// lock whose pid no longer runs (killed between making the folder and
// locking it). It returns how many it removed; a folder in use is never
// touched.
func CleanScratch(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	removed := 0
	var errs []error
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), scratchPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if !scratchStale(path, rest) {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// scratchStale reports whether the folder path ("conductor-git-" + rest) has
// no living owner.
func scratchStale(path, rest string) bool {
	f, err := filelock.TryLockExisting(filepath.Join(path, scratchLock))
	if err != nil {
		// No lock (yet): stale only when the pid in the name is gone.
		pidText, _, _ := strings.Cut(rest, "-")
		pid, perr := strconv.Atoi(pidText)
		if perr != nil || pid <= 0 {
			return false // not ours to judge
		}
		return pid != os.Getpid() && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	}
	if f == nil {
		return false // held: in use
	}
	filelock.Unlock(f)
	// Taken: the owner is gone (or has just finished, and removes it too).
	return true
}
