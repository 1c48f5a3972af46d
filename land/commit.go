package land

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/filelock"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
)

// NotesRef holds the landing receipts.
const NotesRef = "refs/notes/conductor"

// How long commit waits for a ref lock another git process holds: it
// retries after lockRetryStart, doubling, up to lockRetryMax (about 1.5 s in
// all), then fails retryably.
const (
	lockRetryStart = 50 * time.Millisecond
	lockRetryMax   = 800 * time.Millisecond
)

// Receipt is the JSON note attached to a landed commit on NotesRef.
// Version 2 records the gate as review reports it (sandbox.GateResult:
// status, exitCode, durationNs, outputTail); a version 1 note (ok,
// seconds, tail) still decodes into the same fields.
type Receipt struct {
	Version        int                  `json:"version"`
	Decision       string               `json:"decision"`
	Target         string               `json:"target"`
	WorkRef        string               `json:"workRef"`
	ReviewedCommit string               `json:"reviewedCommit"`
	PatchID        string               `json:"patchId"`
	Task           string               `json:"task,omitempty"`
	Run            string               `json:"run,omitempty"`
	Model          string               `json:"model,omitempty"`
	Tokens         Tokens               `json:"tokens"`
	Verdict        ReceiptVote          `json:"verdict"`
	Gate           []sandbox.GateResult `json:"gate"`
	Issue          int64                `json:"issue,omitempty"`
}

// Tokens are the run's token totals (nil: the model server did not say).
type Tokens struct {
	Prompt     *int64 `json:"prompt"`
	Completion *int64 `json:"completion"`
	Total      *int64 `json:"total"`
}

// ReceiptVote is the verdict the landing relied on.
type ReceiptVote struct {
	ID       int64  `json:"id"`
	Verdict  string `json:"verdict"`
	Reviewer string `json:"reviewer,omitempty"`
	Commit   string `json:"commit"`
	PatchID  string `json:"patchId"`
}

// provenance returns run id, task id and model alias: the store's run first,
// then the approved commit's trailers (written by review).
func (l *lander) provenance() (runID, task, model string) {
	_, ts := splitTrailers(l.approved.Message)
	runID = cmp.Or(l.d.RunID, l.v.RunID, l.run.ID, trailer(ts, "Run-Id"), "unknown")
	task = cmp.Or(l.run.TaskID, trailer(ts, "Task-Id"))
	model = cmp.Or(l.run.ModelAlias, trailer(ts, "Model"), "unknown")
	return
}

// message is the landed commit's message: the approved commit's message
// without its trailers, the landing said in prose (narrative), then the
// binding trailers for machines.
func (l *lander) message(pid, story string) string {
	body, _ := splitTrailers(l.approved.Message)
	body = strings.TrimRight(body, "\n")
	if strings.TrimSpace(body) == "" {
		body = "Land " + l.d.WorkRef
	}
	runID, task, model := l.provenance()
	var b strings.Builder
	b.WriteString(body)
	b.WriteString("\n\n")
	if story != "" {
		b.WriteString(story)
		b.WriteString("\n\n")
	}
	fmt.Fprintf(&b, "Decision-Id: %s\n", l.d.ID)
	fmt.Fprintf(&b, "Reviewed-Commit: %s\n", l.approved.ID)
	fmt.Fprintf(&b, "Patch-Id: %s\n", pid)
	fmt.Fprintf(&b, "Run-Id: %s\n", runID)
	if task != "" {
		fmt.Fprintf(&b, "Task-Id: %s\n", task)
	}
	fmt.Fprintf(&b, "Model: %s\n", model)
	return b.String()
}

