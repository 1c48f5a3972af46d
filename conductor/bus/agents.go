package bus

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/refusal"
)

// Refusal codes of the agent lifecycle (conductor mcp). Each changes
// nothing; docs/refusals.md lists them.
const (
	CodeTaskClaimed      = "task-claimed"
	CodeTaskCompleted    = "task-completed"
	CodeNotLeaseHolder   = "not-lease-holder"
	CodeRunNotLeased     = "run-not-leased"
	CodeCompletionDiffer = "completion-differs"
)

// Lifecycle event kinds: the agent lifecycle's (conductor mcp) and the
// flow's own (a run, its review, the decision, the landing, the PR).
const (
	EventClaimed          = "claimed"
	EventLeaseRenewed     = "lease_renewed"
	EventReclaimed        = "reclaimed" // an expired lease taken over
	EventCompleted        = "completed"
	EventNoteAdded        = "note_added"
	EventDecisionRaised   = "decision_raised"
	EventStarted          = "started"        // a run began (or resumed)
	EventCheckpoint       = "checkpoint"     // a run's checkpoint was written
	EventNoteDelivered    = "note_delivered" // a note reached the model
	EventRoleComplete     = "role_complete"  // a run ended: harness, model, tokens, outcome
	EventReviewed         = "reviewed"       // a verdict was recorded
	EventDecisionResolved = "decision_resolved"
	EventLanded           = "landed"
	EventLandPreviewed    = "land_previewed" // serve ran land --preview of an open decision (it changed nothing)
	EventPROpened         = "pr_opened"
)

// Lease is an outside agent's hold on a backlog item: the claim (claims
// row, claimant = RunID) plus who holds it and until when. A lease that
// expired may be claimed by someone else; until then its holder may still
// complete it.
type Lease struct {
	TaskID    string    `json:"taskId"`
	RunID     string    `json:"runId"`
	Holder    string    `json:"holder"`
	ClaimedAt time.Time `json:"claimedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Expired reports whether the lease has run out at now.
func (l Lease) Expired(now time.Time) bool { return !now.Before(l.ExpiresAt) }

// LeaseRequest asks for a lease on a backlog item.
type LeaseRequest struct {
	TaskID string
	Holder string // who claims: an agent's name
	// Token is the lease's secret (only its hash is stored). Presenting the
	// token of the current, same-holder lease renews it instead.
	Token string
	TTL   time.Duration
	// Run is the run row the lease opens (Run.ID names it; TaskID, Status
	// running and StartedAt are filled in).
	Run Run
}

// LeaseResult is a granted lease.
type LeaseResult struct {
	Lease   Lease  `json:"lease"`
	Renewed bool   `json:"renewed,omitempty"`
	Expired *Lease `json:"reclaimedFrom,omitempty"` // the expired lease taken over
}

// LeaseCompletion closes a lease: the claim is completed and the lease's
// run row finished with the outcome.
type LeaseCompletion struct {
	RunID            string
	Token            string
	Status           string // the run's final status (runrec status values)
	Outcome          string // free text: summary or error
	ModelAlias       string
	PromptTokens     *int64
	CompletionTokens *int64
	TotalTokens      *int64
	PatchID          string
	// Metadata goes into the completed event (commit, patch file…).
	Metadata map[string]any
}

// Event is one lifecycle event: append-only.
type Event struct {
	ID        int64           `json:"id"`
	CreatedAt time.Time       `json:"createdAt"`
	Kind      string          `json:"kind"`
	RunID     string          `json:"runId,omitempty"`
	TaskID    string          `json:"taskId,omitempty"`
	Actor     string          `json:"actor,omitempty"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
}

// EventFilter narrows ListEvents; zero values match everything.
type EventFilter struct {
	RunID   string
	TaskID  string
	AfterID int64
	Limit   int
}

