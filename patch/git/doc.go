// Package git is conductor's one home for git: running the git CLI (Git,
// the guarded helper: explicit --git-dir and --work-tree, an isolated
// environment, guards against hostile repository configuration, a
// deadline and a process group for every child), reading refs and
// objects (go-git's reader, with one `git cat-file --batch` for what
// needs git's own name resolution), the object formats (tree and commit
// codecs are go-git's) and writing loose objects durably (zlib, fsync,
// rename: go-git does not fsync).
//
// git imports nothing of conductor's own packages. It never trusts a .git
// file or directory found inside a work tree (the caller names the git
// dir), never deletes an object from a repository, and never parses a
// pack itself: docs/adr-git-objects.md says why.
package git
