package forge

import (
	"errors"

	"github.com/conductor-dev/conductor/conductor/refusal"
)

// Refusal codes of the forge (docs/refusals.md lists them). A refusal
// changes nothing on the forge: it is found before anything is pushed or
// written.
const (
	// CodeIssueNotFound: the issue to reference, comment on or close does
	// not exist on the forge. (Gitea answers a comment on a missing issue
	// with HTTP 500, so the issue is looked up first.)
	CodeIssueNotFound = "issue-not-found"
	// CodeForgeForbidden: the token may read the repository but not push
	// to it (a read-only scope, or a user without write access).
	CodeForgeForbidden = "forge-forbidden"
)

// refusalError is a refusal.Refusal (exit status 3 in the CLI) that still
// matches the forge's sentinels (ErrNotFound, ErrForbidden).
type refusalError struct {
	refusal  *refusal.Refusal
	sentinel error
}

func (e *refusalError) Error() string   { return e.refusal.Error() }
func (e *refusalError) Unwrap() []error { return []error{e.refusal, e.sentinel} }

// ErrForbidden is returned (wrapped) when the forge answers 403: the token
// is valid but may not do this.
var ErrForbidden = errors.New("forbidden")

func issueNotFound(n int64, repo, url string) error {
	return &refusalError{
		refusal: refusal.Newf(CodeIssueNotFound,
			"check the issue number, or that the repository (--owner/--repo, the remote) is the one the issue is in",
			"issue #%d does not exist in the forge repository %s on %s", n, repo, url),
		sentinel: ErrNotFound,
	}
}

func forbidden(repo, url string) error {
	return &refusalError{
		refusal: refusal.Newf(CodeForgeForbidden,
			"give the token write access: a token with the write:repository scope (or \"all\") of a user who may push to the repository; `conductor doctor` checks it",
			"the token cannot push to %s (on %s)", repo, url),
		sentinel: ErrForbidden,
	}
}