// narrative says in words what the trailers bind: which candidate
// (patch-id) of which run, on which base, whether the target changed any
// reviewed path since that base, who approved it in which verdict, and
// that the gate ran again on the landed tree at the target. It is read by
// people (git log); audits read the trailers and the receipt note.
func (l *lander) narrative(ctx context.Context, tip string, out *Outcome) string {
	runID, task, model := l.provenance()
	var s []string
	who := "run " + runID
	if task != "" {
		who += " (task " + task + ", model " + model + ")"
	}
	s = append(s, fmt.Sprintf("Lands the candidate with patch-id %s from %s, reviewed as commit %s.", patch.Short(out.PatchID), who, patch.Short(l.approved.ID)))
	if base, err := l.narrativeBase(ctx, tip); err == nil && base != "" {
		var moved []string
		if base != tip {
			moved, err = l.reviewedPathsMoved(ctx, base, tip, out.Files)
		}
		switch {
		case base == tip:
			s = append(s, fmt.Sprintf("The work was made on %s at %s and the target has not moved since: the landed tree is the reviewed tree.", l.target, patch.Short(base)))
		case err != nil:
			s = append(s, fmt.Sprintf("The work was made on %s at %s; the target has moved to %s since.", l.target, patch.Short(base), patch.Short(tip)))
		case len(moved) == 0:
			s = append(s, fmt.Sprintf("The work was made on %s at %s; the target has moved to %s since, changing none of the reviewed paths.", l.target, patch.Short(base), patch.Short(tip)))
		default:
			s = append(s, fmt.Sprintf("The work was made on %s at %s; the target has moved to %s since and changed %d of the reviewed paths (%s): the squash onto it was measured again and its patch-id still matches the review.",
				l.target, patch.Short(base), patch.Short(tip), len(moved), strings.Join(moved, ", ")))
		}
	}
	reviewer := cmp.Or(l.v.Reviewer, "an unnamed reviewer")
	s = append(s, fmt.Sprintf("%s approved commit %s in verdict %d (%s); %s chose merge in decision %s.",
		reviewer, patch.Short(l.v.Commit), l.v.ID, l.v.Verdict, cmp.Or(l.d.ResolvedBy, "an unnamed operator"), l.d.ID))
	if len(out.Gate) == 0 {
		s = append(s, "The landing policy names no gate.")
	} else {
		names := make([]string, len(out.Gate))
		for i, g := range out.Gate {
			names[i] = cmp.Or(g.Name, strings.Join(g.Argv, " "))
		}
		s = append(s, fmt.Sprintf("The gate (%s) was run again on the landed tree at the target and passed.", strings.Join(names, ", ")))
	}
	return wrap(strings.Join(s, " "), 72)
}

// reviewedPathsMoved lists the reviewed paths the target changed between
// base and tip (at most a handful named; the count says the rest): the
// paths whose entry — a file, link or gitlink with its mode and id; a
// folder is no entry — differs between the two trees, which is what `git
// diff-tree -r --no-renames base tip` lists among them. The trees are
// read in process (TestNarrativeMatchesGit compares the answer with
// diff-tree's); git answers when one cannot be read.
func (l *lander) reviewedPathsMoved(ctx context.Context, base, tip string, reviewed []string) ([]string, error) {
	touched, ok := l.pathsChanged(base, tip, reviewed)
	if !ok {
		var err error
		if touched, err = l.pathsChangedByGit(ctx, base, tip); err != nil {
			return nil, err
		}
	}
	var moved []string
	for _, p := range reviewed {
		if touched[p] {
			moved = append(moved, p)
		}
	}
	if len(moved) > 5 {
		moved = append(moved[:5], fmt.Sprintf("and %d more", len(moved)-5))
	}
	return moved, nil
}

// pathsChanged says which of paths have another entry (or none) in tip's
// tree than in base's, reading the trees in process; false when a tree
// cannot be read or a path is not one a tree can hold.
func (l *lander) pathsChanged(base, tip string, paths []string) (map[string]bool, bool) {
	objs, err := l.lookup(base+"^{tree}", tip+"^{tree}")
	if err != nil || objs[0].ID == "" || objs[1].ID == "" {
		return nil, false
	}
	touched := map[string]bool{}
	if objs[0].ID == objs[1].ID {
		return touched, true
	}
	atBase, atTip := l.leafAt(objs[0].ID), l.leafAt(objs[1].ID)
	for _, p := range paths {
		b, okb := atBase(p)
		t, okt := atTip(p)
		if !okb || !okt {
			return nil, false
		}
		touched[p] = b != t
	}
	return touched, true
}