// AgentStore is the part of the store outside agents need beyond Store:
// leases, lifecycle events and a few per-run reads. Both backends implement
// it; Agents finds it.
type AgentStore interface {
	Store
	// ClaimLease claims a backlog item for an agent, atomically with the
	// run row it opens and a claimed event: exactly one claimant wins. A
	// task claimed by a live lease, by a conductor worker or completed is
	// refused naming the holder; an expired lease is taken over.
	ClaimLease(ctx context.Context, req LeaseRequest) (LeaseResult, error)
	// CompleteLease completes the claim of a lease's run, only with the
	// lease's token; repeating the same completion changes nothing and
	// reports repeated.
	CompleteLease(ctx context.Context, c LeaseCompletion) (cl Claim, repeated bool, err error)
	GetLease(ctx context.Context, taskID string) (Lease, error)
	AppendEvent(ctx context.Context, e Event) (Event, error)
	ListEvents(ctx context.Context, f EventFilter) ([]Event, error) // oldest first
	// CheckpointStats counts a run's checkpoints and gives the last one's
	// time (zero when none).
	CheckpointStats(ctx context.Context, runID string) (n int, last time.Time, err error)
	RunVerdicts(ctx context.Context, runID string) ([]Verdict, error) // oldest first
}

var _ AgentStore = (*sqlStore)(nil)

// Agents returns the agent lifecycle of a store opened by Open.
func Agents(s Store) (AgentStore, error) {
	a, ok := s.(AgentStore)
	if !ok {
		return nil, fmt.Errorf("bus store %T has no agent leases or events", s)
	}
	return a, nil
}

// Emit appends a lifecycle event when the store keeps events, and says
// nothing when it does not (a test double): events are the record for
// people and watchers, never what a step depends on. md is the metadata.
func Emit(ctx context.Context, s Store, kind, runID, taskID, actor string, md map[string]any) error {
	a, ok := s.(AgentStore)
	if !ok || s == nil {
		return nil
	}
	raw, err := json.Marshal(md)
	if err != nil {
		return fmt.Errorf("event %s: %w", kind, err)
	}
	if md == nil {
		raw = nil
	}
	_, err = a.AppendEvent(context.WithoutCancel(ctx), Event{Kind: kind, RunID: runID, TaskID: taskID, Actor: actor, Metadata: raw})
	return err
}

