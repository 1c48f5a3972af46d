package bus

import (
	"errors"
	"fmt"

	"github.com/conductor-dev/conductor/conductor/refusal"
)

// Refusal codes the store returns. Each refusal changes nothing; the CLI
// exits 3 and prints the fix. docs/store.md lists them.
const (
	CodeDecisionResolved = "decision-already-resolved"
	CodeOptionNotOffered = "decision-option-not-offered"
	CodeDecisionLanded   = "decision-already-landed"
	CodeSchemaTooNew     = "store-schema-too-new"
)

// refusalError is a refusal that also matches a store sentinel
// (errors.Is(err, ErrConflict) and errors.As(err, **refusal.Refusal) both
// hold), so store callers branch on the sentinel and the CLI maps it to the
// refused exit status.
type refusalError struct {
	sentinel error
	refusal  *refusal.Refusal
}

func (e *refusalError) Error() string   { return e.refusal.Error() }
func (e *refusalError) Unwrap() []error { return []error{e.sentinel, e.refusal} }

func conflict(code refusal.Code, fix, format string, args ...any) error {
	return &refusalError{sentinel: ErrConflict, refusal: refusal.Newf(code, fix, format, args...)}
}

// notFound reports a missing record.
func notFound(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, ErrNotFound)...)
}

// describedError is a backend error already explained for people (it names
// the database); callers return it without adding context again.
type describedError struct{ err error }

func (e *describedError) Error() string { return e.err.Error() }
func (e *describedError) Unwrap() error { return e.err }

func describedf(format string, args ...any) error {
	return &describedError{err: fmt.Errorf(format, args...)}
}

func isDescribed(err error) bool {
	var de *describedError
	return errors.As(err, &de)
}

// ErrUnreachable is matched (errors.Is) by the error of opening a store
// whose server does not answer: an outage to wait out, not a configuration
// error.
var ErrUnreachable = errors.New("store unreachable")

// unreachableError prints its message (already redacted) and matches
// ErrUnreachable.
type unreachableError struct{ msg string }

func (e *unreachableError) Error() string        { return e.msg }
func (e *unreachableError) Is(target error) bool { return target == ErrUnreachable }
