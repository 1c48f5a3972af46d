package patch

import (
	"context"

	"github.com/conductor-dev/conductor/patch/git"
)

// Running git, refs and objects live in patch/git; these names keep
// patch's callers (extract, apply, diffs, and the packages above patch)
// reading as before. New code imports patch/git.

// Git is git.Git, the guarded git helper.
type Git = git.Git

// GitError is git.GitError.
type GitError = git.GitError

// Started is git.Started, a git process started before its input is known.
type Started = git.Started

// DefaultTimeout is git.DefaultTimeout.
const DefaultTimeout = git.DefaultTimeout

// ErrKilled is git.ErrKilled.
var ErrKilled = git.ErrKilled

// OpenRepo is git.OpenRepo.
func OpenRepo(path string) (Git, error) { return git.OpenRepo(path) }

// ReadRefs is git.ReadRefs.
func ReadRefs(gitDir string, names ...string) ([]string, error) {
	return git.ReadRefs(gitDir, names...)
}

// SymbolicRef is git.SymbolicRef.
func SymbolicRef(gitDir, name string) (string, error) { return git.SymbolicRef(gitDir, name) }

// HeldLock is git.HeldLock.
func HeldLock(err error) (string, bool) { return git.HeldLock(err) }

// GitVersion is git.GitVersion.
func GitVersion(ctx context.Context) (string, error) { return git.GitVersion(ctx) }

// IsObjectID is git.IsObjectID.
func IsObjectID(s string) bool { return git.IsObjectID(s) }
