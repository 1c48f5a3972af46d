package policy

import "github.com/conductor-dev/conductor/conductor/refusal"

// Refusal is refusal.Refusal (its home now). These names go in the next
// commit, a scripted rename of every use.
type Refusal = refusal.Refusal

// Refuse is refusal.New.
func Refuse(code refusal.Code, reason, fix string) *Refusal { return refusal.New(code, reason, fix) }

// Refusef is refusal.Newf.
func Refusef(code refusal.Code, fix, format string, args ...any) *Refusal {
	return refusal.Newf(code, fix, format, args...)
}
