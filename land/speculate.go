package land

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
	"github.com/conductor-dev/conductor/policy"
)

// The git work of a landing attempt — the policy diff from the merge base,
// the squash and the squash's patch-id — depends only on the target tip
// and the approved commit, so it starts as soon as both ids are known:
// before the store's verdict is read. The checks still decide in their
// documented order; a refusal discards what was started. What is started
// writes no ref: merge-tree writes unreferenced trees at most, left for git
// gc. All of it is waited for before the landing returns.

// squashed is the squash of the approved commit onto a tip: its tree and
// the patch-id of the canonical diff from the tip's tree to that tree.
type squashed struct {
	tree, pid string
	err       error
}

// speculation is the git work of one (tip, approved) pair.
type speculation struct {
	chDone, sqDone chan struct{}
	changes        []policy.Change // the policy diff's changes
	chErr          error           // patch.ErrNoMergeBase: no shared history
	sq             squashed
}

// policyChanges are the changes from the merge base to the approved commit.
func (s *speculation) policyChanges() ([]policy.Change, error) { <-s.chDone; return s.changes, s.chErr }

// squash is the squash and its measured patch-id.
func (s *speculation) squash() squashed { <-s.sqDone; return s.sq }

// at returns the work for tip and approved, starting it if needed.
func (l *lander) at(tip, approved string) *speculation {
	l.specMu.Lock()
	defer l.specMu.Unlock()
	key := tip + " " + approved
	if s, ok := l.specs[key]; ok {
		return s
	}
	s := &speculation{chDone: make(chan struct{}), sqDone: make(chan struct{})}
	if l.specs == nil {
		l.specs = map[string]*speculation{}
	}
	l.specs[key] = s
	ctx := l.bg
	l.wg.Add(2)
	go func() {
		defer l.wg.Done()
		defer close(s.chDone)
		s.changes, s.chErr = l.changes(ctx, tip, approved)
	}()
	go func() {
		defer l.wg.Done()
		defer close(s.sqDone)
		s.sq = l.squashAndMeasure(ctx, tip, approved)
	}()
	return s
}

// squashAndMeasure squashes the approved commit onto tip (squashTree) and
// measures the squash's patch-id: the canonical diff from the tip's tree to
// the squash's tree, the tree that lands, on every path. This is the one
// place the binding patch-id of a landing is computed.
func (l *lander) squashAndMeasure(ctx context.Context, tip, approved string) squashed {
	tree, err := l.squashTree(ctx, tip, approved)
	if err != nil {
		return squashed{err: err}
	}
	tipTree, err := l.cat.Get(tip + "^{tree}")
	if err != nil {
		return squashed{err: err}
	}
	if tipTree.ID == "" {
		return squashed{err: fmt.Errorf("squash onto %s: the tip has no tree", short(tip))}
	}
	d, err := l.differ()
	if err != nil {
		return squashed{err: err}
	}
	pid, err := d.Diff(ctx, tipTree.ID, tree, nil)
	if err != nil {
		return squashed{tree: tree, err: fmt.Errorf("patch-id of the squash onto %s: %w", short(tip), err)}
	}
	return squashed{tree: tree, pid: pid}
}

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

// mergeBase returns the merge base of tip and the approved commit; ""
// when they share no history. (Only the search for a killed landing needs
// it: the policy diff finds the base itself.)
func (l *lander) mergeBase(ctx context.Context, tip string) (string, error) {
	base, err := l.g.Line(ctx, "merge-base", tip, l.approved.ID)
	if err != nil {
		var ge *git.GitError
		if !errors.As(err, &ge) || len(ge.Stderr) != 0 {
			return "", err
		}
		base = ""
	}
	return base, nil
}

// differ makes the landing's neutral git dir for canonical diffs in the
// background; differ waits for it.
type differ struct {
	ready chan struct{} // closed once d (or err) is set
	d     *patch.TreeDiffer
	err   error
	done  sync.Once // closes d
}

func (l *lander) startDiffer() {
	l.diff = &differ{ready: make(chan struct{})}
	go func() {
		defer close(l.diff.ready)
		l.diff.d, l.diff.err = patch.NewTreeDiffer(l.g)
	}()
}

func (l *lander) differ() (*patch.TreeDiffer, error) {
	<-l.diff.ready
	return l.diff.d, l.diff.err
}

// closeDiffer removes the neutral git dir once no diff is left to run.
func (l *lander) closeDiffer() {
	l.diff.done.Do(func() {
		if d, err := l.differ(); err == nil {
			d.Close()
		}
	})
}
