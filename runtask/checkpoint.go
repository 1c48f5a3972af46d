package runtask

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/runrec"
	pgit "github.com/conductor-dev/conductor/patch/git"
)

// checkpoint writes the run's resumable state to the store: the bounded tool
// history, the files changed (path + content hash, never bodies), the
// worktree. Failures are warnings: the session state on disk still holds
// every step.
func (r *runner) checkpoint(ctx context.Context) {
	r.checkpointBehind(ctx)
	r.settleCheckpoint()
}

// checkpointBehind starts the same write and returns at once: the next
// model request goes out while the store commits. The loop's next
// checkpoint and the finish settle it first, so checkpoints reach the
// store in order and all of them before the run's end.
func (r *runner) checkpointBehind(ctx context.Context) {
	r.settleCheckpoint()
	if put := r.checkpointPut(ctx); put != nil {
		r.checkpointing.start(put)
	}
}

// settleCheckpoint waits for the checkpoint checkpointBehind started and
// reports its outcome.
func (r *runner) settleCheckpoint() {
	if out, ok := r.checkpointing.settle(); ok {
		r.checkpointDone(out)
	}
}

// checkpointPut snapshots the checkpoint row and returns the store writes
// that record it (the row, then its event); nil: nothing to write. The
// writes touch only the store, so they may run beside the loop.
func (r *runner) checkpointPut(ctx context.Context) func() checkpointOutcome {
	if r.opts.Store == nil {
		return nil
	}
	st := r.state
	hist, err := json.Marshal(st.History)
	if err != nil {
		r.warnf("checkpoint: %v", err)
		return nil
	}
	cp := bus.Checkpoint{RunID: st.RunID, Step: st.Step, History: hist, Files: r.touched.list(),
		Worktree: st.Worktree, Branch: r.workBranch(ctx), Workspace: r.task.Workspace, HarnessAlias: r.harness(), CreatedAt: r.now()}
	store, taskID := r.opts.Store, r.task.ID
	ctx = context.WithoutCancel(ctx)
	return func() checkpointOutcome {
		out := checkpointOutcome{runID: cp.RunID, step: cp.Step}
		if out.row = store.PutCheckpoint(ctx, cp); out.row == nil {
			out.event = bus.Emit(ctx, store, bus.EventCheckpoint, cp.RunID, taskID, "conductor",
				map[string]any{"step": cp.Step, "files": len(cp.Files), "harnessAlias": cp.HarnessAlias})
		}
		return out
	}
}

// checkpointOutcome is what a checkpoint's store writes returned.
type checkpointOutcome struct {
	runID      string
	step       int
	row, event error
}

// checkpointDone reports a checkpoint's store writes (storeResult).
func (r *runner) checkpointDone(out checkpointOutcome) {
	r.storeResult(out.row, fmt.Sprintf("checkpoint %s at step %d", out.runID, out.step))
	if out.row == nil {
		r.storeResult(out.event, "event "+bus.EventCheckpoint)
	}
}

// workBranch is the run's work branch, when it has one: the branch its
// worktree is on, else the task's work branch (refs/heads/work/<task id>,
// made by review) when the repository has it, as a refinement round has.
// Both are read from the conductor's git dirs, never from the worktree.
func (r *runner) workBranch(ctx context.Context) string {
	if r.lease != nil {
		if b := r.lease.headBranch(); b != "" {
			return b
		}
	}
	if runrec.ValidTaskID(r.task.ID) != nil {
		return ""
	}
	ref := "refs/heads/work/" + r.task.ID
	// Read in process first: most runs have no work branch, and that needs
	// no git process. One that exists is peeled by git (a commit, not a
	// tag or a broken ref); one go-git cannot read is git's to judge too.
	if ids, err := pgit.ReadRefs(r.repo.CommonDir(), ref); err == nil && ids[0] == "" {
		return ""
	}
	if _, err := r.repo.Line(ctx, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}"); err != nil {
		return ""
	}
	return ref
}

// event records one lifecycle event of the run in the store (when it keeps
// events); a store that fails is warned about once, like every store write.
func (r *runner) event(ctx context.Context, kind string, md map[string]any) {
	if r.opts.Store == nil {
		return
	}
	r.storeResult(bus.Emit(ctx, r.opts.Store, kind, r.state.RunID, r.task.ID, "conductor", md), "event "+kind)
}

// harness is the run's harness alias: the task's, else its role's.
func (r *runner) harness() string {
	if h, ok := r.opts.Role.(interface{ Harness() string }); ok && r.task.Harness == "" {
		return h.Harness()
	}
	return r.task.Harness
}

// storeResult reports a bus store write's outcome once per outage: the
// first failure is a warning (the run goes on: the run folder and the
// session state hold every step), later ones are quiet until the store
// answers again, which is said once too.
func (r *runner) storeResult(err error, what string) {
	switch {
	case err != nil && !r.storeDown:
		r.storeDown = true
		r.warnf("bus store unavailable (%s: %v); the run goes on, the run folder is the record", what, err)
	case err == nil && r.storeDown:
		r.storeDown = false
		r.warnf("bus store reachable again")
	}
}

