package forge

import (
	"context"
	"errors"
	"fmt"
)

// Forge is what the conductor needs from a code forge. It is bound to one
// repository on the forge and to the local repository and remote it pushes
// from. A GitHub or Forgejo adapter implements the same five methods.
type Forge interface {
	// Push pushes the local branch to the same branch on the forge.
	Push(ctx context.Context, branch string, opts PushOptions) (PushResult, error)
	// FindPR returns the open pull request from head into base, or
	// ErrNotFound.
	FindPR(ctx context.Context, head, base string) (PR, error)
	// OpenPR opens a pull request. A pull request that already exists for
	// the same head and base is returned with Existing set, not an error.
	OpenPR(ctx context.Context, opts PROpts) (PR, error)
	// CommentIssue adds a comment to an issue (or pull request).
	CommentIssue(ctx context.Context, issue int64, body string) error
	// CloseIssue closes an issue; closing a closed issue is not an error.
	CloseIssue(ctx context.Context, issue int64) error
}

// PushOptions tunes a push.
type PushOptions struct {
	// Force replaces the remote branch even when it is not an ancestor
	// (work branches are rewritten after a refinement round).
	Force bool
}

// PushResult says what a push did.
type PushResult struct {
	Branch string `json:"branch"`
	Commit string `json:"commit"`
	Remote string `json:"remote"`
	// UpToDate is true when the forge already had the commit.
	UpToDate bool `json:"upToDate"`
}

// PROpts describes a pull request to open.
type PROpts struct {
	Head  string
	Base  string
	Title string
	Body  string
}

// PR is a pull request as the forge reports it.
type PR struct {
	Number  int64  `json:"number"`
	URL     string `json:"url"`
	Title   string `json:"title"`
	Head    string `json:"head"`
	Base    string `json:"base"`
	State   string `json:"state"`
	Draft   bool   `json:"draft"`
	HeadSHA string `json:"headSha,omitempty"`
	// Existing is true when the pull request was already open.
	Existing bool `json:"existing"`
}

// ErrNotFound is returned (wrapped) when the forge has no such pull request,
// issue, branch or repository.
var ErrNotFound = errors.New("not found on the forge")

// notFound is an error that matches ErrNotFound without repeating its text.
type notFound struct{ msg string }

func (e *notFound) Error() string        { return e.msg }
func (e *notFound) Is(target error) bool { return target == ErrNotFound }

func notFoundf(format string, args ...any) error {
	return &notFound{msg: fmt.Sprintf(format, args...)}
}

// ErrUnauthorized is returned (wrapped) when the forge rejects the token.
var ErrUnauthorized = errors.New("unauthorized")

// ErrUnreachable is returned (wrapped) when the forge cannot be reached.
var ErrUnreachable = errors.New("forge unreachable")

// APIError is a non-2xx answer from the forge.
type APIError struct {
	Op      string // what was being done, e.g. "create pull request"
	Status  int
	Message string
}

func (e *APIError) Error() string {
	switch e.Status {
	case 401:
		return fmt.Sprintf("%s: unauthorized (HTTP 401): %s", e.Op, e.Message)
	case 403:
		return fmt.Sprintf("%s: forbidden (HTTP 403): %s", e.Op, e.Message)
	}
	return fmt.Sprintf("%s: HTTP %d: %s", e.Op, e.Status, e.Message)
}

// Is lets errors.Is match ErrUnauthorized and ErrNotFound.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.Status == 401
	case ErrNotFound:
		return e.Status == 404
	}
	return false
}
