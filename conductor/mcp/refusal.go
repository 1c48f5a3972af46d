package mcp

import (
	"errors"
	"fmt"

	"github.com/conductor-dev/conductor/conductor/refusal"
)

// Refusal codes of conductor mcp (besides the store's); docs/refusals.md
// lists them. Each changes nothing.
const (
	CodeTaskNotFound      = "task-not-found"
	CodeRunNotRunning     = "run-not-running"
	CodePatchDoesNotApply = refusal.PatchDoesNotApply
	CodeListenNeedsToken  = "listen-needs-token"
)

// toolError is what an agent reads when a tool says no: the refusal's code,
// its sentence and its fix, so the agent can act on it.
type toolError struct{ err error }

func (e *toolError) Error() string {
	var r *refusal.Refusal
	if errors.As(e.err, &r) {
		s := fmt.Sprintf("refused (%s): %s", r.Code, r.Reason)
		if r.Fix != "" {
			s += "\nfix: " + r.Fix
		}
		return s
	}
	return e.err.Error()
}

func (e *toolError) Unwrap() error { return e.err }

// explain wraps a tool's error for the agent (nil stays nil).
func explain(err error) error {
	if err == nil {
		return nil
	}
	return &toolError{err: err}
}
