package git

import (
	"errors"
	"regexp"
)

// heldLockRE matches git's message when a ref or index lock file exists:
// "Unable to create '/repo/.git/refs/heads/main.lock': File exists."
var heldLockRE = regexp.MustCompile(`Unable to create '([^']+\.lock)': File exists`)

// HeldLock reports the lock file named by a git error that failed because
// another process holds it (the file exists). A held lock is retryable.
func HeldLock(err error) (string, bool) {
	var ge *GitError
	if !errors.As(err, &ge) {
		return "", false
	}
	m := heldLockRE.FindSubmatch(ge.Stderr)
	if m == nil {
		return "", false
	}
	return string(m[1]), true
}
