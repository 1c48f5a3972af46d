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
