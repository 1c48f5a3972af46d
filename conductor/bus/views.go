package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Views are the read-only listings a dashboard needs beyond the Store
// interface: every checkpoint's summary, every note of a run, every verdict,
// every landing and every job of the embedded queue. They only read.
//
// They live apart from Store so that adding a listing never changes the
// interface every backend and double implements; ViewsOf gives them for a
// store opened by Open.
type Views interface {
	// CheckpointStatsAll is, per run, how many checkpoints it has and when
	// the last was written (runs without one are absent).
	CheckpointStatsAll(ctx context.Context) (map[string]CheckpointStat, error)
	// ListCheckpoints lists a run's checkpoints, oldest first, without
	// their history.
	ListCheckpoints(ctx context.Context, runID string) ([]CheckpointSummary, error)
	// ListNotes lists every note of a run, delivered or not, oldest first.
	ListNotes(ctx context.Context, runID string) ([]Note, error)
	// ListVerdicts lists the verdicts recorded for a run or a work ref
	// (whichever is non-empty; both: either matches), newest first.
	ListVerdicts(ctx context.Context, runID, workRef string) ([]Verdict, error)
	// ListLandings lists every landing, newest first.
	ListLandings(ctx context.Context) ([]Landing, error)
	// ListJobs lists the embedded queue's jobs (every queue), oldest first.
	ListJobs(ctx context.Context) ([]JobView, error)
}

// CheckpointStat is how many checkpoints a run has and the newest one's time.
type CheckpointStat struct {
	Count  int       `json:"count"`
	LastAt time.Time `json:"lastAt"`
	Step   int       `json:"step"` // the newest checkpoint's step
}

// JobView is a job of the embedded queue as a listing shows it.
type JobView struct {
	Job
	TakenAt   time.Time `json:"takenAt,omitzero"`
	DeadAt    time.Time `json:"deadAt,omitzero"` // a dead letter: failed, never taken again
	LastError string    `json:"lastError,omitempty"`
}

// State names where the job is: queued, taken or dead.
func (j JobView) State() string {
	switch {
	case !j.DeadAt.IsZero():
		return "dead"
	case j.TakenBy != "":
		return "taken"
	}
	return "queued"
}

// ErrNoViews is returned by ViewsOf for a store that does not offer them
// (a test double).
var ErrNoViews = errors.New("this store offers no listings")

// ViewsOf returns the listings of a store opened by Open.
func ViewsOf(s Store) (Views, error) {
	if v, ok := s.(Views); ok {
		return v, nil
	}
	return nil, ErrNoViews
}

var _ Views = (*sqlStore)(nil)

