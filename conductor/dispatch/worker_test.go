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
