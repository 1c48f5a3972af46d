package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
)

// TestEmbeddedLeaseReclaim: a consumer that stops renewing (it died) loses
// its job once the lease runs out; the next consumer takes it back at
// attempt 2, and the dead consumer's late ack fails with ErrLeaseLost.
// (Renewal itself is checked on a fake clock in the store's conformance
// suite: a timed check here would flake under load.)
func TestEmbeddedLeaseReclaim(t *testing.T) {
	ctx := context.Background()
	st, err := bus.Open(ctx, bus.Options{DataRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const lease = 300 * time.Millisecond
	mk := func(name string) *Embedded {
		e := &Embedded{Store: st, Key: "jobs", Consumer: name, Lease: lease, Poll: 20 * time.Millisecond}
		t.Cleanup(func() { e.Close() })
		return e
	}
	dead, other := mk("dead"), mk("other")
	dead.Push(ctx, []byte("a"))
	da, err := dead.Take(ctx, time.Second)
	if err != nil || da == nil {
		t.Fatal(da, err)
	}
	dead.Close() // SIGKILL: no more renewals
	var got *Delivery
	waitUntil(t, func() bool {
		got, err = other.Take(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return got != nil
	})
	if string(got.Payload) != "a" || got.Attempt != 2 {
		t.Fatalf("took back %q at attempt %d, want a at 2", got.Payload, got.Attempt)
	}
	if err := dead.Ack(ctx, da); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("late ack: %v, want ErrLeaseLost", err)
	}
	if err := other.Ack(ctx, got); err != nil {
		t.Fatal(err)
	}
	if n, err := st.RenewJobs(ctx, "jobs", "other"); err != nil || n != 0 {
		t.Fatalf("other still holds %d jobs (%v)", n, err)
	}
}

// lostTakeStore commits a take and then reports it failed, once armed: the
// store's answer was lost (a connection cut after the commit).
type lostTakeStore struct {
	bus.Store
	bus.Views
	lose bool
}

func (s *lostTakeStore) TakeJob(ctx context.Context, queue, consumer string, lease time.Duration) (bus.Job, bool, error) {
	j, ok, err := s.Store.TakeJob(ctx, queue, consumer, lease)
	if s.lose && ok && err == nil {
		s.lose = false
		return bus.Job{}, false, errors.New("connection reset by peer")
	}
	return j, ok, err
}

// TestEmbeddedTakeWhoseAnswerIsLost: a take committed in the store whose
// answer never came leaves the job leased to this (live) consumer, whose
// heartbeat would renew it for ever. The next take gives it back and
// delivers it.
func TestEmbeddedTakeWhoseAnswerIsLost(t *testing.T) {
	ctx := context.Background()
	st, err := bus.Open(ctx, bus.Options{DataRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	views, err := bus.ViewsOf(st)
	if err != nil {
		t.Fatal(err)
	}
	lost := &lostTakeStore{Store: st, Views: views}
	e := &Embedded{Store: lost, Key: "jobs", Consumer: "c1", Poll: 10 * time.Millisecond}
	t.Cleanup(func() { e.Close() })
	for _, p := range []string{"a", "b"} {
		if err := e.Push(ctx, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	lost.lose = true
	if d, err := e.Take(ctx, 0); err == nil {
		t.Fatalf("the lost take: %v, no error", d)
	}
	got := map[string]int{}
	for i := 0; i < 3; i++ {
		d, err := e.Take(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if d == nil {
			break
		}
		got[string(d.Payload)] = d.Attempt
		if err := e.Ack(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 || got["a"] != 1 || got["b"] != 1 {
		t.Fatalf("delivered %v (payload: attempt), want a and b at attempt 1", got)
	}
}
