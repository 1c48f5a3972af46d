package bus

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/refusal"
)

// querier runs SQL written with "?" placeholders (the PostgreSQL backend
// numbers them).
type querier interface {
	exec(ctx context.Context, q string, args ...any) (int64, error)
	query(ctx context.Context, q string, args ...any) (rows, error)
}

// scanner is one row being read.
type scanner interface{ Scan(dest ...any) error }

// rows is the part of *sql.Rows and pgx.Rows the store uses.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// backend is one database: it runs transactions and single statements and
// classifies its own errors.
type backend interface {
	name() string
	// where names the database in messages (a file path, or a URL without
	// its password).
	where() string
	// tx runs fn in a write transaction that holds the write lock from its
	// first statement (SQLite: BEGIN IMMEDIATE).
	tx(ctx context.Context, fn func(q querier) error) error
	// db runs single statements outside a transaction.
	db() querier
	// retryable reports a transient lock or serialisation error.
	retryable(err error) bool
	// describe turns a backend error into a clear one (a corrupt file…).
	describe(err error) error
	close() error
}

// errNoRows is returned by one when the query matched nothing.
var errNoRows = errors.New("no rows")

// one runs a query expected to return at most one row and scans it.
func one(ctx context.Context, q querier, query string, args []any, dest ...any) error {
	return oneWith(ctx, q, query, args, func(r scanner) error { return r.Scan(dest...) })
}

// oneWith runs a query expected to return at most one row and reads it with
// scan (errNoRows when there is none).
func oneWith(ctx context.Context, q querier, query string, args []any, scan func(scanner) error) error {
	r, err := q.query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer r.Close()
	if !r.Next() {
		if err := r.Err(); err != nil {
			return err
		}
		return errNoRows
	}
	if err := scan(r); err != nil {
		return err
	}
	return r.Err()
}

