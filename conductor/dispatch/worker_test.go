package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/queue"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/runtask"
)

// lockedQueue is a queue whose per-run lock another consumer holds.
type lockedQueue struct {
	queue.Queue
	held  bool
	names []string
}

func (q *lockedQueue) Lock(_ context.Context, name string, _ time.Duration) (bool, func(context.Context) error, func(context.Context), error) {
	q.names = append(q.names, name)
	if q.held {
		return false, nil, nil, nil
	}
	return true, func(context.Context) error { return nil }, func(context.Context) {}, nil
}

const taskJob = `{"runId":"r-lock-1","task":{"taskVersion":1,"id":"t-lock","prompt":"p","workspace":"nowhere","capabilities":{"tools":["read"]},"session":"s","timeoutSeconds":5}}`

func newTestHandler(t *testing.T, q queue.Queue) (*Handler, bus.Store) {
	t.Helper()
	root := t.TempDir()
	st, err := bus.Open(context.Background(), bus.Options{DataRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	o := WorkerOptions{
		Run: runtask.Options{Config: conductor.Config{DataRoot: root}, Getenv: func(string) string { return "" }},
		Log: slog.New(slog.DiscardHandler), LockTTL: time.Second,
	}
	return NewHandler(o, st, q), st
}

// A run whose lock another consumer holds is handed back uncounted, and
// nothing is claimed: the lock comes from the queue's optional RunLocker,
// not from knowing its concrete type.
func TestHandleRunLockHeld(t *testing.T) {
	q := &lockedQueue{held: true}
	h, st := newTestHandler(t, q)
	err := h.Handle(context.Background(), make(chan struct{}), &queue.Delivery{Payload: []byte(taskJob), ID: "j1", Attempt: 1})
	if !errors.Is(err, queue.ErrInterrupted) {
		t.Fatalf("Handle = %v, want ErrInterrupted", err)
	}
	if len(q.names) != 1 || q.names[0] != "run:r-lock-1" {
		t.Fatalf("locks taken: %q", q.names)
	}
	if _, err := st.GetClaim(context.Background(), "t-lock"); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("claim after a held lock: %v, want none", err)
	}
}

// Input that can never run is Permanent (dead-lettered at once), found
// after the lock and before any claim.
func TestHandleBadInputIsPermanent(t *testing.T) {
	for name, q := range map[string]queue.Queue{"run locker": &lockedQueue{}, "no locker": nil} {
		t.Run(name, func(t *testing.T) {
			h, st := newTestHandler(t, q)
			err := h.Handle(context.Background(), make(chan struct{}), &queue.Delivery{Payload: []byte(taskJob), ID: "j1", Attempt: 1})
			if !queue.IsPermanent(err) {
				t.Fatalf("Handle = %v, want a permanent error (no repository)", err)
			}
			if _, err := st.GetClaim(context.Background(), "t-lock"); !errors.Is(err, bus.ErrNotFound) {
				t.Fatalf("claim after bad input: %v, want none", err)
			}
		})
	}
}

// countingStore counts run-row writes and fails the next ones on demand.
type countingStore struct {
	bus.Store
	puts int
	fail int
}

func (s *countingStore) PutRun(ctx context.Context, r bus.Run) error {
	s.puts++
	if s.fail > 0 {
		s.fail--
		return bus.ErrUnreachable
	}
	return s.Store.PutRun(ctx, r)
}

// The completion writes the run row only when the store did not take
// exactly that row from the run: one write per job when the run's own
// write went in, the completion's write when it failed or was another row.
func TestCompletionWritesTheRunRowOnce(t *testing.T) {
	ctx := context.Background()
	fin := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	tok := int64(42)
	res := runrec.Result{RunID: "r-once-1", TaskID: "t-once", Status: runrec.StatusSucceeded, Steps: 3,
		StartedAt: fin.Add(-time.Minute), FinishedAt: fin, TotalTokens: &tok, PatchID: "abc"}
	for _, tc := range []struct {
		name       string
		ranFails   int  // the run's own write fails this many times
		ranStarted bool // the run's last write was the started row
		wantPuts   int
		wantStatus string
	}{
		{"the run's write went in", 0, false, 1, runrec.StatusSucceeded},
		{"the run's write failed", 1, false, 2, runrec.StatusSucceeded},
		{"the store took another row", 0, true, 2, runrec.StatusSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, st := newTestHandler(t, nil)
			cs := &countingStore{Store: st, fail: tc.ranFails}
			h.store = cs
			if _, err := st.ClaimTask(ctx, res.TaskID, res.RunID); err != nil {
				t.Fatal(err)
			}
			rows := &rowsPut{}
			row := bus.RunFromResult(res)
			if tc.ranStarted {
				row.Status, row.FinishedAt = "running", time.Time{}
			}
			rows.put(row, cs.PutRun(ctx, row)) // what runtask wrote at its end
			job := queue.Job{RunID: res.RunID}
			task := runtask.Task{ID: res.TaskID}
			if err := h.complete(ctx, slog.New(slog.DiscardHandler), job, task, res, rows); err != nil {
				t.Fatal(err)
			}
			if cs.puts != tc.wantPuts {
				t.Errorf("run-row writes %d, want %d", cs.puts, tc.wantPuts)
			}
			got, err := st.GetRun(ctx, res.RunID)
			if err != nil || got.Status != tc.wantStatus || !got.FinishedAt.Equal(fin) {
				t.Errorf("stored row %+v, %v", got, err)
			}
			if cl, err := st.GetClaim(ctx, res.TaskID); err != nil || cl.Completion == nil || cl.Completion.Outcome != runrec.StatusSucceeded {
				t.Errorf("claim %+v, %v", cl, err)
			}
		})
	}
}
