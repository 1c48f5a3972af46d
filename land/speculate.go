package land

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/policy"
)

// The git work of a landing attempt — the policy diff from the merge base,
// the squash and its patch-id — depends only on the target tip and the
// approved commit, so it starts as soon as both ids are known: before the
// store's verdict is read. The checks still decide in their documented
// order; a refusal discards what was started. What is started writes no
// ref: merge-tree writes unreferenced trees at most, and the objects
// written ahead (prewrite) are removed when the landing does not commit
// them. All of it is waited for before the landing returns.

// squashed is the squash of the approved commit onto a tip.
type squashed struct {
	tree, pid string
	trees     []looseObject // the tree objects made in process (not written yet)
	err       error
}

// speculation is the git work of one (tip, approved) pair.
type speculation struct {
	chDone, sqDone chan struct{}
	treeDone       chan struct{} // closed once tree and trees are known
	announced      sync.Once
	tree           string          // the squash's tree ("": it failed)
	trees          []looseObject   // its tree objects made in process
	changes        []policy.Change // the policy diff's changes
	pid            string          // and its binding patch-id
	chErr          error           // patch.ErrNoMergeBase: no shared history
	sq             squashed
}

// policyChanges are the changes from the merge base to the approved commit.
func (s *speculation) policyChanges() ([]policy.Change, error) { <-s.chDone; return s.changes, s.chErr }
func (s *speculation) squash() squashed                        { <-s.sqDone; return s.sq }

// at returns the work for tip and approved, starting it if needed.
func (l *lander) at(tip, approved string) *speculation {
	l.specMu.Lock()
	defer l.specMu.Unlock()
	key := tip + " " + approved
	if s, ok := l.specs[key]; ok {
		return s
	}
	s := &speculation{chDone: make(chan struct{}), sqDone: make(chan struct{}), treeDone: make(chan struct{})}
	if l.specs == nil {
		l.specs = map[string]*speculation{}
	}
	l.specs[key] = s
	ctx := l.bg
	// The policy diff is needed either way: it starts first.
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer close(s.chDone)
		s.changes, s.pid, s.chErr = l.changes(ctx, tip, approved)
	}()
	quietTree, quiet := l.quietTarget(tip, approved)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer close(s.sqDone)
		defer s.announce("", nil) // nothing to build on, if nothing was announced
		if quiet {
			// The target has not moved since the work's base: the squash
			// is the approved commit's own tree (merge-tree would give just
			// that), and its canonical diff is the policy diff itself.
			s.announce(quietTree, nil)
			<-s.chDone
			s.sq = squashed{tree: quietTree, pid: s.pid, err: s.chErr}
			return
		}
		s.sq = l.squashMoved(ctx, s, tip, approved)
	}()
	return s
}

// announce makes tree, and the tree objects made in process for it, the
// squash the commit is written ahead for (prewrite); only the first call
// counts.
func (s *speculation) announce(tree string, trees []looseObject) {
	s.announced.Do(func() {
		s.tree, s.trees = tree, trees
		close(s.treeDone)
	})
}

// squashMoved squashes the approved commit onto a tip that is not its
// parent. Mostly the target moved elsewhere and the merge base is the
// approved commit's parent: its own changes, read in process, apply to the
// tip's tree as it is, and the squash's canonical diff is the policy diff
// (squash.go). That tree is announced before the policy diff ends, and
// stands once the policy diff shows the same changes. Otherwise the policy
// diff's changes are applied, and when they do not apply, merge-tree
// squashes and git diffs its tree (unless it has the same changes).
func (l *lander) squashMoved(ctx context.Context, s *speculation, tip, approved string) squashed {
	objs, err := l.lookup(tip+"^{tree}", approved+"^{commit}", approved+"^{tree}")
	if err != nil {
		return squashed{err: err}
	}
	tipTree, approvedTree := objs[0].OID, objs[2].OID
	var early []policy.Change
	if c, err := parseCommit(objs[1].OID, objs[1].Content); err == nil && len(c.Parents) == 1 {
		if pt, err := l.cat.get(c.Parents[0] + "^{tree}"); err == nil && pt.OID != "" {
			early, _ = l.fileChanges(pt.OID, approvedTree)
		}
	}
	var sq squashed
	earlyOK := false
	if len(early) > 0 {
		if sq.tree, sq.trees, earlyOK = l.applyChanges(tipTree, approvedTree, early); earlyOK {
			s.announce(sq.tree, sq.trees)
		}
	}
	if <-s.chDone; s.chErr != nil {
		return squashed{err: s.chErr}
	}
	if earlyOK && sameChangeSet(early, s.changes) {
		sq.pid = s.pid
		return sq
	}
	if tree, trees, ok := l.applyChanges(tipTree, approvedTree, s.changes); ok {
		s.announce(tree, trees)
		return squashed{tree: tree, pid: s.pid, trees: trees}
	}
	tree, err := l.squash(ctx, tip, approved)
	if err != nil {
		return squashed{err: err}
	}
	s.announce(tree, nil)
	if l.sameChanges(tipTree, tree, s.changes) {
		return squashed{tree: tree, pid: s.pid}
	}
	d, err := l.differ()
	if err != nil {
		return squashed{err: err}
	}
	pid, err := d.Diff(ctx, tipTree, tree, nil)
	if err != nil {
		err = fmt.Errorf("patch-id of the squash: %w", err)
	}
	return squashed{tree: tree, pid: pid, err: err}
}

