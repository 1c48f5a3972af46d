package mcp

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
	"github.com/conductor-dev/conductor/runtask"
)

// The authority split, said in every tool description that touches it.
const authority = " conductor mcp has no resolve_decision and no land tool: a decision is a person's act (conductor decision resolve, or the web view) and landing is the conductor's (conductor land)."

// Outcomes complete_task accepts: a run's final statuses.
var outcomes = []any{runrec.StatusSucceeded, runrec.StatusFailed, runrec.StatusTimeout,
	runrec.StatusBudget, runrec.StatusStuck, runrec.StatusCancelled}

// ---- claim_task ----

type claimIn struct {
	TaskID       string `json:"taskId" jsonschema:"the backlog task to claim (list_tasks shows them)"`
	Agent        string `json:"agent" jsonschema:"who claims: your agent's name, shown to everyone as the lease holder"`
	LeaseSeconds int    `json:"leaseSeconds,omitempty" jsonschema:"how long the lease lasts (default 1800); claim again with leaseToken to renew before it expires"`
	LeaseToken   string `json:"leaseToken,omitempty" jsonschema:"to renew: the leaseToken of your current lease on this task"`
}

type claimOut struct {
	TaskID        string       `json:"taskId"`
	RunID         string       `json:"runId"`
	LeaseToken    string       `json:"leaseToken"`
	Holder        string       `json:"holder"`
	ExpiresAt     time.Time    `json:"expiresAt"`
	Renewed       bool         `json:"renewed"`
	ReclaimedFrom *bus.Lease   `json:"reclaimedFrom,omitempty"`
	Task          runtask.Task `json:"task"`
	// BaseCommit is the commit the work starts from (the task's base, else
	// the workspace repository's HEAD, when claimed): complete_task's patch
	// must apply to it. Empty when the workspace has no repository here.
	BaseCommit string `json:"baseCommit,omitempty"`
}

// ---- complete_task ----

type completeIn struct {
	RunID            string `json:"runId" jsonschema:"the run claim_task opened for you"`
	LeaseToken       string `json:"leaseToken" jsonschema:"the leaseToken claim_task returned with that run"`
	Outcome          string `json:"outcome" jsonschema:"how the work ended"`
	ModelAlias       string `json:"modelAlias" jsonschema:"the model (alias) that did the work"`
	PromptTokens     *int64 `json:"promptTokens,omitempty" jsonschema:"prompt tokens used in total"`
	CompletionTokens *int64 `json:"completionTokens,omitempty" jsonschema:"completion tokens used in total"`
	TotalTokens      *int64 `json:"totalTokens,omitempty" jsonschema:"tokens used in total"`
	Summary          string `json:"summary,omitempty" jsonschema:"what was done, or why it failed"`
	Patch            string `json:"patch,omitempty" jsonschema:"the work as one unified git diff (git diff --binary); its patch-id is recorded"`
	Commit           string `json:"commit,omitempty" jsonschema:"or: the commit holding the work (full or abbreviated hex id)"`
}

type completeOut struct {
	TaskID           string    `json:"taskId"`
	RunID            string    `json:"runId"`
	Outcome          string    `json:"outcome"`
	PatchID          string    `json:"patchId,omitempty"`
	AlreadyCompleted bool      `json:"alreadyCompleted"`
	Claim            bus.Claim `json:"claim"`
}

// ---- list_tasks ----

type listTasksIn struct {
	State string `json:"state,omitempty" jsonschema:"only tasks in this state (default all)"`
}

type taskRow struct {
	ID          string    `json:"id"`
	File        string    `json:"file"`
	Workspace   string    `json:"workspace"`
	Role        string    `json:"role,omitempty"`
	Summary     string    `json:"summary"`
	State       string    `json:"state"` // open | leased | lease-expired | claimed | completed
	Holder      string    `json:"holder,omitempty"`
	RunID       string    `json:"runId,omitempty"`
	ExpiresAt   time.Time `json:"expiresAt,omitzero"`
	CompletedAt time.Time `json:"completedAt,omitzero"`
	Outcome     string    `json:"outcome,omitempty"`
}

type listTasksOut struct {
	Backlog  string           `json:"backlog"`
	Tasks    []taskRow        `json:"tasks"`
	Problems []backlogProblem `json:"problems,omitempty"`
}

// ---- runs ----