// leafAt returns the lookup of a path's entry in the tree root: its mode
// and id, zero when the path is absent or a folder there (as `diff-tree
// -r` sees it); false when a tree on the way cannot be read or the path
// has an empty, "." or ".." part. Each folder is read once.
func (l *lander) leafAt(root string) func(string) (git.TreeEntry, bool) {
	dirs := map[string][]git.TreeEntry{}
	var entries func(dir string) ([]git.TreeEntry, bool)
	entries = func(dir string) ([]git.TreeEntry, bool) {
		if es, ok := dirs[dir]; ok {
			return es, true
		}
		id := root
		if dir != "" {
			parent, name := "", dir
			if i := strings.LastIndexByte(dir, '/'); i >= 0 {
				parent, name = dir[:i], dir[i+1:]
			}
			pes, ok := entries(parent)
			if !ok {
				return nil, false
			}
			id = ""
			for _, e := range pes {
				if e.Name == name && e.Mode == git.ModeTree {
					id = e.Hash.String()
				}
			}
		}
		var es []git.TreeEntry
		if id != "" {
			var ok bool
			if es, ok = l.treeEntries(id); !ok {
				return nil, false
			}
		}
		dirs[dir] = es
		return es, true
	}
	return func(p string) (git.TreeEntry, bool) {
		if slices.ContainsFunc(strings.Split(p, "/"), func(c string) bool { return c == "" || c == "." || c == ".." }) {
			return git.TreeEntry{}, false
		}
		dir, name := "", p
		if i := strings.LastIndexByte(p, '/'); i >= 0 {
			dir, name = p[:i], p[i+1:]
		}
		es, ok := entries(dir)
		if !ok {
			return git.TreeEntry{}, false
		}
		for _, e := range es {
			if e.Name == name && e.Mode != git.ModeTree {
				return git.TreeEntry{Mode: e.Mode, Hash: e.Hash}, true
			}
		}
		return git.TreeEntry{}, true
	}
}

// pathsChangedByGit is pathsChanged asked of `git diff-tree`.
func (l *lander) pathsChangedByGit(ctx context.Context, base, tip string) (map[string]bool, error) {
	out, err := l.g.Run(ctx, "diff-tree", "-r", "--name-only", "-z", "--no-renames", base, tip)
	if err != nil {
		return nil, err
	}
	touched := map[string]bool{}
	for _, p := range strings.Split(string(out), "\x00") {
		if p != "" {
			touched[p] = true
		}
	}
	return touched, nil
}

