package land

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/patch"
)

// NotesRef holds the landing receipts.
const NotesRef = "refs/notes/conductor"

const zeroOID = "0000000000000000000000000000000000000000"

// Receipt is the JSON note attached to a landed commit on NotesRef.
type Receipt struct {
	Version        int          `json:"version"`
	Decision       string       `json:"decision"`
	Target         string       `json:"target"`
	WorkRef        string       `json:"workRef"`
	ReviewedCommit string       `json:"reviewedCommit"`
	PatchID        string       `json:"patchId"`
	Task           string       `json:"task,omitempty"`
	Run            string       `json:"run,omitempty"`
	Model          string       `json:"model,omitempty"`
	Tokens         Tokens       `json:"tokens"`
	Verdict        ReceiptVote  `json:"verdict"`
	Gate           []GateResult `json:"gate"`
	Issue          int64        `json:"issue,omitempty"`
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
	runID = firstNonEmpty(l.d.RunID, l.v.RunID, l.run.ID, trailer(ts, "Run-Id"), "unknown")
	task = firstNonEmpty(l.run.TaskID, trailer(ts, "Task-Id"))
	model = firstNonEmpty(l.run.ModelAlias, trailer(ts, "Model"), "unknown")
	return
}

// message is the landed commit's message: the approved commit's message
// without its trailers, then the binding trailers.
func (l *lander) message(pid string) string {
	body, _ := splitTrailers(l.approved.Message)
	body = strings.TrimRight(body, "\n")
	if strings.TrimSpace(body) == "" {
		body = "Land " + l.d.WorkRef
	}
	runID, task, model := l.provenance()
	var b strings.Builder
	b.WriteString(body)
	b.WriteString("\n\n")
	fmt.Fprintf(&b, "Decision-Id: %s\n", l.d.ID)
	fmt.Fprintf(&b, "Reviewed-Commit: %s\n", l.approved.OID)
	fmt.Fprintf(&b, "Patch-Id: %s\n", pid)
	fmt.Fprintf(&b, "Run-Id: %s\n", runID)
	if task != "" {
		fmt.Fprintf(&b, "Task-Id: %s\n", task)
	}
	fmt.Fprintf(&b, "Model: %s\n", model)
	return b.String()
}

