// Package refusal is conductor's "no": the Refusal value every policy
// check, gate and guard returns, its typed codes and their one catalogue
// (catalogue.go, kept equal to docs/refusals.md by its test).
//
// It owns the vocabulary only: what a refusal is and which codes exist. It
// never decides anything and imports nothing of ours (a leaf), so the
// store, the forge and the policy can all refuse without importing each
// other.
package refusal

import (
	"errors"
	"fmt"
)

// Code is a refusal's stable name (`work-ref-moved`, `patch-id-mismatch`,
// …). Scripts branch on it; every code is in Catalogue and
// docs/refusals.md.
type Code string

// Refusal is a "no" from a policy check or a gate: a stable code, a one-line
// reason and what to do about it. Everything that refuses changes nothing;
// the CLI maps a Refusal to exit status 3.
type Refusal struct {
	Code   Code   `json:"code"`
	Reason string `json:"reason"`
	Fix    string `json:"fix,omitempty"`
	// Detail carries extra text for people (for example a gate's output tail).
	Detail string `json:"detail,omitempty"`
}

// New builds a Refusal.
func New(code Code, reason, fix string) *Refusal {
	return &Refusal{Code: code, Reason: reason, Fix: fix}
}

// Newf builds a Refusal with a formatted reason.
func Newf(code Code, fix, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Reason: fmt.Sprintf(format, args...), Fix: fix}
}

func (r *Refusal) Error() string {
	return "refused: " + string(r.Code) + ": " + r.Reason
}

// CodeOf returns the code of the refusal in err's chain, or "" when err is
// not a refusal.
func CodeOf(err error) Code {
	if r, ok := errors.AsType[*Refusal](err); ok {
		return r.Code
	}
	return ""
}

// NoSandbox is the sandbox-unavailable refusal of a step that would run
// worker-written code: unisolated names what --sandbox none would run
// without isolation ("the gate", "the checks and the gate", "the worker").
func NoSandbox(unisolated, format string, args ...any) *Refusal {
	return Newf(SandboxUnavailable,
		"install bubblewrap or Docker (conductor doctor tells what is missing), or pass --sandbox none to run "+unisolated+" unisolated (not recommended)",
		format, args...)
}