type listRunsIn struct {
	TaskID  string `json:"taskId,omitempty" jsonschema:"only runs of this task"`
	Session string `json:"session,omitempty" jsonschema:"only runs of this session"`
	Status  string `json:"status,omitempty" jsonschema:"only runs with this status"`
	Limit   int    `json:"limit,omitempty" jsonschema:"at most this many, newest first (default 50)"`
}

type listRunsOut struct {
	Runs []bus.RunSummary `json:"runs"`
}

type getRunIn struct {
	RunID string `json:"runId" jsonschema:"the run"`
}

type getRunOut struct {
	Run             bus.RunSummary `json:"run"`
	Checkpoints     int            `json:"checkpoints"`
	LastCheckpoint  time.Time      `json:"lastCheckpointAt,omitzero"`
	LastStep        int            `json:"lastCheckpointStep,omitempty"`
	Verdicts        []bus.Verdict  `json:"verdicts"`
	Lease           *bus.Lease     `json:"lease,omitempty"`
	PendingNotes    int            `json:"pendingNotes"`
	Notes           []bus.Note     `json:"notes"` // not yet delivered, oldest first
	TranscriptLines int            `json:"transcriptLines"`
	Resources       []string       `json:"resources"`
}

// ---- notes and decisions ----

type addNoteIn struct {
	RunID string `json:"runId" jsonschema:"a running run"`
	Text  string `json:"text" jsonschema:"the note; the session reads it at its next turn"`
}

type raiseIn struct {
	RaisedBy string   `json:"raisedBy" jsonschema:"who raises: your agent's name"`
	Kind     string   `json:"kind,omitempty" jsonschema:"decision kind (default git.merge.protected)"`
	WorkRef  string   `json:"workRef,omitempty" jsonschema:"the branch holding the work (git.merge.protected)"`
	Commit   string   `json:"commit,omitempty" jsonschema:"the commit to land (full id, or abbreviated with repo)"`
	Target   string   `json:"target,omitempty" jsonschema:"the branch to land on"`
	Repo     string   `json:"repo,omitempty" jsonschema:"a folder inside the repository the work ref lives in, on conductor's host"`
	RunID    string   `json:"runId,omitempty" jsonschema:"the run that produced the work"`
	Issue    int64    `json:"issue,omitempty" jsonschema:"forge issue to close when it lands"`
	Options  []string `json:"options,omitempty" jsonschema:"the options offered (default merge, reject)"`
}

type listDecisionsIn struct {
	OpenOnly bool `json:"openOnly,omitempty" jsonschema:"only decisions still waiting for a person"`
}

type listDecisionsOut struct {
	Decisions []bus.DecisionView `json:"decisions"`
}