// wrap breaks s into lines of at most width columns at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(s) {
		switch {
		case i == 0:
		case n+1+len(w) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

func (l *lander) receipt(pid string, gate []sandbox.GateResult) Receipt {
	runID, task, model := l.provenance()
	return Receipt{
		Version:        2,
		Decision:       l.d.ID,
		Target:         l.target,
		WorkRef:        l.d.WorkRef,
		ReviewedCommit: l.approved.ID,
		PatchID:        pid,
		Task:           task,
		Run:            runID,
		Model:          model,
		Tokens:         Tokens{Prompt: l.run.PromptTokens, Completion: l.run.CompletionTokens, Total: l.run.TotalTokens},
		Verdict: ReceiptVote{ID: l.v.ID, Verdict: l.v.Verdict, Reviewer: l.v.Reviewer,
			Commit: l.v.Commit, PatchID: l.v.PatchID},
		Gate:  gate,
		Issue: l.d.Issue,
	}
}

// commit creates the landed commit and its note and moves the target and the
// notes ref in one atomic ref transaction, the target by compare-and-swap
// from tip. It returns "" (no error) when the target moved first.
func (l *lander) commit(ctx context.Context, tip, tree, msg string, wt *targetWT, out *Outcome) (string, error) {
	o := l.o
	landed, blob, committer, err := l.landingObjects(tip, tree, msg, out.PatchID, out.Gate)
	if err != nil {
		return "", err
	}
	moved, err := l.moveRefs(ctx, tip, landed, blob, committer)
	if err != nil || !moved {
		return "", err
	}
	o.Fault("update-ref")
	// Landed: no diff is left to run, its git dir goes while the store
	// records the landing.
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.closeDiffer()
	}()
	out.Commit = landed.ID
	out.Status = StatusLanded
	if wt != nil {
		if err := wt.sync(ctx, tip, landed.ID); err != nil {
			out.Warning = fmt.Sprintf("landed, but the worktree %s (which has %s checked out) could not follow: %v; run `git -C %s read-tree -m -u %s %s`",
				wt.path, l.target, err, wt.path, patch.Short(tip), patch.Short(landed.ID))
		}
	}
	if err := l.record(ctx, landed.ID, out.PatchID, gateSummary(out.Gate)); err != nil {
		return "", err
	}
	o.Fault("record")
	return StatusLanded, nil
}

// moveRefs writes the landed commit, its note blob and the notes tree and
// commit, checks the verdict and the work ref once more, and moves the
// target (compare-and-swap from tip) and the notes ref in one update-ref
// transaction that also verifies the work ref. It waits briefly for a ref
// lock another git holds, rebuilds the note on a notes ref someone else
// moved, and returns false (no error) when the target moved.
func (l *lander) moveRefs(ctx context.Context, tip string, landed, blob git.Loose, committer git.Signature) (bool, error) {
	o := l.o
	// The notes ref is shared by every target of the repository.
	nlock, err := filelock.Wait(ctx, filepath.Join(o.DataRoot, "land", "locks", lockKey(l.g.GitDir, NotesRef)+".lock"))
	if err != nil {
		return false, err
	}
	defer filelock.Unlock(nlock)
	lockWait := lockRetryStart
	for try := 0; ; try++ {
		notesOld, notes, err := l.noteObjects(landed.ID, blob.ID, committer)
		if err != nil {
			return false, fmt.Errorf("receipt note: %w", err)
		}
		// Every object is in the store before a ref points at it.
		if err := git.WriteLoose(l.g.GitDir, append([]git.Loose{landed, blob}, notes...)...); err != nil {
			return false, err
		}
		if try == 0 {
			o.Fault("commit")
		}
		// The gate window: the verdict and the work ref were read before
		// the gate. The verdict is read again now, the work ref is verified
		// inside the transaction that moves the target.
		if err := l.recheck(ctx, false); err != nil {
			return false, err
		}
		tx := fmt.Sprintf("verify %s %s\nupdate %s %s %s\nupdate %s %s %s\n", l.workRef, l.workAt,
			l.ref, landed.ID, tip, NotesRef, notes[len(notes)-1].ID, cmp.Or(notesOld, git.ZeroID))
		upd := l.update
		if l.update = nil; upd == nil {
			upd = l.startUpdate(ctx)
		}
		_, err = upd.Run(tx)
		if err == nil {
			return true, nil
		}
		if lockFile, held := git.HeldLock(err); held {
			// Another git process holds a ref's lock: wait a little (it
			// is most likely brief), then give up, retryably.
			if lockWait <= lockRetryMax {
				select {
				case <-ctx.Done():
					return false, ctx.Err()
				case <-time.After(lockWait):
				}
				lockWait *= 2
				continue
			}
			return false, fmt.Errorf("move %s: another git process holds %s (nothing was changed): land again once it is done, or remove the file if no git process is running", l.target, lockFile)
		}
		if rerr := l.recheck(ctx, true); rerr != nil {
			return false, rerr // the work ref moved: the verify failed
		}
		objs, lerr := l.lookup(l.ref, NotesRef)
		if lerr != nil {
			return false, fmt.Errorf("move %s: %w", l.target, err)
		}
		if objs[0].ID != tip {
			return false, nil // the target moved: the caller retries once
		}
		if objs[1].ID != notesOld && try < 3 {
			continue // someone else wrote a note (outside conductor's lock): build on it
		}
		return false, fmt.Errorf("move %s: %w", l.target, err)
	}
}

