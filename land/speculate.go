package land

import (
	"context"
	"errors"
	"io"
	"path/filepath"
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
	l.wg.Add(1)
	if quietTree, quiet := l.quietTarget(tip, approved); quiet {
		// The target did not move since the work's base: the squash is the
		// approved tree, and the one diff of the tip's tree to it is both
		// the policy diff and the squash's measured patch-id.
		go func() {
			defer l.wg.Done()
			defer close(s.sqDone)
			defer close(s.chDone)
			var pid string
			s.changes, pid, s.chErr = l.changes(ctx, tip, approved, func(w io.Writer) (string, error) {
				return l.measure(ctx, tip, quietTree, w)
			})
			s.sq = squashed{tree: quietTree, pid: pid, err: s.chErr}
		}()
		return s
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer close(s.chDone)
		s.changes, _, s.chErr = l.changes(ctx, tip, approved, func(w io.Writer) (string, error) {
			d, err := l.differ()
			if err != nil {
				return "", err
			}
			return d.DiffFromMergeBase(ctx, tip, approved, w)
		})
	}()
	go func() {
		defer l.wg.Done()
		defer close(s.sqDone)
		s.sq = l.squashAndMeasure(ctx, tip, approved)
	}()
	return s
}

// mergeBase returns the merge base of tip and the approved commit; ""
// when they share no history. (The search for a killed landing needs it,
// and the message when narrativeBase cannot tell: the policy diff finds
// the base itself.)
func (l *lander) mergeBase(ctx context.Context, tip string) (string, error) {
	l.baseMu.Lock()
	defer l.baseMu.Unlock()
	if b, ok := l.bases[tip]; ok {
		return b, nil // asked again (the landed-check and the message): one git
	}
	base, err := l.g.Line(ctx, "merge-base", tip, l.approved.ID)
	if err != nil {
		var ge *git.GitError
		if !errors.As(err, &ge) || len(ge.Stderr) != 0 {
			return "", err
		}
		base = ""
	}
	if l.bases == nil {
		l.bases = map[string]string{}
	}
	l.bases[tip] = base
	return base, nil
}

// maxBaseWalk bounds the target's first-parent history narrativeBase
// reads in process looking for the work's base.
const maxBaseWalk = 64

// narrativeBase is mergeBase for the landed commit's message, read in
// process in the usual case: when the approved commit has one parent P
// and P is tip or on tip's first-parent history (within maxBaseWalk
// commits), P is the merge base. Every common ancestor of tip and the
// approved commit is then an ancestor of P (or P), except the approved
// commit itself, which cannot be an ancestor of tip here: the message is
// written only for a squash whose patch-id matched a reviewed, non-empty
// one, and the squash onto a tip that already contains the approved
// commit is the tip's own tree (an empty diff). Otherwise git answers
// (mergeBase). TestNarrativeMatchesGit compares both.
func (l *lander) narrativeBase(ctx context.Context, tip string) (string, error) {
	if len(l.approved.Parents) == 1 {
		p := l.approved.Parents[0]
		at := tip
		for range maxBaseWalk {
			if at == p {
				return p, nil
			}
			o, err := l.cat.Get(at + "^{commit}")
			if err != nil || o.ID == "" {
				break
			}
			c, err := git.ParseCommit(o.ID, o.Content)
			if err != nil || len(c.Parents) == 0 {
				break
			}
			at = c.Parents[0]
		}
	}
	return l.mergeBase(ctx, tip)
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
		if l.o == nil || l.o.DataRoot == "" {
			l.diff.d, l.diff.err = patch.NewTreeDiffer(l.g)
			return
		}
		// Kept across landings: making and removing a git dir of its own
		// took one to several milliseconds of file creations per landing.
		l.diff.d, l.diff.err = patch.NewTreeDifferAt(l.g, filepath.Join(l.o.DataRoot, "land", "neutral-git"))
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