func (s *Server) addTools() {
	addTool(s, "claim_task",
		"Claim a backlog task, atomically, with a lease: exactly one claimant wins. Returns the run id opened for the work and a lease token (keep it: complete_task needs it). A task held by someone else's live lease, by a conductor worker, or already completed is refused, naming the holder; an expired lease can be claimed by anyone. Claim again with your leaseToken to renew. Written to the store as a claimed event.",
		func(p map[string]*jsonschema.Schema) {
			idProp(p["taskId"])
			nonEmpty(200)(p["agent"])
			p["leaseSeconds"].Minimum, p["leaseSeconds"].Maximum = ptr(10.0), ptr(maxLease.Seconds())
			p["leaseToken"].MaxLength = ptr(200)
		}, s.claimTask)
	addTool(s, "complete_task",
		"Complete the task of your lease: outcome, model alias, token totals, and the work as a patch (or a commit). Only the lease holder can (the leaseToken of that run); repeating the same completion is harmless and changes nothing. The run is recorded as finished; review and landing stay with conductor."+authority,
		func(p map[string]*jsonschema.Schema) {
			idProp(p["runId"])
			nonEmpty(200)(p["leaseToken"])
			p["outcome"].Enum = outcomes
			nonEmpty(200)(p["modelAlias"])
			for _, k := range []string{"promptTokens", "completionTokens", "totalTokens"} {
				tokensProp(p[k])
			}
			p["summary"].MaxLength = ptr(8000)
			p["patch"].MaxLength = ptr(16 << 20)
			p["commit"].Pattern = `^[0-9a-f]{7,64}$`
		}, s.completeTask)
	addTool(s, "list_tasks",
		"List the backlog tasks with their claim state (open, leased with holder and expiry, lease-expired, claimed by a conductor worker, completed with outcome). Files in the backlog that are not valid tasks are listed as problems.",
		func(p map[string]*jsonschema.Schema) {
			p["state"].Enum = []any{"open", "leased", "lease-expired", "claimed", "completed"}
		}, s.listTasks)
	addTool(s, "list_runs",
		"List runs (conductor's workers' and those opened by claim_task), newest first, from the store and the run folders.",
		func(p map[string]*jsonschema.Schema) {
			p["limit"].Minimum, p["limit"].Maximum = ptr(1.0), ptr(500.0)
			idProp(p["taskId"])
		}, s.listRuns)
	addTool(s, "get_run",
		"One run: status, steps, tokens, patch-id, checkpoints (count, last time and step), review verdicts, its lease if an agent holds it, the operator notes not yet delivered (an agent working on the run reads them here), and the URIs of its transcript and patch resources.",
		func(p map[string]*jsonschema.Schema) { idProp(p["runId"]) }, s.getRun)
	addTool(s, "add_note",
		"Leave an operator note for a running session: it reads the note at its next turn. Refused for a run that is not running (the note would never be delivered).",
		func(p map[string]*jsonschema.Schema) {
			idProp(p["runId"])
			nonEmpty(8000)(p["text"])
		}, s.addNote)
	addTool(s, "raise_decision",
		"Raise a decision for a person: usually git.merge.protected, asking whether a reviewed commit on a work ref should land on a target. It waits until a person resolves it."+authority,
		func(p map[string]*jsonschema.Schema) {
			nonEmpty(200)(p["raisedBy"])
			p["issue"].Minimum = ptr(0.0)
			for _, k := range []string{"workRef", "commit", "target"} {
				p[k].Pattern = `^[^-\s]\S*$`
			}
		}, s.raiseDecision)
	addTool(s, "list_decisions",
		"List decisions, newest first, with their resolution and landing if any."+authority,
		nil, s.listDecisions)
}

var tokenEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func randomID(n int) string {
	b := make([]byte, n)
	crand.Read(b)
	return tokenEncoding.EncodeToString(b)
}

func (s *Server) runDir(id string) runrec.Dir { return runrec.Dir(filepath.Join(s.o.RunsDir, id)) }

func (s *Server) claimTask(ctx context.Context, _ *sdk.CallToolRequest, in claimIn) (*sdk.CallToolResult, claimOut, error) {
	t, err := findTask(s.o.BacklogDir, in.TaskID)
	if err != nil {
		return nil, claimOut{}, explain(err)
	}
	ttl := s.o.DefaultLease
	if in.LeaseSeconds > 0 {
		ttl = time.Duration(in.LeaseSeconds) * time.Second
	}
	token := in.LeaseToken
	if token == "" {
		token = "lt-" + randomID(20)
	}
	agent := strings.TrimSpace(in.Agent)
	runID := "r-mcp-" + randomID(8)
	res, err := s.agents.ClaimLease(ctx, bus.LeaseRequest{
		TaskID: t.Task.ID, Holder: agent, Token: token, TTL: ttl,
		Run: bus.Run{ID: runID, Session: cmp.Or(t.Task.Session, agent), Role: t.Task.Role, ModelAlias: t.Task.Model},
	})
	if err != nil {
		return nil, claimOut{}, explain(err)
	}
	dir := s.runDir(res.Lease.RunID)
	var repo, base string
	if !res.Renewed {
		// The run folder: the task as dispatched and a running receipt
		// naming where the work starts.
		repo, base = s.workBase(ctx, t.Task)
		if err := runrec.WriteFileAtomic(dir.Path(runrec.TaskFile), t.Body, 0o644); err != nil {
			s.o.Log.Warn("run folder not written; the store is the record", "run", res.Lease.RunID, "err", err)
		} else if err := dir.WriteResult(runrec.Result{RunID: res.Lease.RunID, TaskID: t.Task.ID, Session: cmp.Or(t.Task.Session, agent),
			Role: t.Task.Role, Workspace: t.Task.Workspace, Status: runrec.StatusRunning, ModelAlias: t.Task.Model,
			Repo: repo, BaseCommit: base, StartedAt: res.Lease.ClaimedAt, FilesChanged: []string{}}); err != nil {
			s.o.Log.Warn("run receipt not written; the store is the record", "run", res.Lease.RunID, "err", err)
		}
	} else if r, err := dir.ReadResult(); err == nil {
		base = r.BaseCommit
	}
	return nil, claimOut{TaskID: t.Task.ID, RunID: res.Lease.RunID, LeaseToken: token, Holder: res.Lease.Holder,
		ExpiresAt: res.Lease.ExpiresAt, Renewed: res.Renewed, ReclaimedFrom: res.Expired, Task: t.Task, BaseCommit: base}, nil
}