// startUpdate starts the `git update-ref --stdin` that moves the target and
// the notes ref in one transaction once it is given their updates; their
// reflog entries name the landing's committer.
func (l *lander) startUpdate(ctx context.Context) *git.Started {
	g := l.g.WithEnv("GIT_COMMITTER_NAME="+l.o.Committer.Name, "GIT_COMMITTER_EMAIL="+l.o.Committer.Email)
	g.Timeout = git.LongTimeout // it waits for the gate
	return g.Start(ctx, "update-ref", "-m", "conductor land "+l.d.ID, "--stdin")
}

// landingObjects builds the landed commit (msg on tree, parent tip, the
// approved commit's author, the landing's committer) and its receipt
// note's blob, and returns them with the committer.
func (l *lander) landingObjects(tip, tree, msg, pid string, gate []sandbox.GateResult) (landed, blob git.Loose, committer git.Signature, err error) {
	o := l.o
	committer = git.NewSignature(o.Committer.Name, o.Committer.Email, l.now)
	if err := git.CheckSignature(committer); err != nil {
		return landed, blob, committer, fmt.Errorf("committer: %w", err)
	}
	if err := git.CheckSignature(l.approved.Author); err != nil {
		return landed, blob, committer, fmt.Errorf("author of %s: %w", patch.Short(l.approved.ID), err)
	}
	note, err := json.MarshalIndent(l.receipt(pid, gate), "", "  ")
	if err != nil {
		return landed, blob, committer, err
	}
	raw, err := git.EncodeCommit(git.Commit{Tree: tree, Parents: []string{tip}, Author: l.approved.Author, Committer: committer, Message: msg})
	if err != nil {
		return landed, blob, committer, err
	}
	return git.NewLoose("commit", raw), git.NewLoose("blob", append(note, '\n')), committer, nil
}

// record writes the landing row; an existing row for the same commit is fine.
func (l *lander) record(ctx context.Context, commit, pid, gate string) error {
	err := l.o.Store.PutLanding(ctx, bus.Landing{
		DecisionID: l.d.ID, Commit: commit, Target: l.target, PatchID: pid, Gate: gate, LandedAt: l.o.Now(),
	})
	if errors.Is(err, bus.ErrConflict) {
		prev, gerr := l.o.Store.GetLanding(ctx, l.d.ID)
		if gerr == nil && prev.Commit == commit {
			return nil
		}
		return fmt.Errorf("record landing: %s already landed as %s: %w", l.d.ID, prev.Commit, err)
	}
	if err != nil {
		return fmt.Errorf("record landing (the commit %s is on %s): %w", commit, l.target, err)
	}
	return nil
}

func gateSummary(rs []sandbox.GateResult) string {
	if len(rs) == 0 {
		return "no gate commands"
	}
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		st := "ok"
		if !r.OK() {
			st = "failed"
		}
		parts = append(parts, fmt.Sprintf("%s %s %.1fs", r.Name, st, r.Duration.Seconds()))
	}
	return "passed: " + strings.Join(parts, "; ")
}