func (s *sqlStore) CheckpointStatsAll(ctx context.Context) (map[string]CheckpointStat, error) {
	type row struct {
		id   string
		n    int64
		last int64
	}
	var rs []row
	err := s.read(ctx, func(q querier) (err error) {
		rs, err = all(ctx, q, func(r scanner) (row, error) {
			var v row
			err := r.Scan(&v.id, &v.n, &v.last)
			return v, err
		}, `SELECT run_id, COUNT(*), MAX(created_at) FROM checkpoints GROUP BY run_id`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint stats: %w", err)
	}
	out := make(map[string]CheckpointStat, len(rs))
	for _, r := range rs {
		out[r.id] = CheckpointStat{Count: int(r.n), LastAt: fromTS(r.last)}
	}
	// The newest checkpoint's step, per run (a second small query keeps the
	// first portable across both backends).
	type stepRow struct {
		id   string
		step int64
	}
	var steps []stepRow
	err = s.read(ctx, func(q querier) (err error) {
		steps, err = all(ctx, q, func(r scanner) (stepRow, error) {
			var v stepRow
			err := r.Scan(&v.id, &v.step)
			return v, err
		}, `SELECT run_id, MAX(step) FROM checkpoints GROUP BY run_id`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint stats: %w", err)
	}
	for _, r := range steps {
		st := out[r.id]
		st.Step = int(r.step)
		out[r.id] = st
	}
	return out, nil
}

func (s *sqlStore) ListCheckpoints(ctx context.Context, runID string) ([]CheckpointSummary, error) {
	var out []CheckpointSummary
	err := s.read(ctx, func(q querier) (err error) {
		out, err = all(ctx, q, func(r scanner) (CheckpointSummary, error) {
			var (
				c     CheckpointSummary
				step  int64
				files string
				at    int64
			)
			if err := r.Scan(&step, &files, &at, &c.Workspace, &c.Branch); err != nil {
				return c, err
			}
			var fh []FileHash
			if err := json.Unmarshal([]byte(files), &fh); err != nil {
				return c, fmt.Errorf("checkpoint of run %s at step %d: files: %w", runID, step, err)
			}
			c.Step, c.Files, c.CreatedAt = int(step), len(fh), fromTS(at)
			return c, nil
		}, `SELECT step, files, created_at, workspace, branch FROM checkpoints WHERE run_id = ? ORDER BY step, id`, runID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list checkpoints of run %s: %w", runID, err)
	}
	return out, nil
}

func (s *sqlStore) ListNotes(ctx context.Context, runID string) ([]Note, error) {
	var out []Note
	err := s.read(ctx, func(q querier) (err error) {
		out, err = all(ctx, q, func(r scanner) (Note, error) {
			n := Note{RunID: runID}
			var at, step int64
			err := r.Scan(&n.ID, &n.Text, &at, &step)
			n.CreatedAt, n.DeliveredAt = fromTS(at), int(step)
			return n, err
		}, `SELECT id, body, created_at, delivered_at_step FROM notes WHERE run_id = ? ORDER BY id`, runID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list notes of run %s: %w", runID, err)
	}
	return out, nil
}

func (s *sqlStore) ListVerdicts(ctx context.Context, runID, workRef string) ([]Verdict, error) {
	if runID == "" && workRef == "" {
		return nil, errors.New("list verdicts: a run id or a work ref is required")
	}
	var out []Verdict
	err := s.read(ctx, func(q querier) (err error) {
		out, err = all(ctx, q, func(r scanner) (Verdict, error) {
			var (
				v        Verdict
				findings string
				at       int64
			)
			if err := r.Scan(&v.ID, &v.RunID, &v.WorkRef, &v.Commit, &v.PatchID, &v.Verdict, &v.Reviewer, &findings, &at); err != nil {
				return v, err
			}
			if err := json.Unmarshal([]byte(findings), &v.Findings); err != nil {
				return v, fmt.Errorf("verdict %d: findings: %w", v.ID, err)
			}
			v.CreatedAt = fromTS(at)
			return v, nil
		}, `SELECT id, run_id, work_ref, commit_sha, patch_id, verdict, reviewer, findings, created_at
			FROM verdicts WHERE (run_id = ? AND run_id <> '') OR (work_ref = ? AND work_ref <> '') ORDER BY id DESC`,
			runID, workRef)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list verdicts: %w", err)
	}
	return out, nil
}

func (s *sqlStore) ListLandings(ctx context.Context) ([]Landing, error) {
	var out []Landing
	err := s.read(ctx, func(q querier) (err error) {
		out, err = all(ctx, q, func(r scanner) (Landing, error) {
			var (
				l  Landing
				at int64
			)
			err := r.Scan(&l.DecisionID, &l.Commit, &l.Target, &l.PatchID, &l.Gate, &at)
			l.LandedAt = fromTS(at)
			return l, err
		}, `SELECT decision_id, commit_sha, target, patch_id, gate, landed_at FROM landings
			ORDER BY landed_at DESC, decision_id`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list landings: %w", err)
	}
	return out, nil
}

func (s *sqlStore) ListJobs(ctx context.Context) ([]JobView, error) {
	var out []JobView
	err := s.read(ctx, func(q querier) (err error) {
		out, err = all(ctx, q, func(r scanner) (JobView, error) {
			var (
				j                        JobView
				attempts                 int64
				created, takenAt, deadAt int64
			)
			if err := r.Scan(&j.ID, &j.Queue, &j.Payload, &attempts, &j.TakenBy, &takenAt, &created, &deadAt, &j.LastError); err != nil {
				return j, err
			}
			j.Attempts = int(attempts)
			j.Created, j.TakenAt, j.DeadAt = fromTS(created), fromTS(takenAt), fromTS(deadAt)
			return j, nil
		}, `SELECT id, queue, payload, attempts, taken_by, taken_at, created_at, dead_at, last_error
			FROM jobs ORDER BY id`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return out, nil
}
