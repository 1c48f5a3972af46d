// Package review owns the review step: it turns a run's diff into a commit
// on the work branch, runs the mechanical checks of the policy (paths, size,
// per-file syntax) and the gate on a scratch export of that commit, prints a
// report and records a verdict bound to (work ref, commit, patch-id).
//
// The work branch of a task is refs/heads/work/<task-id>. Its commits are
// made by the conductor through a temporary index (read-tree, git apply
// --cached, write-tree, commit-tree, update-ref with the old value), so no
// worktree is ever touched. The tree of a run's commit is always the run's
// base plus the run's whole diff; its parent is the branch tip when the
// branch exists and descends from the run's base (a refinement round adds a
// commit), else the base itself. The binding patch-id is computed over
// patch.DiffTrees(base, commit) and must equal the patch-id the run
// recorded.
//
// review never runs anything in a worker's sandbox or with a worker's .git:
// the checks and the gate run on a plain export of the commit's tree (no
// .git at all, files written from git's object store without filters), with
// an environment built from an allowlist (no credential). review never
// imports the worker (runtask): re-dispatching is wired by the CLI.
package review