// noteObjects builds the notes tree and commit that add the note blob to
// commit on top of the notes ref's current value, and returns that value
// ("" when absent) and the new objects, the notes commit last. who is
// their author and committer.
func (l *lander) noteObjects(commit, blob string, who git.Signature) (string, []git.Loose, error) {
	var cur git.Object
	if ids, err := git.ReadRefs(l.g.GitDir, NotesRef); err != nil || ids[0] != "" {
		name := NotesRef + "^{commit}" // broken: git says what it is
		if err == nil {
			name = ids[0] + "^{commit}"
		}
		if cur, err = l.cat.Get(name); err != nil {
			return "", nil, err
		}
	}
	var entries []git.TreeEntry
	if cur.ID != "" {
		c, err := git.ParseCommit(cur.ID, cur.Content)
		if err != nil {
			return "", nil, err
		}
		var ok bool
		if entries, ok = l.treeEntries(c.Tree); !ok {
			return "", nil, fmt.Errorf("notes tree %s of %s unreadable", patch.Short(c.Tree), NotesRef)
		}
	}
	objs, err := l.addNote(entries, commit, blob)
	if err != nil {
		return "", nil, err
	}
	nc := git.Commit{Tree: objs[len(objs)-1].ID, Author: who, Committer: who, Message: "Notes added by 'conductor land'\n"}
	if cur.ID != "" {
		nc.Parents = []string{cur.ID}
	}
	raw, err := git.EncodeCommit(nc)
	if err != nil {
		return "", nil, err
	}
	return cur.ID, append(objs, git.NewLoose("commit", raw)), nil
}

// maxFlatNotes is how many notes the notes tree holds at its top level
// before new ones go into fan-out folders.
const maxFlatNotes = 256

// addNote returns the tree objects of the notes tree whose top level is
// root with the note blob for commit added (or replaced), the new top
// level last. Notes are named after the commit, at the top level while
// there are few; past maxFlatNotes a new one goes into the fan-out folder
// of its first two hex digits ("ab/cdef…", git's own layout, which `git
// notes` reads), so a landing rewrites two small trees however many notes
// there are, not one tree of them all.
func (l *lander) addNote(root []git.TreeEntry, commit, blob string) ([]git.Loose, error) {
	dir, rest := commit[:2], commit[2:]
	flat, d := 0, -1
	for i, e := range root {
		switch {
		case e.Name == commit:
			flat = -1 // replaced where it is
		case e.Name == dir && e.Mode == git.ModeTree:
			d = i
		case len(e.Name) == len(commit) && flat >= 0:
			flat++
		}
	}
	var objs []git.Loose
	note := git.TreeEntry{Mode: git.ModeFile, Name: commit, Hash: plumbing.NewHash(blob)}
	if flat >= maxFlatNotes || (d >= 0 && flat >= 0) {
		var sub []git.TreeEntry
		if d >= 0 {
			var ok bool
			if sub, ok = l.treeEntries(root[d].Hash.String()); !ok {
				return nil, fmt.Errorf("notes tree: fan-out folder %s of %s unreadable", dir, NotesRef)
			}
			root = slices.Delete(slices.Clone(root), d, d+1)
		}
		sub = slices.DeleteFunc(sub, func(e git.TreeEntry) bool { return e.Name == rest })
		raw, err := git.EncodeTree(append(sub, git.TreeEntry{Mode: git.ModeFile, Name: rest, Hash: plumbing.NewHash(blob)}))
		if err != nil {
			return nil, err
		}
		t := git.NewLoose("tree", raw)
		objs = append(objs, t)
		note = git.TreeEntry{Mode: git.ModeTree, Name: dir, Hash: plumbing.NewHash(t.ID)}
	}
	root = slices.DeleteFunc(slices.Clone(root), func(e git.TreeEntry) bool { return e.Name == note.Name })
	raw, err := git.EncodeTree(append(root, note))
	if err != nil {
		return nil, err
	}
	return append(objs, git.NewLoose("tree", raw)), nil
}

