package land

import (
	"context"
	"fmt"
	"io"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/patch"
)

// Where landing checks the patch-id: this file. The binding patch-id of a
// landing is measured from the tree that lands — the canonical diff from
// the target tip's tree to the squash's tree (patch.TreeDiffer, the same
// diff and patch-id `conductor extract` and review use) — on every path,
// and compared with the patch-id the approving verdict recorded. Nothing
// else (the policy diff, the approved commit's own diff) stands in for it.

// squashed is the squash of the approved commit onto a tip: its tree and
// the patch-id of the canonical diff from the tip's tree to that tree.
type squashed struct {
	tree, pid string
	err       error
}

// squashAndMeasure squashes the approved commit onto tip (squashTree) and
// measures the squash's patch-id (measure).
func (l *lander) squashAndMeasure(ctx context.Context, tip, approved string) squashed {
	tree, err := l.squashTree(ctx, tip, approved)
	if err != nil {
		return squashed{err: err}
	}
	pid, err := l.measure(ctx, tip, tree, nil)
	return squashed{tree: tree, pid: pid, err: err}
}

// measure is the one place the binding patch-id of a landing is computed:
// the patch-id of the canonical diff from tip's tree to tree, the squash's
// tree, the tree that lands. The diff goes to w too when w is not nil (a
// target that did not move: that diff is also the policy diff, since the
// merge base is the tip and the squash the approved tree, so one git
// process serves both).
func (l *lander) measure(ctx context.Context, tip, tree string, w io.Writer) (string, error) {
	tipTree, err := l.cat.Get(tip + "^{tree}")
	if err != nil {
		return "", err
	}
	if tipTree.ID == "" {
		return "", fmt.Errorf("squash onto %s: the tip has no tree", patch.Short(tip))
	}
	d, err := l.differ()
	if err != nil {
		return "", err
	}
	pid, err := d.Diff(ctx, tipTree.ID, tree, w)
	if err != nil {
		return "", fmt.Errorf("patch-id of the squash onto %s: %w", patch.Short(tip), err)
	}
	return pid, nil
}

// checkPatchID refuses a squash whose measured patch-id is not the one the
// verdict approved (patch-id-mismatch): the change as it would land is not
// the change that was reviewed.
func checkPatchID(tip string, sq squashed, reviewed string) *refusal.Refusal {
	if sq.pid == reviewed {
		return nil
	}
	return refusal.New("patch-id-mismatch",
		fmt.Sprintf("the squash onto %s has patch-id %s, the verdict approved %s", patch.Short(tip), orNone(sq.pid), reviewed),
		"the change as it would land differs from what was reviewed (target changed nearby, or the diff was altered): rebase, review and approve again")
}
