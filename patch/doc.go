// Package patch owns "the diff": extraction of one canonical diff from a
// worktree against a base commit, the stable patch-id that binds review to
// landing, and applying a diff onto a tree. It also owns Git, the one helper
// through which every git command in conductor runs (explicit --git-dir,
// isolated environment, guards against hostile repository config, no
// submodule recursion, a deadline and a process group for every child), and
// ScanWorktree, the one place a worker's worktree is checked before any host
// git touches it (nested repositories, special files, unsafe names).
//
// patch imports nothing of conductor's own packages and never trusts a .git
// file or directory found inside a work tree.
package patch
