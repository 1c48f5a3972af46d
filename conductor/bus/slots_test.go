package bus_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/bus/bustest"
	"github.com/conductor-dev/conductor/conductor/testenv"
)

// slotStore is what the model semaphore needs of the store (queue.SlotStore).
type slotStore interface {
	TryAcquireSlot(ctx context.Context, name, holder string, max int, ttl time.Duration) (bool, error)
	RenewSlot(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	ReleaseSlot(ctx context.Context, name, holder string) error
	SlotsInUse(ctx context.Context) ([]bus.SlotUse, error)
}

// backends opens stores of both kinds; open(t, now) returns a new handle
// on the same database each call (as another process would).
func backends(t *testing.T) map[string]func(t *testing.T, now func() time.Time) bus.Store {
	dir := t.TempDir()
	out := map[string]func(t *testing.T, now func() time.Time) bus.Store{
		"embedded": func(t *testing.T, now func() time.Time) bus.Store {
			s, err := bus.Open(context.Background(), bus.Options{DataRoot: dir, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	url := ""
	out["postgres"] = func(t *testing.T, now func() time.Time) bus.Store {
		if url == "" {
			url = testenv.Postgres(t) // skips here (fails under CI=true) without PostgreSQL
		}
		{
			s, err := bus.Open(context.Background(), bus.Options{DatabaseURL: url, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	}
	return out
}

func TestModelSlots(t *testing.T) {
	ctx := context.Background()
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			c := bustest.NewClock()
			s := open(t, c.Now).(slotStore)
			try := func(holder string, want bool) {
				t.Helper()
				got, err := s.TryAcquireSlot(ctx, "qwen", holder, 2, time.Minute)
				if err != nil || got != want {
					t.Fatalf("acquire by %s: %v %v, want %v", holder, got, err, want)
				}
			}
			try("a", true)
			try("b", true)
			try("c", false) // both held
			try("a", true)  // a retry of a holder takes nothing more
			try("c", false)
			use, err := s.SlotsInUse(ctx)
			if err != nil || len(use) != 1 || use[0].Name != "qwen" || use[0].Max != 2 || use[0].InUse != 2 ||
				fmt.Sprint(use[0].Holders) != "[a b]" {
				t.Fatalf("in use: %+v %v", use, err)
			}
			if err := s.ReleaseSlot(ctx, "qwen", "a"); err != nil {
				t.Fatal(err)
			}
			try("c", true)
			// Another alias has its own slots.
			if got, err := s.TryAcquireSlot(ctx, "gpt", "z", 1, time.Minute); err != nil || !got {
				t.Fatalf("other alias: %v %v", got, err)
			}
			// A renewed lease lives on; an expired one is taken back.
			c.Advance(40 * time.Second)
			if ok, err := s.RenewSlot(ctx, "qwen", "b", time.Minute); err != nil || !ok {
				t.Fatalf("renew b: %v %v", ok, err)
			}
			c.Advance(30 * time.Second) // c's lease (from t+0) has expired, b's not
			try("d", true)
			try("e", false)
			if ok, err := s.RenewSlot(ctx, "qwen", "c", time.Minute); err != nil || ok {
				t.Fatalf("renew of an expired, retaken lease: %v %v, want false", ok, err)
			}
			use, _ = s.SlotsInUse(ctx)
			if len(use) != 2 || use[1].Name != "qwen" || use[1].InUse != 2 || fmt.Sprint(use[1].Holders) != "[b d]" {
				t.Fatalf("in use after expiry: %+v", use)
			}
			if use[0].Name != "gpt" || use[0].InUse != 0 {
				t.Fatalf("gpt's expired lease still counted: %+v", use[0])
			}
			for _, bad := range []struct {
				name, holder string
				max          int
			}{{"", "h", 1}, {"q", "", 1}, {"q", "h", 0}} {
				if _, err := s.TryAcquireSlot(ctx, bad.name, bad.holder, bad.max, time.Minute); err == nil {
					t.Errorf("acquire %+v: no error", bad)
				}
			}
		})
	}
}

// TestModelSlotsServeWaitersInOrder: a free slot goes to the waiter that
// came first, not to whoever asks first after the release; a waiter that
// stopped asking loses its place after SlotWaitLease, and one that gave up
// (ReleaseSlot) at once.
func TestModelSlotsServeWaitersInOrder(t *testing.T) {
	ctx := context.Background()
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			c := bustest.NewClock()
			s := open(t, c.Now).(slotStore)
			other := open(t, c.Now).(slotStore) // another process's handle
			try := func(s slotStore, holder string, want bool) {
				t.Helper()
				got, err := s.TryAcquireSlot(ctx, "qwen", holder, 1, time.Minute)
				if err != nil || got != want {
					t.Fatalf("acquire by %s: %v %v, want %v", holder, got, err, want)
				}
			}
			release := func(holder string) {
				t.Helper()
				if err := s.ReleaseSlot(ctx, "qwen", holder); err != nil {
					t.Fatal(err)
				}
			}
			try(s, "a", true)
			try(other, "b", false) // b waits first
			try(s, "c", false)
			if use, err := s.SlotsInUse(ctx); err != nil || len(use) != 1 || use[0].InUse != 1 || use[0].Waiting != 2 {
				t.Fatalf("in use with two waiting: %+v %v", use, err)
			}
			release("a")
			try(s, "c", false) // c asks first after the release: b's turn
			try(other, "b", true)
			release("b")
			try(s, "c", true)

			// A waiter that stops asking loses its place.
			try(s, "d", false)
			c.Advance(bus.SlotWaitLease / 2)
			try(other, "e", false)
			c.Advance(bus.SlotWaitLease/2 + time.Second) // d's place lapsed, e's not
			if use, err := s.SlotsInUse(ctx); err != nil || len(use) != 1 || use[0].Waiting != 1 {
				t.Fatalf("in use with e waiting (d lapsed): %+v %v", use, err)
			}
			release("c")
			try(s, "f", false) // e is still first
			try(other, "e", true)
			release("e")
			try(s, "d", false) // d came back after f: at the back
			try(s, "f", true)
			release("f")

			// A waiter that gives up leaves the queue at once: d still
			// waits here, and gives up.
			try(s, "g", false)
			release("d")
			try(s, "g", true)
			try(other, "h", false)
			try(s, "i", false)
			release("h")
			release("g")
			try(s, "i", true)
		})
	}
}

// TestModelSlotsRace: holders on separate handles of one database (as
// processes are) race for 3 slots; no more than 3 ever hold one at once,
// and every holder gets one in the end.
func TestModelSlotsRace(t *testing.T) {
	ctx := context.Background()
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			const max, holders, rounds = 3, 12, 4
			stores := []slotStore{open(t, time.Now).(slotStore), open(t, time.Now).(slotStore), open(t, time.Now).(slotStore)}
			var inside, peak, served atomic.Int64
			var wg sync.WaitGroup
			for h := range holders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s := stores[h%len(stores)]
					for r := range rounds {
						holder := fmt.Sprintf("h%d-%d", h, r)
						for {
							got, err := s.TryAcquireSlot(ctx, "race", holder, max, time.Hour)
							if err != nil {
								t.Error(err)
								return
							}
							if got {
								break
							}
							time.Sleep(time.Millisecond)
						}
						n := inside.Add(1)
						for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
						}
						time.Sleep(2 * time.Millisecond)
						inside.Add(-1)
						served.Add(1)
						if err := s.ReleaseSlot(ctx, "race", holder); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if peak.Load() > max {
				t.Errorf("%d holders at once, the bound is %d", peak.Load(), max)
			}
			if served.Load() != holders*rounds {
				t.Errorf("%d acquisitions served, want %d", served.Load(), holders*rounds)
			}
		})
	}
}