// workBase is the repository and base commit a claimed task's work starts
// from; both empty when the workspace has no repository here (the claim
// still holds: the work is then reviewed elsewhere).
func (s *Server) workBase(ctx context.Context, t runtask.Task) (repo, base string) {
	if s.o.Repo == nil {
		return "", ""
	}
	g, err := s.o.Repo(t.Workspace)
	if err == nil {
		base, err = runtask.ResolveBase(ctx, g, t.Base)
	}
	if err != nil {
		s.o.Log.Warn("claim records no base commit: review needs one", "task", t.ID, "err", err)
		return "", ""
	}
	return g.CommonDir(), base
}

// checkApplies refuses a patch that does not apply to the base commit the
// run's claim recorded (nothing is recorded then; the objects the check
// wrote are unreferenced, left to git gc).
func (s *Server) checkApplies(ctx context.Context, runID, diff string) error {
	res, err := s.runDir(runID).ReadResult()
	if err != nil || res.Repo == "" || res.BaseCommit == "" || res.Status != runrec.StatusRunning {
		return nil // no base to check against, or completed before: the store decides
	}
	g, err := git.OpenRepo(res.Repo)
	if err != nil {
		return fmt.Errorf("complete_task: the run's repository %s: %w (nothing was recorded)", res.Repo, err)
	}
	if _, err := patch.ApplyToBase(ctx, g, res.BaseCommit, []byte(diff)); err != nil {
		return refusal.Newf(CodePatchDoesNotApply,
			"make the patch against the claim's baseCommit (git diff "+patch.Short(res.BaseCommit)+"), or claim the task again for a fresh base",
			"%v (the base commit the claim named)", err)
	}
	return nil
}

func (s *Server) completeTask(ctx context.Context, _ *sdk.CallToolRequest, in completeIn) (*sdk.CallToolResult, completeOut, error) {
	var patchID string
	if in.Patch != "" {
		id, err := patch.BindingPatchID(strings.NewReader(in.Patch))
		if err != nil {
			return nil, completeOut{}, explain(fmt.Errorf("complete_task: patch: %w (nothing was recorded)", err))
		}
		patchID = id
		if err := s.checkApplies(ctx, in.RunID, in.Patch); err != nil {
			return nil, completeOut{}, explain(err)
		}
	}
	md := map[string]any{"via": "mcp"}
	if in.Commit != "" {
		md["commit"] = in.Commit
	}
	outcome := strings.TrimSpace(in.Summary)
	if in.Commit != "" {
		outcome = strings.TrimSpace(outcome + " (commit " + in.Commit + ")")
	}
	cl, repeated, err := s.agents.CompleteLease(ctx, bus.LeaseCompletion{
		RunID: in.RunID, Token: in.LeaseToken, Status: in.Outcome, Outcome: outcome, ModelAlias: in.ModelAlias,
		PromptTokens: in.PromptTokens, CompletionTokens: in.CompletionTokens, TotalTokens: in.TotalTokens,
		PatchID: patchID, Metadata: md,
	})
	if err != nil {
		if errors.Is(err, bus.ErrNotFound) {
			err = fmt.Errorf("complete_task: %w: claim_task opens the run to complete", err)
		}
		return nil, completeOut{}, explain(err)
	}
	out := completeOut{TaskID: cl.TaskID, RunID: in.RunID, Outcome: in.Outcome, PatchID: patchID, AlreadyCompleted: repeated, Claim: cl}
	if repeated {
		if run, err := s.o.Store.GetRun(ctx, in.RunID); err == nil {
			out.PatchID = run.PatchID
		}
		return nil, out, nil
	}
	if err := s.writeReceipt(ctx, in, patchID); err != nil {
		s.o.Log.Warn("run folder not updated; the store is the record", "run", in.RunID, "err", err)
	}
	return nil, out, nil
}

