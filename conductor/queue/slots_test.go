package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/testenv"
)

// flakySlots fails its first n calls as an unreachable store would, then
// delegates to a one-slot in-memory semaphore.
type flakySlots struct {
	mu      sync.Mutex
	fail    int
	holder  string
	renewed int
	calls   atomic.Int64
}

func (f *flakySlots) down() bool {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail > 0 {
		f.fail--
		return true
	}
	return false
}

func (f *flakySlots) TryAcquireSlot(ctx context.Context, name, holder string, max int, ttl time.Duration) (bool, error) {
	if f.down() {
		return false, errors.New("dial tcp: connection refused")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holder == "" || f.holder == holder {
		f.holder = holder
		return true, nil
	}
	return false, nil
}

func (f *flakySlots) RenewSlot(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewed++
	return f.holder == holder, nil
}

func (f *flakySlots) ReleaseSlot(ctx context.Context, name, holder string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holder == holder {
		f.holder = ""
	}
	return nil
}

func (f *flakySlots) SlotsInUse(ctx context.Context) ([]SlotUse, error) { return nil, nil }

// TestModelSlotsWaitOutAnOutage: a semaphore store that cannot be reached
// is retried with backoff until it answers; Acquire never fails for it
// (only for the end of ctx). A held slot's lease is renewed while held and
// released once.
func TestModelSlotsWaitOutAnOutage(t *testing.T) {
	f := &flakySlots{fail: 3}
	m := &ModelSlots{Store: f, TTL: 150 * time.Millisecond}
	release, err := m.Acquire(context.Background(), "qwen", 1)
	if err != nil {
		t.Fatalf("acquire through an outage: %v", err)
	}
	if f.calls.Load() != 4 {
		t.Errorf("%d tries, want 3 failed and 1 that took the slot", f.calls.Load())
	}
	// A second acquirer waits while the slot is held, and gives up only
	// with its ctx.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx, "qwen", 1)
		errc <- err
	}()
	for f.calls.Load() < 8 {
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-errc:
		t.Fatalf("the second acquirer returned while the slot was held: %v", err)
	default:
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled acquire: %v, want context.Canceled", err)
	}
	for {
		f.mu.Lock()
		n := f.renewed
		f.mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	release()
	release() // a second call does nothing
	if f.holder != "" {
		t.Errorf("slot still held by %s after release", f.holder)
	}
	if got, err := m.Acquire(context.Background(), "qwen", 0); err != nil || got == nil {
		t.Errorf("unbounded alias: %v", err)
	}
}

// dialSlots connects a Redis semaphore for the test, closed at its end.
func dialSlots(t *testing.T, url string) *RedisSlots {
	t.Helper()
	s, err := DialRedisSlots(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// testAlias names an alias no other test uses on the shared server.
func testAlias() string { return fmt.Sprintf("alias-%d", time.Now().UnixNano()) }

// TestRedisSlots: the Redis semaphore bounds holders, retries take nothing
// twice, expired leases are taken back, and holders are listed.
func TestRedisSlots(t *testing.T) {
	ctx := context.Background()
	s, name := dialSlots(t, testenv.Redis(t)), testAlias()
	try := func(holder string, ttl time.Duration, want bool) {
		t.Helper()
		got, err := s.TryAcquireSlot(ctx, name, holder, 2, ttl)
		if err != nil || got != want {
			t.Fatalf("acquire by %s: %v %v, want %v", holder, got, err, want)
		}
	}
	try("a", time.Minute, true)
	try("b", 300*time.Millisecond, true)
	try("c", time.Minute, false)
	try("a", time.Minute, true) // a's retry: still two holders
	try("c", time.Minute, false)
	use, err := s.SlotsInUse(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var mine *SlotUse
	for i := range use {
		if use[i].Name == name {
			mine = &use[i]
		}
	}
	if mine == nil || mine.Max != 2 || mine.InUse != 2 || fmt.Sprint(mine.Holders) != "[a b]" {
		t.Fatalf("in use: %+v", use)
	}
	// b's lease runs out (Redis's clock): c takes it, b's renewal fails.
	for {
		got, err := s.TryAcquireSlot(ctx, name, "c", 2, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ok, err := s.RenewSlot(ctx, name, "b", time.Minute); err != nil || ok {
		t.Errorf("renew of an expired lease: %v %v", ok, err)
	}
	if ok, err := s.RenewSlot(ctx, name, "a", time.Minute); err != nil || !ok {
		t.Errorf("renew of a live lease: %v %v", ok, err)
	}
	if err := s.ReleaseSlot(ctx, name, "a"); err != nil {
		t.Fatal(err)
	}
	try("d", time.Minute, true)
	try("e", time.Minute, false)
}

// TestRedisSlotsServeWaitersInOrder: Redis keeps the SQL store's queue
// (bus.TestModelSlotsServeWaitersInOrder): the first waiter gets the freed
// slot, a place lapses when its waiter stops asking, and a waiter that
// gives up leaves at once.
func TestRedisSlotsServeWaitersInOrder(t *testing.T) {
	ctx := context.Background()
	url := testenv.Redis(t)
	open := func() *RedisSlots {
		s := dialSlots(t, url)
		s.waitLease = 400 * time.Millisecond
		return s
	}
	s, other := open(), open()
	name := testAlias()
	try := func(s *RedisSlots, holder string, want bool) {
		t.Helper()
		got, err := s.TryAcquireSlot(ctx, name, holder, 1, time.Minute)
		if err != nil || got != want {
			t.Fatalf("acquire by %s: %v %v, want %v", holder, got, err, want)
		}
	}
	release := func(holder string) {
		t.Helper()
		if err := s.ReleaseSlot(ctx, name, holder); err != nil {
			t.Fatal(err)
		}
	}
	try(s, "a", true)
	try(other, "b", false)
	try(s, "c", false)
	use, err := s.SlotsInUse(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range use {
		if u.Name == name && (u.InUse != 1 || u.Waiting != 2) {
			t.Fatalf("in use with two waiting: %+v", u)
		}
	}
	release("a")
	try(s, "c", false) // b came first
	try(other, "b", true)
	release("b")
	try(s, "c", true)

	// d stops asking: its place lapses (Redis's clock), e keeps asking.
	try(s, "d", false)
	try(other, "e", false)
	for end := time.Now().Add(600 * time.Millisecond); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		try(other, "e", false)
	}
	release("c")
	try(other, "e", true)
	release("e")

	// f gives up: g, behind it, gets the slot.
	try(s, "x", true)
	try(s, "f", false)
	try(other, "g", false)
	release("f")
	release("x")
	try(other, "g", true)
}

// TestModelSlotsLongWaiterBeforeNewcomer: a request that has waited long
// (its tries now 250 ms apart) gets the freed slot before one that starts
// asking right after the release; a waiter whose context ends leaves the
// queue as it returns.
func TestModelSlotsLongWaiterBeforeNewcomer(t *testing.T) {
	ctx := context.Background()
	store, alias := dialSlots(t, testenv.Redis(t)), testAlias()
	m := &ModelSlots{Store: store}
	first, err := m.Acquire(ctx, alias, 1)
	if err != nil {
		t.Fatal(err)
	}
	queued := func() int64 {
		n, err := store.c.ZCard(ctx, waitKeys(alias)[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// One waiter gives up: it leaves the queue as Acquire returns.
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { _, err := m.Acquire(cctx, alias, 1); gaveUp <- err }()
	for queued() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("a cancelled Acquire returned no error")
	}
	if n := queued(); n != 0 {
		t.Fatalf("%d waiters queued after the only one gave up", n)
	}

	order := make(chan string, 2)
	acquire := func(who string) {
		rel, err := m.Acquire(ctx, alias, 1)
		if err != nil {
			t.Error(err)
			order <- who
			return
		}
		order <- who
		time.Sleep(50 * time.Millisecond)
		rel()
	}
	go acquire("long waiter")
	for queued() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second) // its tries are now the poll apart
	first()
	go acquire("newcomer")
	if a, b := <-order, <-order; a != "long waiter" || b != "newcomer" {
		t.Fatalf("served %s, then %s: want the long waiter first", a, b)
	}
}

// TestModelSlotsGiveBackWakesLocalWaiters: a slot given back by this
// process goes to its waiter at once, not at the waiter's next poll (here
// the polls never fire: only the give-back can wake it).
func TestModelSlotsGiveBackWakesLocalWaiters(t *testing.T) {
	ctx := context.Background()
	store, alias := dialSlots(t, testenv.Redis(t)), testAlias()
	polls := make(chan time.Duration, 100)
	m := &ModelSlots{Store: store, after: func(d time.Duration) <-chan time.Time {
		select {
		case polls <- d:
		default:
		}
		return nil
	}}
	first, err := m.Acquire(ctx, alias, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		rel, err := m.Acquire(ctx, alias, 1)
		if err == nil {
			rel()
		}
		got <- err
	}()
	<-polls // the waiter found the slot held and waits for a poll that never comes
	first()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// mapSlots is a semaphore whose leases never expire: only a release frees
// a slot.
type mapSlots struct {
	mu      sync.Mutex
	holders map[string]bool
}

func (m *mapSlots) TryAcquireSlot(ctx context.Context, name, holder string, max int, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.holders[holder] {
		return true, nil
	}
	if len(m.holders) >= max {
		return false, nil
	}
	m.holders[holder] = true
	return true, nil
}

func (m *mapSlots) RenewSlot(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.holders[holder], nil
}

func (m *mapSlots) ReleaseSlot(ctx context.Context, name, holder string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.holders, holder)
	return nil
}

func (m *mapSlots) SlotsInUse(ctx context.Context) ([]SlotUse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := SlotUse{Name: "m", Max: 1, InUse: len(m.holders)}
	for h := range m.holders {
		u.Holders = append(u.Holders, h)
	}
	return []SlotUse{u}, nil
}

// TestModelSlotsReclaimDeadHolders: a slot held by a process of this
// machine that is gone (a killed conductor) is freed for the next request
// after deadGrace (the model server has had time to notice the dropped
// connection), not after its lease; a slot whose holder may still live (its
// pid exists, another machine or boot, an old holder name) is waited for.
func TestModelSlotsReclaimDeadHolders(t *testing.T) {
	if bootID() == "" {
		if runtime.GOOS == "linux" {
			t.Fatal("no boot id from /proc/sys/kernel/random/boot_id: dead holders could never be freed")
		}
		t.Skip("only Linux gives a boot id")
	}
	host, _ := os.Hostname()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("%s:%d:1:abcd0123:%s", host, gone.Process.Pid, bootID())
	for _, tc := range []struct {
		name, holder string
		freed        bool
	}{
		{"dead process", dead, true},
		{"live process", fmt.Sprintf("%s:%d:1:abcd0123:%s", host, os.Getppid(), bootID()), false},
		{"another machine", fmt.Sprintf("%s-other:%d:1:abcd0123:%s", host, gone.Process.Pid, bootID()), false},
		{"another boot", fmt.Sprintf("%s:%d:1:abcd0123:%s", host, gone.Process.Pid, "0000000000000000"), false},
		{"old holder name", fmt.Sprintf("%s:%d:1:abcd0123", host, gone.Process.Pid), false},
		{"garbage", "::::", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &mapSlots{holders: map[string]bool{tc.holder: true}}
			m := &ModelSlots{Store: store, Poll: 20 * time.Millisecond}
			// The first try that finds every slot held looks for dead
			// holders: a freed slot is taken long before the first bound,
			// and a held one has been looked at well within the second.
			wait := 300 * time.Millisecond
			if tc.freed {
				wait = time.Minute
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			start := time.Now()
			release, err := m.Acquire(ctx, "m", 1)
			if tc.freed {
				if err != nil {
					t.Fatalf("the dead holder's slot was not freed: %v", err)
				}
				release()
				if d := time.Since(start); d < deadGrace {
					t.Fatalf("the dead holder's slot was freed after %v, before its grace of %v", d, deadGrace)
				}
				return
			}
			if err == nil {
				release()
				t.Fatalf("a slot held by %q was taken", tc.holder)
			}
			if !store.holders[tc.holder] {
				t.Fatalf("holder %q was released", tc.holder)
			}
		})
	}
}
