// Package land turns a resolved merge decision into exactly one local commit
// on the target. It owns the landing's checks, each refusing with a code of
// docs/refusals.md and in the order docs/land.md gives: the decision, the
// verdict, the work ref, the landing policy, the squash (squash.go), the
// binding patch-id measured from the tree that lands (patchid.go: the one
// place it is checked), the gate on exactly that tree, and the
// compare-and-swap that moves the target and the receipt note (commit.go).
// It also owns the receipt (trailers and note) and its audit (audit.go).
//
// land never pushes, never changes a ref, a row or a worktree when it
// refuses, never deletes an object from the repository (what a refusal
// wrote is left for git gc), never runs a gate unsandboxed unless told to,
// never prints (it returns an Outcome; cmd/conductor renders it) and
// reaches git only through patch/git.
package land