// writeReceipt brings the run folder in line with the completed run: the
// patch and result.json.
func (s *Server) writeReceipt(ctx context.Context, in completeIn, patchID string) error {
	run, err := s.o.Store.GetRun(ctx, in.RunID)
	if err != nil {
		return err
	}
	dir := s.runDir(in.RunID)
	res, err := dir.ReadResult()
	if err != nil {
		res = runrec.Result{RunID: run.ID, TaskID: run.TaskID, Session: run.Session, Role: run.Role, FilesChanged: []string{}}
	}
	if in.Patch != "" {
		if err := runrec.WriteFileAtomic(dir.Path(runrec.PatchFile), []byte(in.Patch), 0o644); err != nil {
			return err
		}
	}
	res.Status, res.ModelAlias, res.PatchID = run.Status, run.ModelAlias, patchID
	res.PromptTokens, res.CompletionTokens, res.TotalTokens = run.PromptTokens, run.CompletionTokens, run.TotalTokens
	res.StartedAt, res.FinishedAt = run.StartedAt, run.FinishedAt
	if run.Status != runrec.StatusSucceeded {
		res.Error = run.Outcome
	}
	return dir.WriteResult(res)
}

func (s *Server) listTasks(ctx context.Context, _ *sdk.CallToolRequest, in listTasksIn) (*sdk.CallToolResult, listTasksOut, error) {
	tasks, problems, err := loadBacklog(s.o.BacklogDir)
	if err != nil {
		return nil, listTasksOut{}, explain(err)
	}
	out := listTasksOut{Backlog: s.o.BacklogDir, Tasks: []taskRow{}, Problems: problems}
	now := s.o.Now()
	for _, t := range tasks {
		row := taskRow{ID: t.Task.ID, File: t.File, Workspace: t.Task.Workspace, Role: t.Task.Role, Summary: summary(t.Task.Prompt), State: "open"}
		cl, err := s.o.Store.GetClaim(ctx, t.Task.ID)
		switch {
		case errors.Is(err, bus.ErrNotFound):
		case err != nil:
			return nil, listTasksOut{}, explain(err)
		default:
			row.RunID, row.State = cl.Claimant, "claimed"
			l, err := s.agents.GetLease(ctx, t.Task.ID)
			if err != nil && !errors.Is(err, bus.ErrNotFound) {
				return nil, listTasksOut{}, explain(err)
			}
			if err == nil && l.RunID == cl.Claimant {
				row.Holder, row.ExpiresAt, row.State = l.Holder, l.ExpiresAt, "leased"
				if l.Expired(now) {
					row.State = "lease-expired"
				}
			}
			if cl.Completion != nil {
				row.State, row.CompletedAt, row.Outcome = "completed", cl.CompletedAt, cl.Completion.Outcome
			}
		}
		if in.State == "" || in.State == row.State {
			out.Tasks = append(out.Tasks, row)
		}
	}
	return nil, out, nil
}

// summary is a prompt's first line, bounded.
func summary(prompt string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(prompt), "\n")
	if r := []rune(line); len(r) > 160 {
		line = string(r[:160]) + "…"
	}
	return line
}

func (s *Server) listRuns(ctx context.Context, _ *sdk.CallToolRequest, in listRunsIn) (*sdk.CallToolResult, listRunsOut, error) {
	limit := in.Limit
	if limit == 0 {
		limit = 50
	}
	runs, err := bus.ListRunSummaries(ctx, s.o.Store, s.o.RunsDir, bus.RunFilter{TaskID: in.TaskID, Session: in.Session, Status: in.Status, Limit: limit})
	if err != nil {
		return nil, listRunsOut{}, explain(err)
	}
	if runs == nil {
		runs = []bus.RunSummary{}
	}
	return nil, listRunsOut{Runs: runs}, nil
}

func (s *Server) getRun(ctx context.Context, _ *sdk.CallToolRequest, in getRunIn) (*sdk.CallToolResult, getRunOut, error) {
	v, err := bus.ShowRun(ctx, s.o.Store, s.o.RunsDir, in.RunID)
	if err != nil {
		return nil, getRunOut{}, explain(err)
	}
	out := getRunOut{Run: v.RunSummary, PendingNotes: v.PendingNotes, TranscriptLines: v.TranscriptLines, Verdicts: []bus.Verdict{}, Resources: []string{}}
	if out.Checkpoints, out.LastCheckpoint, err = s.agents.CheckpointStats(ctx, in.RunID); err != nil {
		return nil, getRunOut{}, explain(err)
	}
	if v.Checkpoint != nil {
		out.LastStep = v.Checkpoint.Step
	}
	vs, err := s.agents.RunVerdicts(ctx, in.RunID)
	if err != nil {
		return nil, getRunOut{}, explain(err)
	}
	out.Verdicts = append(out.Verdicts, vs...)
	notes, err := s.o.Store.PendingNotes(ctx, in.RunID)
	if err != nil {
		return nil, getRunOut{}, explain(err)
	}
	out.Notes = append([]bus.Note{}, notes...)
	if v.TaskID != "" {
		if l, err := s.agents.GetLease(ctx, v.TaskID); err == nil && l.RunID == in.RunID {
			out.Lease = &l
		}
	}
	for _, f := range v.Files {
		switch f.Name {
		case runrec.TranscriptFile:
			out.Resources = append(out.Resources, transcriptURI(in.RunID))
		case runrec.PatchFile:
			out.Resources = append(out.Resources, patchURI(in.RunID))
		}
	}
	return nil, out, nil
}

