package land

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
)

// The squash: the approved commit's change applied onto the target tip,
// as a tree (no index, no worktree). `git merge-tree --write-tree` is the
// reference; the one shortcut is a target that did not move.

// squashTree is the tree of the approved commit squashed onto tip. When
// tip is the approved commit's only parent (the target did not move since
// the work's base) it is the approved commit's own tree, which is what
// `git merge-tree` gives then (TestSquashMatchesMergeTree checks it on a
// random corpus); otherwise `git merge-tree --write-tree` squashes, or
// refuses with the conflicting paths. Either way the patch-id is measured
// from the tree it returns (squashAndMeasure), never taken from elsewhere.
func (l *lander) squashTree(ctx context.Context, tip, approved string) (string, error) {
	if tree, ok := l.quietTarget(tip, approved); ok {
		return tree, nil
	}
	return l.mergeTree(ctx, tip, approved)
}

// quietTarget returns the approved commit's tree when tip is its only
// parent.
func (l *lander) quietTarget(tip, approved string) (string, bool) {
	if l.cat == nil || !git.IsObjectID(approved) {
		return "", false
	}
	o, err := l.cat.Get(approved + "^{commit}")
	if err != nil || o.Type != "commit" {
		return "", false
	}
	c, err := git.ParseCommit(o.ID, o.Content)
	if err != nil || len(c.Parents) != 1 || c.Parents[0] != tip {
		return "", false
	}
	return c.Tree, true
}

// mergeTree merges the approved commit onto tip without a checkout and
// returns the resulting tree, or a conflict refusal: the reference squash.
func (l *lander) mergeTree(ctx context.Context, tip, approved string) (string, error) {
	out, err := l.g.Run(ctx, "merge-tree", "--write-tree", "--no-messages", "--name-only", tip, approved)
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 1 && len(lines) > 1 {
			r := refusal.New("conflict",
				fmt.Sprintf("the approved change does not apply cleanly onto %s (%d conflicting path(s))", patch.Short(tip), len(lines)-1),
				"rebase the work onto the target, review and approve again, then land")
			r.Detail = strings.Join(lines[1:], "\n")
			return "", r
		}
		return "", fmt.Errorf("squash onto %s: %w", patch.Short(tip), err)
	}
	tree := strings.TrimSpace(lines[0])
	if len(tree) < 40 {
		return "", fmt.Errorf("squash onto %s: unexpected merge-tree output %q", patch.Short(tip), out)
	}
	return tree, nil
}