// findLanded looks for a commit carrying this decision's Decision-Id trailer
// on the target's history since the merge base with the approved commit (a
// landing of it can only be there).
func (l *lander) findLanded(ctx context.Context, tip string) (git.Commit, bool, error) {
	if tip == "" {
		return git.Commit{}, false, nil
	}
	rng := tip
	base, err := l.mergeBase(ctx, tip)
	if err != nil {
		return git.Commit{}, false, err
	}
	if base != "" {
		rng = base + ".." + tip
	}
	// A landing is always a first-parent commit of the target (its parent
	// is the tip it was compared and swapped with).
	b, err := l.g.Run(ctx, "log", "--first-parent", "--no-show-signature", "--format=%x01%H%x00%B", "-F", "--grep=Decision-Id: "+l.d.ID, rng)
	if err != nil {
		return git.Commit{}, false, err
	}
	for _, e := range bytes.Split(b, []byte{1}) {
		oid, msg, ok := bytes.Cut(e, []byte{0})
		if !ok {
			continue
		}
		_, ts := splitTrailers(string(msg))
		if trailer(ts, "Decision-Id") == l.d.ID {
			return git.Commit{ID: string(oid), Message: string(msg)}, true, nil
		}
	}
	return git.Commit{}, false, nil
}

// recover finishes a landing whose commit is on the target but whose store
// row is missing (a crash between the ref move and the record). Anyone can
// write a Decision-Id trailer: the commit is taken as this decision's
// landing only when its receipt verifies (verifyLanded), else the landing
// is refused (landed-receipt-invalid).
func (l *lander) recover(ctx context.Context, c git.Commit) (Outcome, error) {
	if why, err := l.verifyLanded(ctx, c); err != nil {
		return Outcome{Target: l.target}, err
	} else if why != "" {
		return Outcome{Target: l.target}, refusal.New("landed-receipt-invalid",
			fmt.Sprintf("commit %s on %s carries Decision-Id: %s but is not its landing: %s", patch.Short(c.ID), l.target, l.d.ID, why),
			"find out who made that commit (it was not landed by conductor as recorded: forged trailer, rewritten history or edited note); "+
				"`conductor audit "+patch.Short(c.ID)+"` lists what does not match. Nothing was committed or recorded")
	}
	_, ts := splitTrailers(c.Message)
	out := Outcome{Decision: l.d.ID, Status: StatusAlreadyLanded, Commit: c.ID, Target: l.target,
		PatchID: trailer(ts, "Patch-Id"), ReviewedCommit: trailer(ts, "Reviewed-Commit")}
	if l.o.DryRun {
		out.Warning = "the landing is on the target but not in the store; a real run records it"
		return out, nil
	}
	if err := l.record(ctx, c.ID, out.PatchID, "passed (recorded from the target's history)"); err != nil {
		return out, err
	}
	return out, nil
}

// recheck reads the latest verdict (unless refOnly) and the work ref again
// and refuses when either changed since the landing checked them: a
// request-changes verdict or a push during the gate is never ignored.
func (l *lander) recheck(ctx context.Context, refOnly bool) error {
	if !refOnly {
		v, err := l.latestVerdict(ctx)
		if err != nil && !errors.Is(err, bus.ErrNotFound) {
			return fmt.Errorf("read verdict again: %w", err)
		}
		if err != nil || v.ID != l.v.ID || v.Verdict != l.v.Verdict || v.Commit != l.v.Commit || v.PatchID != l.v.PatchID {
			now := "none"
			if err == nil {
				now = fmt.Sprintf("%d (%s of %s)", v.ID, v.Verdict, orNoneID(v.Commit))
			}
			return refusal.New("verdict-stale",
				fmt.Sprintf("the verdict on %s changed while landing: it was %d (%s of %s), it is now %s",
					l.d.WorkRef, l.v.ID, l.v.Verdict, orNoneID(l.v.Commit), now),
				"nothing was committed: address the new verdict, review and approve again, then land")
		}
	}
	at, want := "", l.workAt // the ref's own value, as first read
	if ids, err := git.ReadRefs(l.g.GitDir, l.workRef); err == nil {
		at = ids[0]
	} else if objs, lerr := l.lookup(l.workRef + "^{commit}"); lerr == nil {
		at, want = objs[0].ID, l.approved.ID // git peels it
	} else {
		return lerr
	}
	if at != want || at == "" {
		return refusal.New("work-ref-moved",
			fmt.Sprintf("work ref %s moved while landing: it is at %s, the approved commit is %s", l.d.WorkRef, orNoneID(at), patch.Short(l.approved.ID)),
			"nothing was committed: review the new commit and raise a new decision; the approval covers only what was reviewed")
	}
	return nil
}

