// Package patch owns "the diff": extraction of one canonical diff from a
// worktree against a base commit, the stable patch-id that binds review to
// landing, and applying a diff onto a tree. It also owns ScanWorktree, the
// one place a worker's worktree is checked before any host git touches it
// (nested repositories, special files, unsafe names).
//
// Running git, refs and objects are patch/git's (patch.Git and the other
// git names here are aliases of it, for patch's callers). patch imports
// nothing of conductor's own packages but patch/git and never trusts a
// .git file or directory found inside a work tree.
package patch