func (s *Server) addNote(ctx context.Context, _ *sdk.CallToolRequest, in addNoteIn) (*sdk.CallToolResult, bus.Note, error) {
	run, err := s.o.Store.GetRun(ctx, in.RunID)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, bus.Note{}, explain(fmt.Errorf("add_note: run %s not found in the store (list_runs shows the runs)", in.RunID))
	}
	if err != nil {
		return nil, bus.Note{}, explain(err)
	}
	if run.Status != runrec.StatusRunning {
		return nil, bus.Note{}, explain(refusal.Newf(CodeRunNotRunning, "notes go to running sessions; dispatch a follow-up on the same session instead",
			"run %s is %s: a note would never be delivered", in.RunID, run.Status))
	}
	n, err := s.o.Store.AddNote(ctx, bus.Note{RunID: in.RunID, Text: strings.TrimSpace(in.Text), CreatedAt: s.o.Now()})
	if err != nil {
		return nil, bus.Note{}, explain(err)
	}
	s.event(ctx, bus.Event{Kind: bus.EventNoteAdded, RunID: in.RunID, TaskID: run.TaskID,
		Metadata: mustJSON(map[string]any{"noteId": n.ID, "via": "mcp"})})
	return nil, n, nil
}

func (s *Server) raiseDecision(ctx context.Context, _ *sdk.CallToolRequest, in raiseIn) (*sdk.CallToolResult, bus.Decision, error) {
	kind := cmp.Or(in.Kind, bus.KindMergeProtected)
	d, err := bus.Raise(ctx, s.o.Store, bus.RaiseRequest{
		Kind: kind, WorkRef: in.WorkRef, Commit: in.Commit, Target: in.Target, RepoDir: in.Repo,
		RunID: in.RunID, Issue: in.Issue, By: strings.TrimSpace(in.RaisedBy), Options: in.Options,
	})
	if err != nil {
		return nil, bus.Decision{}, explain(err)
	}
	s.event(ctx, bus.Event{Kind: bus.EventDecisionRaised, RunID: d.RunID, Actor: d.RaisedBy,
		Metadata: mustJSON(map[string]any{"decisionId": d.ID, "kind": d.Kind, "workRef": d.WorkRef, "commit": d.Commit, "target": d.Target, "via": "mcp"})})
	return nil, d, nil
}

func (s *Server) listDecisions(ctx context.Context, _ *sdk.CallToolRequest, in listDecisionsIn) (*sdk.CallToolResult, listDecisionsOut, error) {
	ds, err := s.o.Store.ListDecisions(ctx, in.OpenOnly)
	if err != nil {
		return nil, listDecisionsOut{}, explain(err)
	}
	out := listDecisionsOut{Decisions: []bus.DecisionView{}}
	for _, d := range ds {
		v := bus.DecisionView{Decision: d}
		if !d.Open() {
			l, err := s.o.Store.GetLanding(ctx, d.ID)
			switch {
			case err == nil:
				v.Landing = &l
			case !errors.Is(err, bus.ErrNotFound):
				return nil, listDecisionsOut{}, explain(err)
			}
		}
		out.Decisions = append(out.Decisions, v)
	}
	return nil, out, nil
}

// event records a lifecycle event; the act it records already happened, so
// a failure is logged, not returned.
func (s *Server) event(ctx context.Context, e bus.Event) {
	if _, err := s.agents.AppendEvent(context.WithoutCancel(ctx), e); err != nil {
		s.o.Log.Warn("lifecycle event not recorded", "kind", e.Kind, "run", e.RunID, "err", err)
	}
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
