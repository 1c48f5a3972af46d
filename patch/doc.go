// Package patch owns "the diff": extraction of one canonical diff from a
// worktree against a base commit, the stable patch-id that binds review to
// landing, and applying a diff onto a tree. It also owns Git, the one helper
// through which every git command in conductor runs (explicit --git-dir,
// isolated environment, guards against hostile repository config).
//
// patch imports nothing of conductor's own packages and never trusts a .git
// file or directory found inside a work tree.
package patch
