// Package policy owns role contracts: it loads, merges and validates them and
// answers "may this role do X?" — which tools, which argv, which paths, what
// a landing may add and which gate commands apply. Every enforcement point in
// runtask and land asks policy; no rule is hard-coded elsewhere.
//
// policy imports nothing of conductor's own packages. It also owns the one
// rule for the environment variable names a worker never receives
// (Withheld, secret.go), which runtask and conductor/sandbox ask.
package policy
