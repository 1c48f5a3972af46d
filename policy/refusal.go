package policy

import "fmt"

// Refusal is a "no" from a policy check or a gate: a stable code, a one-line
// reason and what to do about it. Everything that refuses changes nothing;
// the CLI maps a Refusal to exit status 3. Every code is listed in
// docs/refusals.md.
type Refusal struct {
	Code   string `json:"code"`
	Reason string `json:"reason"`
	Fix    string `json:"fix,omitempty"`
	// Detail carries extra text for people (for example a gate's output tail).
	Detail string `json:"detail,omitempty"`
}

// Refuse builds a Refusal.
func Refuse(code, reason, fix string) *Refusal {
	return &Refusal{Code: code, Reason: reason, Fix: fix}
}

// Refusef builds a Refusal with a formatted reason.
func Refusef(code, fix, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Reason: fmt.Sprintf(format, args...), Fix: fix}
}

func (r *Refusal) Error() string {
	return "refused: " + r.Code + ": " + r.Reason
}