// checkpointState rebuilds a session state from the store's latest
// checkpoint of runID (the session folder is missing or holds another run):
// the conversation restarts with the earlier steps summarised in the system
// prompt.
func (r *runner) checkpointState(ctx context.Context, runID string) (*sessionState, error) {
	if r.opts.Store == nil {
		return nil, fmt.Errorf("resume %s: no session state for it and no bus store to read a checkpoint from", runID)
	}
	cp, err := r.opts.Store.LatestCheckpoint(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("resume %s: no checkpoint: %w", runID, err)
	}
	// Checkpoints are workspace-scoped: one of another workspace is not
	// this task's to continue (rows from before schema 5 carry none).
	if cp.Workspace != "" && cp.Workspace != r.task.Workspace {
		return nil, fmt.Errorf("resume %s: its checkpoint belongs to workspace %q, not the task's %q", runID, cp.Workspace, r.task.Workspace)
	}
	dir := runrec.Dir(r.cfg.RunDir(runID))
	res, err := dir.ReadResult()
	if err != nil {
		run, serr := r.opts.Store.GetRun(ctx, runID)
		if serr != nil {
			return nil, fmt.Errorf("resume %s: %w", runID, err)
		}
		res = runrec.Result{RunID: run.ID, Session: run.Session, Repo: run.Repo, BaseCommit: run.BaseCommit,
			ModelAlias: run.ModelAlias, Model: run.Model, StartedAt: run.StartedAt, Workspace: r.task.Workspace}
	}
	if res.Repo != "" && res.Repo != r.repo.CommonDir() {
		return nil, fmt.Errorf("resume %s: the run used repository %s, not %s", runID, res.Repo, r.repo.CommonDir())
	}
	var hist []historyItem
	if len(cp.History) > 0 {
		if err := json.Unmarshal(cp.History, &hist); err != nil {
			return nil, fmt.Errorf("resume %s: checkpoint history: %w", runID, err)
		}
	}
	sys := firstSystemLine(dir.Path(runrec.TranscriptFile))
	if sys == "" {
		if sys, err = r.systemPrompt(ctx, res.BaseCommit); err != nil {
			return nil, err
		}
	}
	sys += "\n\n" + resumeSummary(cp.Step, hist, cp.Files)
	st := &sessionState{
		Version: 1, Workspace: r.task.Workspace, Session: r.task.Session, TaskID: r.task.ID,
		Repo: r.repo.CommonDir(), BaseCommit: res.BaseCommit, RunID: runID, Status: runrec.StatusRunning,
		Step: cp.Step, Started: res.StartedAt, ModelAlias: res.ModelAlias, Model: res.Model,
		Files: cp.Files, History: hist, Repeats: map[string]int{},
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: sys},
			{Role: openai.ChatMessageRoleUser, Content: r.task.Prompt},
		},
	}
	if cp.Worktree != "" {
		st.Slot, st.PoolDir = filepath.Base(cp.Worktree), filepath.Dir(cp.Worktree)
	}
	if st.BaseCommit == "" {
		return nil, fmt.Errorf("resume %s: the run's base commit is unknown", runID)
	}
	return st, nil
}

// resumeSummary tells the model what happened before the checkpoint.
func resumeSummary(step int, hist []historyItem, files []bus.FileHash) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Resumed run\n\nThis run was interrupted after step %d and resumed from a checkpoint. The worktree still holds your earlier changes.", step)
	if len(hist) > 0 {
		b.WriteString(" Your most recent tool calls (arguments and results shortened):\n")
		for _, h := range hist {
			status := ""
			if h.IsError {
				status = " (error)"
			}
			fmt.Fprintf(&b, "- step %d: %s %s%s → %s\n", h.Step, h.Tool, oneLine(h.Args), status, oneLine(h.Result))
		}
	} else {
		b.WriteString("\n")
	}
	if len(files) > 0 {
		b.WriteString("Files you changed so far: ")
		for i, f := range files {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(f.Path)
		}
		b.WriteString(".\n")
	}
	b.WriteString("Continue the task from where you stopped; re-read files before editing them.")
	return b.String()
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// firstSystemLine returns the system prompt recorded in a transcript.
func firstSystemLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var l transcriptLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Type == lineSystem {
			return l.Text
		}
	}
	return ""
}

// checkDrift compares the worktree with the hashes recorded at the last
// persisted step. Paths an interrupted call may have changed are not
// compared (the call runs again); an interrupted command could have changed
// anything, so then nothing is compared and a warning says so.
func (r *runner) checkDrift() []string {
	skip := map[string]bool{}
	for _, c := range r.pendingCalls() {
		switch c.Function.Name {
		case ToolWriteFile, ToolEditFile:
			var a struct {
				Path string `json:"path"`
			}
			if json.Unmarshal([]byte(c.Function.Arguments), &a) == nil {
				skip[strings.TrimPrefix(filepathClean(a.Path), "./")] = true
			}
		case ToolRunCommand:
			r.warnf("an interrupted command runs again; files are not compared with the checkpoint")
			return nil
		}
	}
	return driftCheck(r.root, r.state.Files, skip)
}

func filepathClean(p string) string {
	return filepath.ToSlash(filepath.Clean(strings.TrimSpace(p)))
}