func TestWorkerHeartbeats(t *testing.T) {
	ctx := context.Background()
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			c := bustest.NewClock()
			s := open(t, c.Now).(bus.Workers)
			t0 := c.Now()
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(s.PutHeartbeat(ctx, bus.Heartbeat{Consumer: "h:1:1", Host: "h", PID: 1, Queue: "embedded q", Concurrency: 4, InFlight: 2, TTL: 10 * time.Second}))
			must(s.PutHeartbeat(ctx, bus.Heartbeat{Consumer: "h:2:1", Host: "h", PID: 2, Queue: "embedded q", Concurrency: 1, TTL: 10 * time.Second}))
			c.Advance(5 * time.Second)
			must(s.PutHeartbeat(ctx, bus.Heartbeat{Consumer: "h:1:1", Host: "h", PID: 1, Queue: "embedded q", Concurrency: 4, InFlight: 3, Finishing: 2, Waiting: 1, StartedAt: t0, TTL: 10 * time.Second}))
			c.Advance(6 * time.Second)
			hs, err := s.ListHeartbeats(ctx, time.Time{})
			must(err)
			if len(hs) != 2 || hs[0].Consumer != "h:1:1" || hs[0].InFlight != 3 || hs[0].Finishing != 2 || hs[0].Waiting != 1 || !hs[0].StartedAt.Equal(t0) || hs[0].Concurrency != 4 {
				t.Fatalf("heartbeats: %+v", hs)
			}
			if hs[0].Gone(c.Now()) || !hs[1].Gone(c.Now()) {
				t.Errorf("gone: %v %v, want the silent one gone only", hs[0].Gone(c.Now()), hs[1].Gone(c.Now()))
			}
			must(s.StopHeartbeat(ctx, "h:1:1", c.Now()))
			hs, _ = s.ListHeartbeats(ctx, time.Time{})
			if !hs[0].Gone(c.Now()) || hs[0].InFlight != 0 || hs[0].Finishing != 0 || hs[0].Waiting != 0 || hs[0].StoppedAt.IsZero() {
				t.Errorf("stopped worker: %+v", hs[0])
			}
			if hs, _ := s.ListHeartbeats(ctx, c.Now().Add(-time.Second)); len(hs) != 0 {
				t.Errorf("since filter: %+v", hs)
			}
			if err := s.PutHeartbeat(ctx, bus.Heartbeat{}); err == nil {
				t.Error("a heartbeat without a consumer was stored")
			}
		})
	}
}
