package bus_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/testenv"
)

// Lock serializes holders across store handles (as across processes): at
// most one is inside at any time, and every one gets its turn.
func TestLockSerializes(t *testing.T) {
	for _, backend := range []string{"embedded", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			var o bus.Options
			if backend == "postgres" {
				o.DatabaseURL = testenv.Postgres(t)
			} else {
				o.DataRoot = t.TempDir()
			}
			var inside, max, done atomic.Int32
			var wg sync.WaitGroup
			for i := 0; i < 5; i++ {
				st, err := bus.Open(ctx, o)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				wg.Add(1)
				go func() {
					defer wg.Done()
					unlock, err := st.(bus.Locker).Lock(ctx, "pr acme/widget work/t-1", time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					n := inside.Add(1)
					if n > max.Load() {
						max.Store(n)
					}
					time.Sleep(5 * time.Millisecond)
					inside.Add(-1)
					done.Add(1)
					unlock()
				}()
			}
			wg.Wait()
			if max.Load() != 1 || done.Load() != 5 {
				t.Fatalf("max inside %d, done %d", max.Load(), done.Load())
			}
		})
	}
}

// A lease whose holder never released it expires after its ttl (on the
// store's clock); until then others wait, and give up with their context.
func TestLockExpires(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	st, err := bus.Open(ctx, bus.Options{DataRoot: t.TempDir(), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := st.(bus.Locker)
	if _, err := l.Lock(ctx, "x", time.Minute); err != nil { // never released
		t.Fatal(err)
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Lock(short, "x", time.Minute); err == nil {
		t.Fatal("took a held lease")
	}
	other, err := l.Lock(ctx, "y", time.Minute)
	if err != nil {
		t.Fatalf("another name: %v", err)
	}
	other()
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	unlock, err := l.Lock(ctx, "x", time.Minute)
	if err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	unlock()
}
