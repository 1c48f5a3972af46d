// Package land turns a resolved merge decision into exactly one local commit
// on the target: it proves the work ref is still at the approved commit,
// checks the landing policy, squashes onto the target tip, checks the
// squash's patch-id against the reviewed one, runs the gate on exactly the
// tree being committed and moves the target by compare-and-swap.
//
// land never pushes, never changes anything when it refuses, and never runs
// git through anything but git.Git.
//
// # Steps
//
// Run refuses an id that cannot be a decision id (decision-id-invalid), reads
// the decision (decision-not-found, decision-not-resolved,
// decision-not-merge, target-invalid, work-ref-invalid), reports an existing
// landing (store row), refuses a symbolic target (target-symbolic) and a
// notes ref that holds no notes commit (notes-ref-invalid), then checks
// that the latest verdict on the work ref approves exactly the raised commit
// (no-approval, verdict-stale) and that the work ref is still there
// (work-ref-moved). Then, from the target tip: the landing policy on the
// canonical diff from the merge base to the approved commit (target-not-allowed,
// adds-root-file, adds-top-level-dir, forbidden-path); the squash (conflict);
// the binding patch-id of the canonical diff from the tip to the squashed
// tree, compared with the verdict's (patch-id-mismatch); a worktree that has
// the target checked out must be able to follow (target-checked-out-dirty);
// the gate (gate-failed). Then the commit and the receipt note's objects are
// written (in process, as git writes loose objects: zlib, fsync, rename),
// the latest verdict is read again (verdict-stale: one recorded during the
// gate counts) and one atomic ref transaction verifies the work ref is still
// at the approved commit (work-ref-moved), moves the target (compare-and-swap
// from the tip) and the notes ref. A ref lock another git process holds is
// waited for briefly, then reported by name (a retryable error). A target that moved is retried once from the new
// tip, then target-moved. docs/refusals.md lists every code.
//
// A landing killed after its ref transaction but before its store row is
// refused like any change already on the target (its squash is empty), so
// before any refusal Run looks for the decision's Decision-Id trailer on the
// target's first-parent history since the merge base. Anyone can write a
// trailer: the commit is taken as the landing only when its receipt
// verifies (one parent; its tree is the squash of the approved commit onto
// it; the reviewed patch-id; trailers and receipt note as audit checks
// them), else landed-receipt-invalid. A verified one gets its store row and
// is reported as landed.
//
// Refs and objects are read in process: loose ones, and packed ones
// through the packs' .idx files (pack.go: deltas applied, every object
// checked against its id); one `git cat-file --batch`, started on first
// need, answers the rest (tags, names to resolve, an object in an alternate
// or anything damaged). As soon as the target tip and the approved commit
// are known — before the store's verdict is read — the policy diff (`git
// diff tip...approved`: merge base and diff in one process) starts, and so
// does the squash; the checks still decide in their documented order, and
// a refusal stops and waits for what was started.
//
// The squash (squash.go): when the tip is the approved commit's only
// parent, it is the approved tree. When the target moved elsewhere (every
// file the change touches is at the tip exactly as the change found it, and
// no folder a side removed is one the other adds to), the change is applied
// to the tip's tree in process — a few trees rebuilt, the same tree
// `merge-tree` gives, checked on random cases — from the approved commit's
// own changes, confirmed by the policy diff when it ends. In both cases the
// squash changes exactly what the policy diff changes, so its canonical
// diff is the policy diff, byte for byte, and so is its patch-id. Otherwise
// `git merge-tree --write-tree` squashes, and the squash's own canonical
// diff gives its patch-id (unless it has the policy diff's changes).
//
// The commit and the receipt note's objects are written in process (zlib,
// fsync, rename). When no gate runs, they are built with the approved
// patch-id and written while the diffs run (prewrite), since the landing
// commits only if the squash has that patch-id; what a refusal leaves
// unused is removed. The `git update-ref --stdin` that moves the refs is
// started at the beginning and given its transaction at the end. A landing
// runs two git processes (the policy diff and update-ref; merge-tree and a
// diff more when the change overlaps what the target changed); the by-hand
// floor runs three.
//
// # No checkout unless the gate needs files
//
// The squash is a tree (above): no index, no worktree. When no gate command
// NeedsFiles, the gate runs in an empty scratch folder (the tree id is in
// CONDUCTOR_LAND_TREE). Otherwise (or with Options.Worktree) a worktree gets
// exactly that tree checked out (verified with write-tree) and its .git link
// removed, so nothing the gate runs can reach the repository, and the gate
// runs there: a detached scratch worktree of the landing's own under the
// data root, never a worktree of the worker pool (a gate runs
// worker-written code; what it leaves behind, such as a repository planted
// in a submodule's folder, must never meet a later task's host git). The
// committed tree is the one computed before the gate. Scratch folders and
// worktree admin entries are removed before Run returns, and stale ones (a
// killed landing) by the next landing on the same target.
//
// # Serialisation and crash safety
//
// Landings on one target hold an flock(2) lock under the data root from the
// first repository read to the store row (the gate included), so concurrent
// landings queue instead of failing; the notes ref has its own short lock.
// The kernel drops a dead process's lock. The target ref and the notes ref
// move in one `git update-ref --stdin` transaction, only after the gate
// passed, so the target never points at an ungated commit.
//
// # Receipt
//
// The landed commit keeps the approved commit's message (its own trailers
// dropped) and adds Decision-Id, Reviewed-Commit, Patch-Id, Run-Id, Task-Id
// (when known) and Model trailers; a JSON Receipt is attached as a git note on
// refs/notes/conductor (past 256 notes at its top level, new ones go into
// git's two-hex-digit fan-out folders, so a landing's note costs the same
// however many there are). Audit re-derives the patch-id from the commit's first
// parent and compares it with the trailers, the note and the store.
//
// # A checked-out target
//
// When the target branch is checked out in the main worktree or a linked
// one, that worktree must have no changes to tracked files and no file in the
// way (`read-tree -m -u -n`), else target-checked-out-dirty; after the ref
// moved, `git read-tree -m -u OLD NEW` brings its index and files along, so
// it shows no phantom reverse diff.
//
// # What a dry run or refusal may leave
//
// The squash's tree objects (written by merge-tree, or in process before a
// gate that checks the tree out and by a dry run) may stay in the object store, as may the
// commit's and the note's when the process is killed or the target moves
// at the last moment; they are unreferenced and `git gc` prunes them. The
// commit and note objects written ahead for a landing that is then refused
// are removed. Nothing else: no ref, no reflog entry, no store row, no
// worktree, no temporary index.
package land