// all runs a query and scans every row with scan.
func all[T any](ctx context.Context, q querier, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	r, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []T
	for r.Next() {
		v, err := scan(r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, r.Err()
}

// readByID runs get in a read transaction; ErrNotFound passes through as it
// is, other errors are wrapped with what (a format taking the id).
func readByID[T any](ctx context.Context, s *sqlStore, get func(context.Context, querier, string) (T, error), id, what string) (T, error) {
	var v T
	err := s.read(ctx, func(q querier) (err error) {
		v, err = get(ctx, q, id)
		return err
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		err = fmt.Errorf(what+": %w", id, err)
	}
	return v, err
}

// retryBudget bounds how long a write keeps retrying transient lock errors
// (on top of each attempt's own busy wait).
const retryBudget = 2 * time.Minute

// sqlStore implements Store over a backend; both backends share every query.
type sqlStore struct {
	b   backend
	d   dialect
	now func() time.Time
}

var _ Store = (*sqlStore)(nil)

func (s *sqlStore) Close() error    { return s.b.close() }
func (s *sqlStore) Backend() string { return s.b.name() }

func (s *sqlStore) timeNow() time.Time { return s.now().UTC() }

// write runs fn in a write transaction, retrying transient lock errors.
func (s *sqlStore) write(ctx context.Context, fn func(q querier) error) error {
	return s.retry(ctx, func() error { return s.b.tx(ctx, fn) })
}

// read runs fn against the database outside a transaction, retrying
// transient lock errors.
func (s *sqlStore) read(ctx context.Context, fn func(q querier) error) error {
	return s.retry(ctx, func() error { return fn(s.b.db()) })
}

func (s *sqlStore) retry(ctx context.Context, attempt func() error) error {
	deadline := time.Now().Add(retryBudget)
	delay := 2 * time.Millisecond
	for {
		err := attempt()
		if err == nil {
			return nil
		}
		if !s.b.retryable(err) || time.Now().After(deadline) {
			return s.b.describe(err)
		}
		// Full jitter keeps many waiting writers from retrying in step.
		sleep := time.Duration(rand.Int64N(int64(delay)) + 1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(sleep):
		}
		delay = min(delay*2, 250*time.Millisecond)
	}
}

// ts stores a time as Unix nanoseconds; the zero time is 0.
func ts(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromTS(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func nullInt(n sql.NullInt64) *int64 {
	if !n.Valid {
		return nil
	}
	v := n.Int64
	return &v
}

// ---- runs ----

const runColumns = `id, task_id, session, role, status, model_alias, model,
	prompt_tokens, completion_tokens, total_tokens, steps, repo, base_commit,
	worktree, branch, patch_id, started_at, finished_at, outcome, harness_alias`

func (s *sqlStore) PutRun(ctx context.Context, r Run) error {
	if strings.TrimSpace(r.ID) == "" {
		return errors.New("put run: empty run id")
	}
	if r.Steps < 0 {
		return fmt.Errorf("put run %s: negative steps %d", r.ID, r.Steps)
	}
	return s.write(ctx, func(q querier) error {
		_, err := q.exec(ctx, `INSERT INTO runs (`+runColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET
				task_id = excluded.task_id, session = excluded.session,
				role = excluded.role, status = excluded.status,
				model_alias = excluded.model_alias, model = excluded.model,
				prompt_tokens = excluded.prompt_tokens,
				completion_tokens = excluded.completion_tokens,
				total_tokens = excluded.total_tokens, steps = excluded.steps,
				repo = excluded.repo, base_commit = excluded.base_commit,
				worktree = excluded.worktree, branch = excluded.branch,
				patch_id = excluded.patch_id, started_at = excluded.started_at,
				finished_at = excluded.finished_at, outcome = excluded.outcome,
				harness_alias = excluded.harness_alias`,
			r.ID, r.TaskID, r.Session, r.Role, r.Status, r.ModelAlias, r.Model,
			r.PromptTokens, r.CompletionTokens, r.TotalTokens, int64(r.Steps), r.Repo, r.BaseCommit,
			r.Worktree, r.Branch, r.PatchID, ts(r.StartedAt), ts(r.FinishedAt), r.Outcome, r.HarnessAlias)
		if err != nil {
			return fmt.Errorf("put run %s: %w", r.ID, err)
		}
		return nil
	})
}

func scanRun(r scanner) (Run, error) {
	var (
		run           Run
		p, c, t       sql.NullInt64
		steps         int64
		started, fini int64
	)
	err := r.Scan(&run.ID, &run.TaskID, &run.Session, &run.Role, &run.Status, &run.ModelAlias, &run.Model,
		&p, &c, &t, &steps, &run.Repo, &run.BaseCommit,
		&run.Worktree, &run.Branch, &run.PatchID, &started, &fini, &run.Outcome, &run.HarnessAlias)
	run.PromptTokens, run.CompletionTokens, run.TotalTokens = nullInt(p), nullInt(c), nullInt(t)
	run.Steps = int(steps)
	run.StartedAt, run.FinishedAt = fromTS(started), fromTS(fini)
	return run, err
}

func (s *sqlStore) GetRun(ctx context.Context, id string) (Run, error) {
	var run Run
	err := s.read(ctx, func(q querier) error {
		return oneWith(ctx, q, `SELECT `+runColumns+` FROM runs WHERE id = ?`, []any{id}, func(r scanner) (err error) {
			run, err = scanRun(r)
			return err
		})
	})
	if errors.Is(err, errNoRows) {
		return Run{}, notFound("run %s", id)
	}
	if err != nil {
		return Run{}, fmt.Errorf("get run %s: %w", id, err)
	}
	return run, nil
}

func (s *sqlStore) ListRuns(ctx context.Context, f RunFilter) ([]Run, error) {
	var (
		where []string
		args  []any
	)
	for _, c := range []struct{ col, val string }{
		{"task_id", f.TaskID}, {"session", f.Session}, {"status", f.Status},
	} {
		if c.val != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.val)
		}
	}
	query := `SELECT ` + runColumns + ` FROM runs`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY started_at DESC, id DESC`
	if f.Limit > 0 {
		query += ` LIMIT ?`
		args = append(args, int64(f.Limit))
	}
	var out []Run
	err := s.read(ctx, func(q querier) (err error) {
		out, err = all(ctx, q, scanRun, query, args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return out, nil
}

// ---- checkpoints ----

func (s *sqlStore) PutCheckpoint(ctx context.Context, c Checkpoint) error {
	if c.RunID == "" {
		return errors.New("put checkpoint: empty run id")
	}
	if c.Step < 0 {
		return fmt.Errorf("put checkpoint %s: negative step %d", c.RunID, c.Step)
	}
	if len(c.History) > 0 && !json.Valid(c.History) {
		return fmt.Errorf("put checkpoint %s step %d: history is not valid JSON", c.RunID, c.Step)
	}
	files := c.Files
	if files == nil {
		files = []FileHash{}
	}
	fb, err := json.Marshal(files)
	if err != nil {
		return fmt.Errorf("put checkpoint %s: %w", c.RunID, err)
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.timeNow()
	}
	return s.write(ctx, func(q querier) error {
		_, err := q.exec(ctx, `INSERT INTO checkpoints (run_id, step, history, files, worktree, branch, workspace, created_at, harness_alias)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			c.RunID, int64(c.Step), c.History, string(fb), c.Worktree, c.Branch, c.Workspace, ts(c.CreatedAt), c.HarnessAlias)
		if err != nil {
			return fmt.Errorf("put checkpoint %s step %d: %w", c.RunID, c.Step, err)
		}
		return nil
	})
}

func (s *sqlStore) LatestCheckpoint(ctx context.Context, runID string) (Checkpoint, error) {
	c := Checkpoint{RunID: runID}
	var (
		step, created int64
		files         string
	)
	err := s.read(ctx, func(q querier) error {
		return one(ctx, q, `SELECT step, history, files, worktree, branch, workspace, created_at, harness_alias
			FROM checkpoints WHERE run_id = ? ORDER BY step DESC, id DESC LIMIT 1`, []any{runID},
			&step, &c.History, &files, &c.Worktree, &c.Branch, &c.Workspace, &created, &c.HarnessAlias)
	})
	if errors.Is(err, errNoRows) {
		return Checkpoint{}, notFound("checkpoint of run %s", runID)
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("latest checkpoint of run %s: %w", runID, err)
	}
	if err := json.Unmarshal([]byte(files), &c.Files); err != nil {
		return Checkpoint{}, fmt.Errorf("latest checkpoint of run %s: files: %w", runID, err)
	}
	c.Step, c.CreatedAt = int(step), fromTS(created)
	return c, nil
}

// ---- verdicts ----

func (s *sqlStore) PutVerdict(ctx context.Context, v Verdict) (Verdict, error) {
	switch {
	case v.Verdict != VerdictApprove && v.Verdict != VerdictRequestChanges:
		return Verdict{}, fmt.Errorf("put verdict: verdict %q is neither %q nor %q", v.Verdict, VerdictApprove, VerdictRequestChanges)
	case v.WorkRef == "":
		return Verdict{}, errors.New("put verdict: empty work ref")
	case v.Commit == "":
		return Verdict{}, errors.New("put verdict: empty commit")
	}
	if v.Findings == nil {
		v.Findings = []string{}
	}
	fb, err := json.Marshal(v.Findings)
	if err != nil {
		return Verdict{}, fmt.Errorf("put verdict: %w", err)
	}
	if v.CreatedAt.IsZero() {
		v.CreatedAt = s.timeNow()
	}
	err = s.write(ctx, func(q querier) error {
		return one(ctx, q, `INSERT INTO verdicts (run_id, work_ref, commit_sha, patch_id, verdict, reviewer, findings, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			[]any{v.RunID, v.WorkRef, v.Commit, v.PatchID, v.Verdict, v.Reviewer, string(fb), ts(v.CreatedAt)}, &v.ID)
	})
	if err != nil {
		return Verdict{}, fmt.Errorf("put verdict for %s: %w", v.WorkRef, err)
	}
	return v, nil
}

func (s *sqlStore) LatestVerdict(ctx context.Context, workRef string) (Verdict, error) {
	v := Verdict{WorkRef: workRef}
	var (
		findings string
		created  int64
	)
	err := s.read(ctx, func(q querier) error {
		return one(ctx, q, `SELECT id, run_id, commit_sha, patch_id, verdict, reviewer, findings, created_at
			FROM verdicts WHERE work_ref = ? ORDER BY id DESC LIMIT 1`, []any{workRef},
			&v.ID, &v.RunID, &v.Commit, &v.PatchID, &v.Verdict, &v.Reviewer, &findings, &created)
	})
	if errors.Is(err, errNoRows) {
		return Verdict{}, notFound("verdict for work ref %s", workRef)
	}
	if err != nil {
		return Verdict{}, fmt.Errorf("latest verdict for %s: %w", workRef, err)
	}
	if err := json.Unmarshal([]byte(findings), &v.Findings); err != nil {
		return Verdict{}, fmt.Errorf("latest verdict for %s: findings: %w", workRef, err)
	}
	v.CreatedAt = fromTS(created)
	return v, nil
}

// ---- decisions ----

// idEncoding is lower-case base32 without padding: ids are short, typeable
// and case-insensitive.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newDecisionID returns "d-" and 8 random base32 characters (40 bits).
func newDecisionID() string {
	b := make([]byte, 5)
	crand.Read(b)
	return "d-" + idEncoding.EncodeToString(b)
}

// ValidateDecision checks a raise before it is stored.
func ValidateDecision(d Decision) error {
	if strings.TrimSpace(d.Kind) == "" {
		return errors.New("decision kind is empty")
	}
	if d.Kind == KindMergeProtected {
		for _, f := range []struct{ name, val string }{
			{"work ref", d.WorkRef}, {"commit", d.Commit}, {"target", d.Target},
		} {
			if strings.TrimSpace(f.val) == "" {
				return fmt.Errorf("a %s decision needs a %s", KindMergeProtected, f.name)
			}
		}
	}
	seen := map[string]bool{}
	for _, o := range d.Options {
		if strings.TrimSpace(o) == "" || strings.ContainsAny(o, " \t\n,") {
			return fmt.Errorf("decision option %q: options are single words", o)
		}
		if seen[o] {
			return fmt.Errorf("decision option %q given twice", o)
		}
		seen[o] = true
	}
	if d.Issue < 0 {
		return fmt.Errorf("decision issue %d: must not be negative", d.Issue)
	}
	return nil
}

func (s *sqlStore) RaiseDecision(ctx context.Context, d Decision) (Decision, error) {
	if len(d.Options) == 0 {
		d.Options = []string{OptionMerge, OptionReject}
	}
	if err := ValidateDecision(d); err != nil {
		return Decision{}, fmt.Errorf("raise decision: %w", err)
	}
	d.Options = slices.Clone(d.Options)
	d.Option, d.ResolvedBy, d.ResolvedAt = "", "", time.Time{}
	if d.RaisedAt.IsZero() {
		d.RaisedAt = s.timeNow()
	}
	ob, err := json.Marshal(d.Options)
	if err != nil {
		return Decision{}, fmt.Errorf("raise decision: %w", err)
	}
	for range 8 {
		d.ID = newDecisionID()
		var n int64
		err = s.write(ctx, func(q querier) error {
			var err error
			n, err = q.exec(ctx, `INSERT INTO decisions (id, kind, options, raised_by, repo, work_ref,
				commit_sha, target, run_id, issue, raised_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (id) DO NOTHING`,
				d.ID, d.Kind, string(ob), d.RaisedBy, d.Repo, d.WorkRef, d.Commit, d.Target, d.RunID, d.Issue, ts(d.RaisedAt))
			return err
		})
		if err != nil {
			return Decision{}, fmt.Errorf("raise decision: %w", err)
		}
		if n == 1 {
			return d, nil
		}
	}
	return Decision{}, errors.New("raise decision: could not find an unused id")
}

const decisionColumns = `id, kind, options, raised_by, repo, work_ref, commit_sha, target, run_id,
	issue, raised_at, chosen, resolved_by, resolved_at`

func scanDecision(r scanner) (Decision, error) {
	var (
		d                  Decision
		options            string
		raised, resolvedAt int64
	)
	if err := r.Scan(&d.ID, &d.Kind, &options, &d.RaisedBy, &d.Repo, &d.WorkRef, &d.Commit, &d.Target, &d.RunID,
		&d.Issue, &raised, &d.Option, &d.ResolvedBy, &resolvedAt); err != nil {
		return d, err
	}
	if err := json.Unmarshal([]byte(options), &d.Options); err != nil {
		return d, fmt.Errorf("decision %s: options: %w", d.ID, err)
	}
	d.RaisedAt, d.ResolvedAt = fromTS(raised), fromTS(resolvedAt)
	return d, nil
}

func getDecision(ctx context.Context, q querier, id string) (Decision, error) {
	var d Decision
	err := oneWith(ctx, q, `SELECT `+decisionColumns+` FROM decisions WHERE id = ?`, []any{id}, func(r scanner) (err error) {
		d, err = scanDecision(r)
		return err
	})
	if errors.Is(err, errNoRows) {
		return Decision{}, notFound("decision %s", id)
	}
	if err != nil {
		return Decision{}, err
	}
	return d, nil
}

func (s *sqlStore) GetDecision(ctx context.Context, id string) (Decision, error) {
	return readByID(ctx, s, getDecision, id, "get decision %s")
}

func (s *sqlStore) ResolveDecision(ctx context.Context, id, option, by string) (Decision, error) {
	var d Decision
	err := s.write(ctx, func(q querier) error {
		var err error
		d, err = getDecision(ctx, q, id)
		if err != nil {
			return err
		}
		if !d.Open() {
			return conflict(CodeDecisionResolved,
				"a decision is answered once; raise a new decision to ask again",
				"decision %s was already resolved %q by %s at %s",
				id, d.Option, orDash(d.ResolvedBy), d.ResolvedAt.Format(time.RFC3339))
		}
		if !slices.Contains(d.Options, option) {
			return conflict(CodeOptionNotOffered,
				fmt.Sprintf("resolve with one of: %s", strings.Join(d.Options, ", ")),
				"decision %s does not offer option %q (it offers %s)", id, option, strings.Join(d.Options, ", "))
		}
		at := s.timeNow()
		n, err := q.exec(ctx, `UPDATE decisions SET chosen = ?, resolved_by = ?, resolved_at = ?
			WHERE id = ? AND chosen = ''`, option, by, ts(at), id)
		if err != nil {
			return err
		}
		if n != 1 {
			// Resolved by someone else since we read it (PostgreSQL's
			// read-committed writers can interleave here).
			cur, err := getDecision(ctx, q, id)
			if err != nil {
				return err
			}
			return conflict(CodeDecisionResolved,
				"a decision is answered once; raise a new decision to ask again",
				"decision %s was already resolved %q by %s", id, cur.Option, orDash(cur.ResolvedBy))
		}
		d.Option, d.ResolvedBy, d.ResolvedAt = option, by, at
		return nil
	})
	if err != nil {
		var rf *refusal.Refusal
		if errors.Is(err, ErrNotFound) || errors.As(err, &rf) {
			return Decision{}, err
		}
		return Decision{}, fmt.Errorf("resolve decision %s: %w", id, err)
	}
	return d, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (s *sqlStore) ListDecisions(ctx context.Context, openOnly bool) ([]Decision, error) {
	query := `SELECT ` + decisionColumns + ` FROM decisions`
	if openOnly {
		query += ` WHERE chosen = ''`
	}
	query += ` ORDER BY seq DESC`
	var out []Decision
	err := s.read(ctx, func(q querier) (err error) {
		out, err = all(ctx, q, scanDecision, query)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list decisions: %w", err)
	}
	return out, nil
}

// ---- landings ----

func (s *sqlStore) PutLanding(ctx context.Context, l Landing) error {
	if l.DecisionID == "" || l.Commit == "" {
		return errors.New("put landing: decision id and commit are required")
	}
	if l.LandedAt.IsZero() {
		l.LandedAt = s.timeNow()
	}
	err := s.write(ctx, func(q querier) error {
		if _, err := getDecision(ctx, q, l.DecisionID); err != nil {
			return err
		}
		n, err := q.exec(ctx, `INSERT INTO landings (decision_id, commit_sha, target, patch_id, gate, landed_at)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (decision_id) DO NOTHING`,
			l.DecisionID, l.Commit, l.Target, l.PatchID, l.Gate, ts(l.LandedAt))
		if err != nil {
			return err
		}
		if n == 0 {
			prev, err := getLanding(ctx, q, l.DecisionID)
			if err != nil {
				return err
			}
			return conflict(CodeDecisionLanded,
				"a decision lands once; raise a new decision for new work",
				"decision %s already landed as %s on %s at %s",
				l.DecisionID, prev.Commit, prev.Target, prev.LandedAt.Format(time.RFC3339))
		}
		return nil
	})
	if err != nil {
		var rf *refusal.Refusal
		if errors.Is(err, ErrNotFound) || errors.As(err, &rf) {
			return err
		}
		return fmt.Errorf("put landing of %s: %w", l.DecisionID, err)
	}
	return nil
}

func getLanding(ctx context.Context, q querier, id string) (Landing, error) {
	l := Landing{DecisionID: id}
	var at int64
	err := one(ctx, q, `SELECT commit_sha, target, patch_id, gate, landed_at FROM landings WHERE decision_id = ?`,
		[]any{id}, &l.Commit, &l.Target, &l.PatchID, &l.Gate, &at)
	if errors.Is(err, errNoRows) {
		return Landing{}, notFound("landing of decision %s", id)
	}
	l.LandedAt = fromTS(at)
	return l, err
}

func (s *sqlStore) GetLanding(ctx context.Context, decisionID string) (Landing, error) {
	return readByID(ctx, s, getLanding, decisionID, "get landing of %s")
}

// ---- notes ----

func (s *sqlStore) AddNote(ctx context.Context, n Note) (Note, error) {
	if n.RunID == "" {
		return Note{}, errors.New("add note: empty run id")
	}
	if strings.TrimSpace(n.Text) == "" {
		return Note{}, fmt.Errorf("add note for run %s: empty text", n.RunID)
	}
	if n.CreatedAt.IsZero() {
		n.CreatedAt = s.timeNow()
	}
	n.DeliveredAt = 0
	err := s.write(ctx, func(q querier) error {
		return one(ctx, q, `INSERT INTO notes (run_id, body, created_at) VALUES (?, ?, ?) RETURNING id`,
			[]any{n.RunID, n.Text, ts(n.CreatedAt)}, &n.ID)
	})
	if err != nil {
		return Note{}, fmt.Errorf("add note for run %s: %w", n.RunID, err)
	}
	return n, nil
}

func (s *sqlStore) PendingNotes(ctx context.Context, runID string) ([]Note, error) {
	var out []Note
	scanNote := func(r scanner) (Note, error) {
		n := Note{RunID: runID}
		var at int64
		err := r.Scan(&n.ID, &n.Text, &at)
		n.CreatedAt = fromTS(at)
		return n, err
	}
	err := s.read(ctx, func(q querier) (err error) {
		out, err = all(ctx, q, scanNote, `SELECT id, body, created_at FROM notes
			WHERE run_id = ? AND delivered_at_step = 0 ORDER BY id`, runID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pending notes of run %s: %w", runID, err)
	}
	return out, nil
}

func (s *sqlStore) MarkNoteDelivered(ctx context.Context, id int64, step int) error {
	if step <= 0 {
		return fmt.Errorf("mark note %d delivered: step %d must be positive", id, step)
	}
	err := s.write(ctx, func(q querier) error {
		n, err := q.exec(ctx, `UPDATE notes SET delivered_at_step = ? WHERE id = ? AND delivered_at_step = 0`, int64(step), id)
		if err != nil || n == 1 {
			return err
		}
		var at int64
		switch err := one(ctx, q, `SELECT delivered_at_step FROM notes WHERE id = ?`, []any{id}, &at); {
		case errors.Is(err, errNoRows):
			return notFound("note %d", id)
		case err != nil:
			return err
		}
		return fmt.Errorf("note %d was already delivered at step %d: %w", id, at, ErrConflict)
	})
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrConflict) {
		return fmt.Errorf("mark note %d delivered: %w", id, err)
	}
	return err
}

// ---- backlog claims ----

func (s *sqlStore) ClaimTask(ctx context.Context, taskID, claimant string) (bool, error) {
	if taskID == "" || claimant == "" {
		return false, errors.New("claim task: task id and claimant are required")
	}
	var n int64
	err := s.write(ctx, func(q querier) error {
		var err error
		// A claim completed with another outcome than succeeded was
		// released (a failed run, a dead letter): the task may run again.
		n, err = q.exec(ctx, claimSQL, taskID, claimant, ts(s.timeNow()))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("claim task %s: %w", taskID, err)
	}
	return n == 1, nil
}

func (s *sqlStore) CompleteTask(ctx context.Context, c Completion) error {
	if c.TaskID == "" || c.Claimant == "" {
		return errors.New("complete task: task id and claimant are required")
	}
	err := s.write(ctx, func(q querier) error {
		n, err := q.exec(ctx, `UPDATE claims SET completed_at = ?, run_id = ?, outcome = ?, model_alias = ?,
			prompt_tokens = ?, completion_tokens = ?, total_tokens = ?, reason = ?, harness_alias = ?
			WHERE task_id = ? AND claimant = ? AND completed_at = 0`,
			ts(s.timeNow()), c.RunID, c.Outcome, c.ModelAlias, c.PromptTokens, c.CompletionTokens, c.TotalTokens,
			c.Reason, c.HarnessAlias, c.TaskID, c.Claimant)
		if err != nil || n == 1 {
			return err
		}
		var (
			claimant string
			done     int64
		)
		switch err := one(ctx, q, `SELECT claimant, completed_at FROM claims WHERE task_id = ?`, []any{c.TaskID}, &claimant, &done); {
		case errors.Is(err, errNoRows):
			return notFound("claim of task %s", c.TaskID)
		case err != nil:
			return err
		case claimant != c.Claimant:
			return fmt.Errorf("task %s is claimed by %s, not %s: %w", c.TaskID, claimant, c.Claimant, ErrConflict)
		}
		return fmt.Errorf("task %s was already completed at %s: %w", c.TaskID, fromTS(done).Format(time.RFC3339), ErrConflict)
	})
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrConflict) {
		return fmt.Errorf("complete task %s: %w", c.TaskID, err)
	}
	return err
}

func (s *sqlStore) GetClaim(ctx context.Context, taskID string) (Claim, error) {
	cl := Claim{TaskID: taskID}
	var (
		claimed, done                 int64
		runID, outcome, alias, reason string
		harness                       string
		p, c, t                       sql.NullInt64
	)
	err := s.read(ctx, func(q querier) error {
		return one(ctx, q, `SELECT claimant, claimed_at, completed_at, run_id, outcome, model_alias,
			prompt_tokens, completion_tokens, total_tokens, reason, harness_alias FROM claims WHERE task_id = ?`, []any{taskID},
			&cl.Claimant, &claimed, &done, &runID, &outcome, &alias, &p, &c, &t, &reason, &harness)
	})
	if errors.Is(err, errNoRows) {
		return Claim{}, notFound("claim of task %s", taskID)
	}
	if err != nil {
		return Claim{}, fmt.Errorf("get claim of task %s: %w", taskID, err)
	}
	cl.ClaimedAt = fromTS(claimed)
	if done != 0 {
		cl.CompletedAt = fromTS(done)
		cl.Completion = &Completion{
			TaskID: taskID, Claimant: cl.Claimant, RunID: runID, Outcome: outcome, ModelAlias: alias, HarnessAlias: harness,
			PromptTokens: nullInt(p), CompletionTokens: nullInt(c), TotalTokens: nullInt(t), Reason: reason,
		}
	}
	return cl, nil
}

// ---- the embedded job queue ----

func (s *sqlStore) Enqueue(ctx context.Context, queue string, payload []byte) (Job, error) {
	if queue == "" {
		return Job{}, errors.New("enqueue: empty queue name")
	}
	j := Job{Queue: queue, Payload: slices.Clone(payload), Created: s.timeNow()}
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	err := s.write(ctx, func(q querier) error {
		return one(ctx, q, `INSERT INTO jobs (queue, payload, created_at) VALUES (?, ?, ?) RETURNING id`,
			[]any{queue, j.Payload, ts(j.Created)}, &j.ID)
	})
	if err != nil {
		return Job{}, fmt.Errorf("enqueue on %s: %w", queue, err)
	}
	return j, nil
}

func (s *sqlStore) TakeJob(ctx context.Context, queue, consumer string, lease time.Duration) (Job, bool, error) {
	if queue == "" || consumer == "" {
		return Job{}, false, errors.New("take job: queue and consumer are required")
	}
	j := Job{Queue: queue, TakenBy: consumer}
	var (
		attempts, created int64
		found             bool
	)
	now := s.timeNow()
	// expired is the newest lease time that has run out; with no lease a
	// taken job is never taken back.
	expired := int64(-1)
	if lease > 0 {
		expired = ts(now.Add(-lease))
	}
	err := s.write(ctx, func(q querier) error {
		err := one(ctx, q, `UPDATE jobs SET taken_by = ?, taken_at = ?,
				attempts = attempts + CASE WHEN taken_by = '' THEN 0 ELSE 1 END
			WHERE id = (SELECT id FROM jobs WHERE queue = ? AND dead_at = 0 AND (taken_by = '' OR taken_at < ?)
				ORDER BY id LIMIT 1`+s.d.skipLocked+`)
			AND dead_at = 0 AND (taken_by = '' OR taken_at < ?)
			RETURNING id, payload, attempts, created_at`,
			[]any{consumer, ts(now), queue, expired, expired}, &j.ID, &j.Payload, &attempts, &created)
		found = err == nil
		if errors.Is(err, errNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return Job{}, false, fmt.Errorf("take job from %s: %w", queue, err)
	}
	if !found {
		return Job{}, false, nil
	}
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	j.Attempts, j.Created = int(attempts), fromTS(created)
	return j, true, nil
}

func (s *sqlStore) RenewJobs(ctx context.Context, queue, consumer string) (int, error) {
	var n int64
	err := s.write(ctx, func(q querier) (err error) {
		n, err = q.exec(ctx, `UPDATE jobs SET taken_at = ? WHERE queue = ? AND taken_by = ? AND dead_at = 0`,
			ts(s.timeNow()), queue, consumer)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("renew leases of %s on %s: %w", consumer, queue, err)
	}
	return int(n), nil
}

func (s *sqlStore) FinishJob(ctx context.Context, id int64, consumer string, end JobEnd, errText string) error {
	if consumer == "" {
		return errors.New("finish job: consumer is required")
	}
	err := s.write(ctx, func(q querier) error {
		var (
			n   int64
			err error
		)
		const held = ` WHERE id = ? AND taken_by = ? AND dead_at = 0`
		switch end {
		case JobRetry:
			n, err = q.exec(ctx, `UPDATE jobs SET taken_by = '', taken_at = 0, attempts = attempts + 1, last_error = ?`+held,
				errText, id, consumer)
		case JobRelease:
			n, err = q.exec(ctx, `UPDATE jobs SET taken_by = '', taken_at = 0`+held, id, consumer)
		case JobDone:
			n, err = q.exec(ctx, `DELETE FROM jobs`+held, id, consumer)
		case JobDead:
			// A dead job stays: visible, never taken again.
			n, err = q.exec(ctx, `UPDATE jobs SET dead_at = ?, attempts = attempts + 1, last_error = ?`+held,
				ts(s.timeNow()), errText, id, consumer)
		default:
			return fmt.Errorf("finish job %d: unknown end %d", id, end)
		}
		if err != nil || n == 1 {
			return err
		}
		var taken string
		var dead int64
		switch err := one(ctx, q, `SELECT taken_by, dead_at FROM jobs WHERE id = ?`, []any{id}, &taken, &dead); {
		case errors.Is(err, errNoRows):
			return notFound("job %d", id)
		case err != nil:
			return err
		case dead != 0:
			return fmt.Errorf("job %d is already dead-lettered: %w", id, ErrConflict)
		case taken == "":
			return fmt.Errorf("job %d is not taken: %w", id, ErrConflict)
		}
		return fmt.Errorf("job %d is held by %s, not %s: %w", id, taken, consumer, ErrConflict)
	})
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrConflict) {
		return fmt.Errorf("finish job %d: %w", id, err)
	}
	return err
}

func (s *sqlStore) DeadJobs(ctx context.Context, queue string) ([]Job, error) {
	var out []Job
	err := s.read(ctx, func(q querier) (err error) {
		out, err = all(ctx, q, func(r scanner) (Job, error) {
			j := Job{Queue: queue}
			var attempts, created, dead int64
			if err := r.Scan(&j.ID, &j.Payload, &attempts, &created, &dead, &j.LastError); err != nil {
				return Job{}, err
			}
			j.Attempts, j.Created, j.DeadAt = int(attempts), fromTS(created), fromTS(dead)
			if j.Payload == nil {
				j.Payload = []byte{}
			}
			return j, nil
		}, `SELECT id, payload, attempts, created_at, dead_at, last_error FROM jobs
			WHERE queue = ? AND dead_at <> 0 ORDER BY dead_at, id`, queue)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dead letters of %s: %w", queue, err)
	}
	return out, nil
}

func (s *sqlStore) ReviveJob(ctx context.Context, id int64) error {
	return s.deadJob(ctx, id, "revive", `UPDATE jobs SET dead_at = 0, attempts = 0, taken_by = '', taken_at = 0
		WHERE id = ? AND dead_at <> 0`)
}

func (s *sqlStore) DropJob(ctx context.Context, id int64) error {
	return s.deadJob(ctx, id, "drop", `DELETE FROM jobs WHERE id = ? AND dead_at <> 0`)
}

func (s *sqlStore) deadJob(ctx context.Context, id int64, what, stmt string) error {
	err := s.write(ctx, func(q querier) error {
		n, err := q.exec(ctx, stmt, id)
		if err != nil || n == 1 {
			return err
		}
		return notFound("dead job %d", id)
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%s job %d: %w", what, id, err)
	}
	return err
}

// claimSQL claims a task: a new claims row, or one whose claim was released
// (completed with another outcome than succeeded: a failed run, a dead
// letter), so the task may run again. A live or succeeded claim is left as
// it is (no row changes). Worker claims and agent leases share it.
const claimSQL = `INSERT INTO claims (task_id, claimant, claimed_at) VALUES (?, ?, ?)
	ON CONFLICT (task_id) DO UPDATE SET claimant = excluded.claimant, claimed_at = excluded.claimed_at,
		completed_at = 0, run_id = '', outcome = '', model_alias = '', prompt_tokens = NULL,
		completion_tokens = NULL, total_tokens = NULL, reason = ''
	WHERE claims.completed_at <> 0 AND claims.outcome <> 'succeeded'`