func (l *lander) receipt(pid string, gate []GateResult) Receipt {
	runID, task, model := l.provenance()
	return Receipt{
		Version:        1,
		Decision:       l.d.ID,
		Target:         l.target,
		WorkRef:        l.d.WorkRef,
		ReviewedCommit: l.approved.OID,
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
	now := o.Now()
	committer := []string{"GIT_COMMITTER_NAME=" + o.Committer.Name, "GIT_COMMITTER_EMAIL=" + o.Committer.Email,
		fmt.Sprintf("GIT_COMMITTER_DATE=@%d %s", now.Unix(), now.Format("-0700"))}
	note, err := json.MarshalIndent(l.receipt(out.PatchID, out.Gate), "", "  ")
	if err != nil {
		return "", err
	}
	// The notes ref is shared by every target of the repository.
	nlock, err := acquire(ctx, filepath.Join(o.DataRoot, "land", "locks", lockKey(l.g.GitDir, NotesRef)+".lock"))
	if err != nil {
		return "", err
	}
	defer nlock.release()
	ng := l.g.WithEnv(committer...).WithEnv("GIT_AUTHOR_NAME="+o.Committer.Name, "GIT_AUTHOR_EMAIL="+o.Committer.Email,
		"GIT_AUTHOR_DATE="+strings.TrimPrefix(committer[2], "GIT_COMMITTER_DATE="))
	// The commit and the note's objects are written side by side.
	type made struct {
		commit string
		err    error
	}
	mc := make(chan made, 1)
	go func() {
		cg := l.g.WithEnv(l.approved.Author.env("GIT_AUTHOR")...).WithEnv(committer...)
		b, err := cg.RunInput(ctx, strings.NewReader(msg), "commit-tree", tree, "-p", tip)
		mc <- made{strings.TrimSpace(string(b)), err}
	}()
	np, nerr := l.prepareNote(ctx, ng, append(note, '\n'))
	m := <-mc
	if m.err != nil {
		return "", m.err
	}
	if nerr != nil {
		return "", fmt.Errorf("receipt note: %w", nerr)
	}
	newCommit := m.commit
	o.Fault("commit")
	for try := 0; ; try++ {
		notesOld, notesNew, err := np.commit(ctx, ng, newCommit)
		if err != nil {
			return "", fmt.Errorf("receipt note: %w", err)
		}
		tx := fmt.Sprintf("update %s %s %s\nupdate %s %s %s\n", l.ref, newCommit, tip, NotesRef, notesNew, firstNonEmpty(notesOld, zeroOID))
		_, err = l.g.RunInput(ctx, strings.NewReader(tx), "update-ref", "-m", "conductor land "+l.d.ID, "--stdin")
		if err == nil {
			break
		}
		objs, lerr := lookup(ctx, l.g, l.ref, NotesRef)
		if lerr != nil {
			return "", fmt.Errorf("move %s: %w", l.target, err)
		}
		if objs[0].OID != tip {
			return "", nil // the target moved: the caller retries once
		}
		if objs[1].OID != notesOld && try < 3 {
			// Someone else wrote a note (outside conductor's lock): rebuild
			// the notes commit on top of theirs.
			if np, err = l.prepareNote(ctx, ng, append(note, '\n')); err != nil {
				return "", fmt.Errorf("receipt note: %w", err)
			}
			continue
		}
		return "", fmt.Errorf("move %s: %w", l.target, err)
	}
	nlock.release()
	o.Fault("update-ref")
	out.Commit = newCommit
	out.Status = StatusLanded
	if wt != nil {
		if err := wt.sync(ctx, tip, newCommit); err != nil {
			out.Warning = fmt.Sprintf("landed, but the worktree %s (which has %s checked out) could not follow: %v; run `git -C %s read-tree -m -u %s %s`",
				wt.path, l.target, err, wt.path, short(tip), short(newCommit))
		}
	}
	if err := l.record(ctx, newCommit, out.PatchID, gateSummary(out.Gate)); err != nil {
		return "", err
	}
	o.Fault("record")
	return StatusLanded, nil
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

func gateSummary(rs []GateResult) string {
	if len(rs) == 0 {
		return "no gate commands"
	}
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		st := "ok"
		if !r.OK {
			st = "failed"
		}
		parts = append(parts, fmt.Sprintf("%s %s %.1fs", r.Name, st, r.Seconds))
	}
	return "passed: " + strings.Join(parts, "; ")
}

// notePrep is a receipt note ready to be committed onto the notes ref.
type notePrep struct {
	old     string // the notes ref's value ("" when absent)
	blob    string
	listing []byte // ls-tree -z of the notes tree
}

// prepareNote writes the note's blob and reads the current notes tree.
func (l *lander) prepareNote(ctx context.Context, g patch.Git, note []byte) (notePrep, error) {
	var np notePrep
	objs, err := lookup(ctx, l.g, NotesRef)
	if err != nil {
		return np, err
	}
	np.old = objs[0].OID
	blob, err := g.RunInput(ctx, bytes.NewReader(note), "hash-object", "-w", "--stdin")
	if err != nil {
		return np, err
	}
	np.blob = strings.TrimSpace(string(blob))
	if np.old != "" {
		if np.listing, err = g.Run(ctx, "ls-tree", "-z", np.old); err != nil {
			return np, err
		}
	}
	return np, nil
}

// commit builds (without moving any ref) the notes commit that adds the
// note to commit on top of the notes ref's current value and returns that
// value and the new notes commit.
func (np notePrep) commit(ctx context.Context, g patch.Git, commit string) (string, string, error) {
	var in bytes.Buffer
	for _, e := range bytes.Split(np.listing, []byte{0}) {
		if len(e) == 0 {
			continue
		}
		if i := bytes.IndexByte(e, '\t'); i >= 0 && string(e[i+1:]) == commit {
			continue
		}
		in.Write(e)
		in.WriteByte(0)
	}
	fmt.Fprintf(&in, "100644 blob %s\t%s\x00", np.blob, commit)
	tree, err := g.RunInput(ctx, &in, "mktree", "-z")
	if err != nil {
		return "", "", err
	}
	args := []string{"commit-tree", strings.TrimSpace(string(tree)), "-m", "Notes added by 'conductor land'"}
	if np.old != "" {
		args = append(args, "-p", np.old)
	}
	nc, err := g.Line(ctx, args...)
	if err != nil {
		return "", "", err
	}
	return np.old, nc, nil
}

// findLanded looks for a commit carrying this decision's Decision-Id trailer
// on the target's history since the merge base with the approved commit (a
// landing of it can only be there).
func (l *lander) findLanded(ctx context.Context, tip string) (commit, bool, error) {
	if tip == "" {
		return commit{}, false, nil
	}
	rng := tip
	base, err := l.mergeBase(ctx, tip)
	if err != nil {
		return commit{}, false, err
	}
	if base != "" {
		rng = base + ".." + tip
	}
	b, err := l.g.Run(ctx, "log", "--no-show-signature", "--format=%x01%H%x00%B", "-F", "--grep=Decision-Id: "+l.d.ID, rng)
	if err != nil {
		return commit{}, false, err
	}
	for _, e := range bytes.Split(b, []byte{1}) {
		oid, msg, ok := bytes.Cut(e, []byte{0})
		if !ok {
			continue
		}
		_, ts := splitTrailers(string(msg))
		if trailer(ts, "Decision-Id") == l.d.ID {
			return commit{OID: string(oid), Message: string(msg)}, true, nil
		}
	}
	return commit{}, false, nil
}

// recover finishes a landing whose commit is on the target but whose store
// row is missing (a crash between the ref move and the record).
func (l *lander) recover(ctx context.Context, c commit) (Outcome, error) {
	_, ts := splitTrailers(c.Message)
	out := Outcome{Decision: l.d.ID, Status: StatusAlreadyLanded, Commit: c.OID, Target: l.target,
		PatchID: trailer(ts, "Patch-Id"), ReviewedCommit: trailer(ts, "Reviewed-Commit")}
	if l.o.DryRun {
		out.Warning = "the landing is on the target but not in the store; a real run records it"
		return out, nil
	}
	if err := l.record(ctx, c.OID, out.PatchID, "passed (recorded from the target's history)"); err != nil {
		return out, err
	}
	return out, nil
}