// mergeBase returns the merge base of tip and the approved commit; ""
// when they share no history. (Only the search for a killed landing needs
// it: the policy diff finds the base itself.)
func (l *lander) mergeBase(ctx context.Context, tip string) (string, error) {
	base, err := l.g.Line(ctx, "merge-base", tip, l.approved.OID)
	if err != nil {
		var ge *patch.GitError
		if !errors.As(err, &ge) || len(ge.Stderr) != 0 {
			return "", err
		}
		base = ""
	}
	return base, nil
}

// startDiffer makes the landing's neutral git dir for canonical diffs in
// the background; differ waits for it.
func (l *lander) startDiffer() {
	l.diffReady = make(chan struct{})
	go func() {
		defer close(l.diffReady)
		l.diff, l.diffErr = patch.NewTreeDiffer(l.g)
	}()
}

func (l *lander) differ() (*patch.TreeDiffer, error) {
	<-l.diffReady
	return l.diff, l.diffErr
}

// closeDiffer removes the neutral git dir once no diff is left to run.
func (l *lander) closeDiffer() {
	l.diffDone.Do(func() {
		if d, err := l.differ(); err == nil {
			d.Close()
		}
	})
}

// quietTarget returns the approved commit's tree when tip is its only
// parent. (The landing reads that commit anyway: when it is packed, this
// starts the cat-file process a little earlier.)
func (l *lander) quietTarget(tip, approved string) (string, bool) {
	if l.cat == nil || !patch.IsObjectID(approved) {
		return "", false
	}
	o, err := l.cat.get(approved + "^{commit}")
	if err != nil || o.Type != "commit" {
		return "", false
	}
	c, err := parseCommit(o.OID, o.Content)
	if err != nil || len(c.Parents) != 1 || c.Parents[0] != tip {
		return "", false
	}
	return c.Tree, true
}

// prewritten is one prewrite's work.
type prewritten struct {
	done chan struct{}
}

// prewrite writes, in the background, the commit and note objects the
// attempt from tip will commit if the squash's patch-id is the approved one
// (the only way it commits): their fsyncs then overlap the diffs, and the
// commit finds them in the store. It runs only when nothing else goes into
// them (no gate, so no gate results). What the landing does not commit
// stays unreferenced for git gc (dropPrewritten): nothing is ever deleted.
func (l *lander) prewrite(tip string, s *speculation) {
	p := &prewritten{done: make(chan struct{})}
	l.pre = append(l.pre, p)
	go func() {
		defer close(p.done)
		select {
		case <-s.treeDone:
		case <-l.bg.Done():
			return
		}
		if s.tree == "" {
			return
		}
		pid := l.v.PatchID
		landed, blob, who, err := l.landingObjects(tip, s.tree, l.message(pid), pid, nil)
		if err != nil {
			return
		}
		_, notes, err := l.noteObjects(landed.oid, blob.oid, who)
		if err != nil {
			return
		}
		writeObjects(l.g.GitDir, slices.Concat(s.trees, []looseObject{landed, blob}, notes)...)
	}()
}

// waitPrewrites waits until no prewrite is writing.
func (l *lander) waitPrewrites() {
	for _, p := range l.pre {
		<-p.done
	}
}

// dropPrewritten lets the objects prewrites created go: it waits for the
// writes and leaves what no ref took (a refusal, another tip, a note that
// moved) unreferenced, for git gc, as git itself does. A landing never
// deletes an object from the repository.
func (l *lander) dropPrewritten() {
	l.waitPrewrites()
}