// verifyLanded checks that c is this decision's landing, as `conductor
// audit` would and more: one parent; its tree is the squash of the approved
// commit onto that parent; the squash's patch-id is the reviewed one; the
// trailers name this decision, the approved commit and that patch-id; the
// receipt note on NotesRef agrees (audit's checks). It returns why not
// ("" when it is).
func (l *lander) verifyLanded(ctx context.Context, c git.Commit) (string, error) {
	objs, err := l.lookup(c.ID + "^{commit}")
	if err != nil {
		return "", err
	}
	full, err := git.ParseCommit(objs[0].ID, objs[0].Content)
	if err != nil {
		return "", err
	}
	if len(full.Parents) != 1 {
		return fmt.Sprintf("it has %d parents, a landing has one", len(full.Parents)), nil
	}
	reviewed := l.v.PatchID
	if l.v.ID == 0 || !sameCommit(l.v.Commit, l.d.Commit, l.approved.ID) {
		v, err := l.latestVerdict(ctx)
		if err != nil && !errors.Is(err, bus.ErrNotFound) {
			return "", fmt.Errorf("read verdict: %w", err)
		}
		if err != nil || !sameCommit(v.Commit, l.d.Commit, l.approved.ID) || v.PatchID == "" {
			return "no verdict in the store binds the approved commit to a patch-id", nil
		}
		reviewed = v.PatchID
	}
	_, ts := splitTrailers(full.Message)
	for _, want := range []struct{ key, val string }{
		{"Decision-Id", l.d.ID}, {"Reviewed-Commit", l.approved.ID}, {"Patch-Id", reviewed},
	} {
		if got := trailer(ts, want.key); got != want.val {
			return fmt.Sprintf("trailer %s is %q, want %q", want.key, got, want.val), nil
		}
	}
	sq := l.at(full.Parents[0], l.approved.ID).squash()
	if sq.err != nil {
		return fmt.Sprintf("the approved commit does not squash onto its parent %s (%v)", patch.Short(full.Parents[0]), sq.err), nil
	}
	if sq.tree != full.Tree {
		return fmt.Sprintf("its tree %s is not the squash of %s onto its parent (%s)", patch.Short(full.Tree), patch.Short(l.approved.ID), patch.Short(sq.tree)), nil
	}
	if rf := checkPatchID(full.Parents[0], sq, reviewed); rf != nil {
		return rf.Reason, nil
	}
	rep, err := Audit(ctx, AuditOptions{Git: l.g, Commit: full.ID})
	if err != nil {
		return "", err
	}
	if !rep.OK {
		return "its receipt does not verify: " + strings.ReplaceAll(rep.Refusal().Detail, "\n", "; "), nil
	}
	raw, err := l.g.Run(ctx, "notes", "--ref="+NotesRef, "show", full.ID)
	if err != nil {
		return "no receipt note", nil
	}
	var rc Receipt
	if err := json.Unmarshal(raw, &rc); err != nil {
		return "its receipt note is not a conductor receipt", nil
	}
	if rc.Decision != l.d.ID || rc.ReviewedCommit != l.approved.ID || rc.PatchID != reviewed || rc.Target != l.target {
		return fmt.Sprintf("its receipt note names decision %q, commit %s, patch-id %s, target %q", rc.Decision, orNoneID(rc.ReviewedCommit), orNone(rc.PatchID), rc.Target), nil
	}
	return "", nil
}