// hashToken is what is stored of a lease token.
func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func sameHash(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

func appendEvent(ctx context.Context, q querier, e *Event) error {
	if len(e.Metadata) == 0 {
		e.Metadata = json.RawMessage(`{}`)
	}
	if !json.Valid(e.Metadata) {
		return fmt.Errorf("event %s: metadata is not valid JSON", e.Kind)
	}
	return one(ctx, q, `INSERT INTO events (created_at, kind, run_id, task_id, actor, metadata)
		VALUES (?, ?, ?, ?, ?, ?) RETURNING id`,
		[]any{ts(e.CreatedAt), e.Kind, e.RunID, e.TaskID, e.Actor, string(e.Metadata)}, &e.ID)
}

func metadata(m map[string]any) json.RawMessage {
	if len(m) == 0 {
		return nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return b
}

func (s *sqlStore) AppendEvent(ctx context.Context, e Event) (Event, error) {
	if strings.TrimSpace(e.Kind) == "" {
		return Event{}, errors.New("append event: empty kind")
	}
	if e.CreatedAt.IsZero() {
		e.CreatedAt = s.timeNow()
	}
	err := s.write(ctx, func(q querier) error { return appendEvent(ctx, q, &e) })
	if err != nil {
		return Event{}, fmt.Errorf("append event %s: %w", e.Kind, err)
	}
	return e, nil
}

func (s *sqlStore) ListEvents(ctx context.Context, f EventFilter) ([]Event, error) {
	where, args := []string{"id > ?"}, []any{f.AfterID}
	if f.RunID != "" {
		where, args = append(where, "run_id = ?"), append(args, f.RunID)
	}
	if f.TaskID != "" {
		where, args = append(where, "task_id = ?"), append(args, f.TaskID)
	}
	query := `SELECT id, created_at, kind, run_id, task_id, actor, metadata FROM events WHERE ` +
		strings.Join(where, " AND ") + ` ORDER BY id`
	if f.Limit > 0 {
		query += ` LIMIT ?`
		args = append(args, int64(f.Limit))
	}
	scan := func(r scanner) (Event, error) {
		var (
			e  Event
			at int64
			md string
		)
		err := r.Scan(&e.ID, &at, &e.Kind, &e.RunID, &e.TaskID, &e.Actor, &md)
		e.CreatedAt, e.Metadata = fromTS(at), json.RawMessage(md)
		return e, err
	}
	var out []Event
	err := s.read(ctx, func(q querier) (err error) {
		out, err = all(ctx, q, scan, query, args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

func getLease(ctx context.Context, q querier, taskID string) (Lease, string, error) {
	l := Lease{TaskID: taskID}
	var (
		hash            string
		claimed, expire int64
	)
	err := one(ctx, q, `SELECT run_id, holder, token_hash, claimed_at, expires_at FROM task_leases WHERE task_id = ?`,
		[]any{taskID}, &l.RunID, &l.Holder, &hash, &claimed, &expire)
	if errors.Is(err, errNoRows) {
		return Lease{}, "", notFound("lease of task %s", taskID)
	}
	l.ClaimedAt, l.ExpiresAt = fromTS(claimed), fromTS(expire)
	return l, hash, err
}

func (s *sqlStore) GetLease(ctx context.Context, taskID string) (Lease, error) {
	var l Lease
	err := s.read(ctx, func(q querier) (err error) {
		l, _, err = getLease(ctx, q, taskID)
		return err
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Lease{}, fmt.Errorf("get lease of task %s: %w", taskID, err)
	}
	return l, err
}

// claimRow is the claims row as the lease logic needs it.
type claimRow struct {
	claimant string
	done     int64
}

func getClaimRow(ctx context.Context, q querier, taskID string) (claimRow, error) {
	var c claimRow
	err := one(ctx, q, `SELECT claimant, completed_at FROM claims WHERE task_id = ?`, []any{taskID}, &c.claimant, &c.done)
	return c, err
}

// claimedRefusal names who holds a claimed task.
func claimedRefusal(taskID string, c claimRow, l *Lease) error {
	if c.done != 0 {
		return conflict(CodeTaskCompleted, "a backlog item is done once; add a new task for more work",
			"task %s was already completed by run %s at %s", taskID, c.claimant, fromTS(c.done).Format(time.RFC3339))
	}
	if l == nil || l.RunID != c.claimant {
		return conflict(CodeTaskClaimed, "pick another task; a conductor worker's claim has no lease and ends when its run completes",
			"task %s is claimed by conductor run %s", taskID, c.claimant)
	}
	return conflict(CodeTaskClaimed, "pick another task, or claim this one again after the lease expires",
		"task %s is claimed by %s (run %s) until %s", taskID, l.Holder, l.RunID, l.ExpiresAt.Format(time.RFC3339))
}

func insertRun(ctx context.Context, q querier, r Run) error {
	_, err := q.exec(ctx, `INSERT INTO runs (`+runColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.TaskID, r.Session, r.Role, r.Status, r.ModelAlias, r.Model,
		r.PromptTokens, r.CompletionTokens, r.TotalTokens, int64(r.Steps), r.Repo, r.BaseCommit,
		r.Worktree, r.Branch, r.PatchID, ts(r.StartedAt), ts(r.FinishedAt), r.Outcome, r.HarnessAlias)
	return err
}

func (s *sqlStore) ClaimLease(ctx context.Context, req LeaseRequest) (LeaseResult, error) {
	switch {
	case req.TaskID == "" || req.Holder == "" || req.Run.ID == "":
		return LeaseResult{}, errors.New("claim lease: task id, holder and run id are required")
	case req.Token == "":
		return LeaseResult{}, errors.New("claim lease: empty lease token")
	case req.TTL <= 0:
		return LeaseResult{}, fmt.Errorf("claim lease %s: lease duration %s must be positive", req.TaskID, req.TTL)
	}
	var res LeaseResult
	err := s.write(ctx, func(q querier) error {
		res = LeaseResult{}
		now := s.timeNow()
		lease := Lease{TaskID: req.TaskID, RunID: req.Run.ID, Holder: req.Holder, ClaimedAt: now, ExpiresAt: now.Add(req.TTL)}
		hash := hashToken(req.Token)
		n, err := q.exec(ctx, claimSQL, req.TaskID, req.Run.ID, ts(now))
		if err != nil {
			return err
		}
		if n == 1 {
			// A fresh claim, or a released one taken again: a lease row
			// left by its earlier holder goes.
			if _, err := q.exec(ctx, `DELETE FROM task_leases WHERE task_id = ?`, req.TaskID); err != nil {
				return err
			}
		}
		kind := EventClaimed
		if n == 0 {
			// Claimed before: by a live lease, an expired one, a worker, or done.
			c, err := getClaimRow(ctx, q, req.TaskID)
			if err != nil {
				return err
			}
			prev, prevHash, err := getLease(ctx, q, req.TaskID)
			var pl *Lease
			switch {
			case err == nil:
				pl = &prev
			case !errors.Is(err, ErrNotFound):
				return err
			}
			if c.done != 0 || pl == nil || pl.RunID != c.claimant {
				return claimedRefusal(req.TaskID, c, pl)
			}
			if sameHash(prevHash, hash) && prev.Holder == req.Holder {
				// The holder renews its own lease.
				if _, err := q.exec(ctx, `UPDATE task_leases SET expires_at = ? WHERE task_id = ? AND run_id = ?`,
					ts(lease.ExpiresAt), req.TaskID, prev.RunID); err != nil {
					return err
				}
				prev.ExpiresAt = lease.ExpiresAt
				res = LeaseResult{Lease: prev, Renewed: true}
				e := Event{CreatedAt: now, Kind: EventLeaseRenewed, RunID: prev.RunID, TaskID: req.TaskID, Actor: req.Holder,
					Metadata: metadata(map[string]any{"expiresAt": prev.ExpiresAt})}
				return appendEvent(ctx, q, &e)
			}
			if !prev.Expired(now) {
				return claimedRefusal(req.TaskID, c, pl)
			}
			// Take over the expired lease: the claim moves to the new run
			// only if nobody else moved it first.
			n, err := q.exec(ctx, `UPDATE claims SET claimant = ?, claimed_at = ? WHERE task_id = ? AND claimant = ? AND completed_at = 0`,
				req.Run.ID, ts(now), req.TaskID, prev.RunID)
			if err != nil {
				return err
			}
			if n != 1 {
				// Another claimant took it over first (PostgreSQL's
				// read-committed writers can interleave here).
				cur, err := getClaimRow(ctx, q, req.TaskID)
				if err != nil {
					return err
				}
				var cl *Lease
				if l, _, err := getLease(ctx, q, req.TaskID); err == nil {
					cl = &l
				}
				return claimedRefusal(req.TaskID, cur, cl)
			}
			if _, err := q.exec(ctx, `UPDATE runs SET status = 'cancelled', finished_at = ?, outcome = ? WHERE id = ? AND status = 'running'`,
				ts(now), fmt.Sprintf("lease expired at %s; task reclaimed by %s (run %s)", prev.ExpiresAt.Format(time.RFC3339), req.Holder, req.Run.ID),
				prev.RunID); err != nil {
				return err
			}
			if _, err := q.exec(ctx, `DELETE FROM task_leases WHERE task_id = ?`, req.TaskID); err != nil {
				return err
			}
			res.Expired = &prev
			kind = EventReclaimed
		}
		if _, err := q.exec(ctx, `INSERT INTO task_leases (task_id, run_id, holder, token_hash, claimed_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?)`, req.TaskID, lease.RunID, lease.Holder, hash, ts(lease.ClaimedAt), ts(lease.ExpiresAt)); err != nil {
			return err
		}
		run := req.Run
		run.TaskID, run.Status, run.StartedAt, run.FinishedAt = req.TaskID, "running", now, time.Time{}
		if run.Session == "" {
			run.Session = req.Holder
		}
		if err := insertRun(ctx, q, run); err != nil {
			return err
		}
		md := map[string]any{"holder": req.Holder, "expiresAt": lease.ExpiresAt}
		if res.Expired != nil {
			md["reclaimedFrom"] = map[string]any{"runId": res.Expired.RunID, "holder": res.Expired.Holder, "expiredAt": res.Expired.ExpiresAt}
		}
		e := Event{CreatedAt: now, Kind: kind, RunID: run.ID, TaskID: req.TaskID, Actor: req.Holder, Metadata: metadata(md)}
		if err := appendEvent(ctx, q, &e); err != nil {
			return err
		}
		res.Lease = lease
		return nil
	})
	if err != nil {
		var rf *refusal.Refusal
		if errors.As(err, &rf) || isDescribed(err) {
			return LeaseResult{}, err
		}
		return LeaseResult{}, fmt.Errorf("claim lease on task %s: %w", req.TaskID, err)
	}
	return res, nil
}

func eqInt(a, b *int64) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

func (s *sqlStore) CompleteLease(ctx context.Context, c LeaseCompletion) (Claim, bool, error) {
	if c.RunID == "" || c.Token == "" {
		return Claim{}, false, errors.New("complete lease: run id and lease token are required")
	}
	if strings.TrimSpace(c.Status) == "" {
		return Claim{}, false, fmt.Errorf("complete lease of run %s: empty status", c.RunID)
	}
	var (
		taskID   string
		repeated bool
	)
	err := s.write(ctx, func(q querier) error {
		repeated = false
		now := s.timeNow()
		switch err := one(ctx, q, `SELECT task_id FROM runs WHERE id = ?`, []any{c.RunID}, &taskID); {
		case errors.Is(err, errNoRows):
			return notFound("run %s", c.RunID)
		case err != nil:
			return err
		}
		l, hash, err := getLease(ctx, q, taskID)
		switch {
		case errors.Is(err, ErrNotFound):
			return conflict(CodeRunNotLeased, "complete only a run that claim_task opened for you",
				"run %s holds no lease (task %q has none)", c.RunID, taskID)
		case err != nil:
			return err
		case l.RunID != c.RunID:
			return conflict(CodeNotLeaseHolder, "claim the task again if it is free; your work is not recorded",
				"run %s no longer holds task %s: it is leased to %s (run %s)", c.RunID, taskID, l.Holder, l.RunID)
		case !sameHash(hash, hashToken(c.Token)):
			return conflict(CodeNotLeaseHolder, "pass the leaseToken claim_task returned for this run",
				"the lease token does not match the lease of run %s on task %s (held by %s)", c.RunID, taskID, l.Holder)
		}
		var (
			claimant, outcome, alias string
			done                     int64
			p, ct, t                 sql.NullInt64
		)
		if err := one(ctx, q, `SELECT claimant, completed_at, outcome, model_alias, prompt_tokens, completion_tokens, total_tokens
			FROM claims WHERE task_id = ?`, []any{taskID}, &claimant, &done, &outcome, &alias, &p, &ct, &t); err != nil {
			return err
		}
		if claimant != c.RunID {
			return conflict(CodeNotLeaseHolder, "claim the task again if it is free",
				"task %s is claimed by run %s, not %s", taskID, claimant, c.RunID)
		}
		if done != 0 {
			if outcome == c.Status && alias == c.ModelAlias && eqInt(nullInt(p), c.PromptTokens) &&
				eqInt(nullInt(ct), c.CompletionTokens) && eqInt(nullInt(t), c.TotalTokens) {
				repeated = true
				return nil
			}
			return conflict(CodeCompletionDiffer, "a task is completed once; repeat the same completion, or claim a new task",
				"run %s already completed task %s as %q at %s", c.RunID, taskID, outcome, fromTS(done).Format(time.RFC3339))
		}
		n, err := q.exec(ctx, `UPDATE claims SET completed_at = ?, run_id = ?, outcome = ?, model_alias = ?,
			prompt_tokens = ?, completion_tokens = ?, total_tokens = ?
			WHERE task_id = ? AND claimant = ? AND completed_at = 0`,
			ts(now), c.RunID, c.Status, c.ModelAlias, c.PromptTokens, c.CompletionTokens, c.TotalTokens, taskID, c.RunID)
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("task %s changed while completing: %w", taskID, ErrConflict)
		}
		if _, err := q.exec(ctx, `UPDATE runs SET status = ?, outcome = ?, model_alias = ?, prompt_tokens = ?,
			completion_tokens = ?, total_tokens = ?, patch_id = ?, finished_at = ? WHERE id = ?`,
			c.Status, c.Outcome, c.ModelAlias, c.PromptTokens, c.CompletionTokens, c.TotalTokens, c.PatchID, ts(now), c.RunID); err != nil {
			return err
		}
		md := map[string]any{"outcome": c.Status, "modelAlias": c.ModelAlias, "promptTokens": c.PromptTokens,
			"completionTokens": c.CompletionTokens, "totalTokens": c.TotalTokens}
		if c.PatchID != "" {
			md["patchId"] = c.PatchID
		}
		for k, v := range c.Metadata {
			md[k] = v
		}
		e := Event{CreatedAt: now, Kind: EventCompleted, RunID: c.RunID, TaskID: taskID, Actor: l.Holder, Metadata: metadata(md)}
		return appendEvent(ctx, q, &e)
	})
	if err != nil {
		var rf *refusal.Refusal
		if errors.As(err, &rf) || errors.Is(err, ErrNotFound) || isDescribed(err) {
			return Claim{}, false, err
		}
		return Claim{}, false, fmt.Errorf("complete lease of run %s: %w", c.RunID, err)
	}
	cl, err := s.GetClaim(ctx, taskID)
	return cl, repeated, err
}

func (s *sqlStore) CheckpointStats(ctx context.Context, runID string) (int, time.Time, error) {
	var n, last int64
	err := s.read(ctx, func(q querier) error {
		return one(ctx, q, `SELECT COUNT(*), COALESCE(MAX(created_at), 0) FROM checkpoints WHERE run_id = ?`, []any{runID}, &n, &last)
	})
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("checkpoints of run %s: %w", runID, err)
	}
	return int(n), fromTS(last), nil
}

func (s *sqlStore) RunVerdicts(ctx context.Context, runID string) ([]Verdict, error) {
	scan := func(r scanner) (Verdict, error) {
		v := Verdict{RunID: runID}
		var (
			findings string
			at       int64
		)
		if err := r.Scan(&v.ID, &v.WorkRef, &v.Commit, &v.PatchID, &v.Verdict, &v.Reviewer, &findings, &at); err != nil {
			return v, err
		}
		v.CreatedAt = fromTS(at)
		return v, json.Unmarshal([]byte(findings), &v.Findings)
	}
	var out []Verdict
	err := s.read(ctx, func(q querier) (err error) {
		out, err = all(ctx, q, scan, `SELECT id, work_ref, commit_sha, patch_id, verdict, reviewer, findings, created_at
			FROM verdicts WHERE run_id = ? ORDER BY id`, runID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("verdicts of run %s: %w", runID, err)
	}
	return out, nil
}
