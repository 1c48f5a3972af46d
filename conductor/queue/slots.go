package queue

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
)

// SlotStore is a counting semaphore with leases, shared by every process
// and host that reaches it: the store's model_slots table (conductor/bus)
// or Redis (RedisSlots). A slot is held by one holder until its lease runs
// out; a holder that died frees its slot when the lease expires.
type SlotStore interface {
	// TryAcquireSlot takes one of max slots of name for holder, leased for
	// ttl; false when all max are held, or when the free ones belong to
	// holders that asked before (waiters are served in the order they came;
	// a waiter keeps its place while it asks again within
	// bus.SlotWaitLease). A holder that already holds a slot of name gets
	// it again (its lease renewed): a retry after a lost answer never takes
	// two.
	TryAcquireSlot(ctx context.Context, name, holder string, max int, ttl time.Duration) (bool, error)
	// RenewSlot extends holder's lease; false when it no longer holds one
	// (it expired and was taken).
	RenewSlot(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	// ReleaseSlot frees holder's slot, or its place in the queue (nothing
	// when it has neither).
	ReleaseSlot(ctx context.Context, name, holder string) error
	// SlotsInUse lists every name with its live (unexpired) holders.
	SlotsInUse(ctx context.Context) ([]SlotUse, error)
}

// SlotUse is one semaphore's state (defined by the store, which
// implements SlotStore too).
type SlotUse = bus.SlotUse

// reclaimEvery is how often a waiting Acquire looks for slots held by
// processes of this machine that are gone.
const reclaimEvery = 2 * time.Second

// deadGrace is how long a holder must have been seen gone before its slot
// is freed. A killed process's connections close as it dies, but the
// model server notices only when it next looks (between tokens, or when
// the scheduler runs its handler): freeing the slot at once would let the
// next request reach the server while it still answers the dead one.
const deadGrace = time.Second

// DefaultSlotTTL is a model slot's lease: renewed every third of it while
// the request runs, so only a holder that died (or lost the store for that
// long) loses it.
const DefaultSlotTTL = 30 * time.Second

// ModelSlots bounds the requests to a model alias across processes and
// hosts (runtask.ModelSlots): each request holds one of the alias's
// maxConcurrent slots in Store for its whole length, its lease renewed
// while it runs. A store that cannot be reached is waited out with backoff
// (logged once per outage), never reported as a model failure.
type ModelSlots struct {
	Store SlotStore
	TTL   time.Duration // lease (default DefaultSlotTTL)
	Log   *slog.Logger
	// Poll is the longest wait between tries while every slot is held
	// (default 250ms; tries start faster, with jitter).
	Poll time.Duration

	seq  atomic.Int64
	mu   sync.Mutex
	down bool // an outage is being waited out (logged once)
	// gone holds when each dead holder (alias, holder) was first seen
	// gone; its slot is freed deadGrace later.
	gone map[[2]string]time.Time
	// kick is closed (and dropped) when this process gives a slot or a
	// place back: its own waiters ask again at once instead of at their
	// next poll, so a freed slot whose first waiter is here is not left
	// idle (waiters on other hosts still poll).
	kick chan struct{}
	// after is time.After (nil); tests make the polls never fire.
	after func(time.Duration) <-chan time.Time
}

// kicked is the channel the next give-back closes.
func (m *ModelSlots) kicked() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.kick == nil {
		m.kick = make(chan struct{})
	}
	return m.kick
}

func (m *ModelSlots) pollAfter(d time.Duration) <-chan time.Time {
	if m.after != nil {
		return m.after(d)
	}
	return time.After(d)
}

// kickWaiters wakes this process's waiters.
func (m *ModelSlots) kickWaiters() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.kick != nil {
		close(m.kick)
		m.kick = nil
	}
}

// NewHolder names one acquisition: host:pid:n:random:boot, so that an
// operator can tell which process holds a slot, and a process on the same
// machine can tell that the holder is gone (reclaimDead). boot is the
// machine's current boot id (empty where the kernel does not say).
func (m *ModelSlots) newHolder() string {
	host, _ := os.Hostname()
	var b [4]byte
	crand.Read(b[:])
	return fmt.Sprintf("%s:%d:%d:%s:%s", host, os.Getpid(), m.seq.Add(1), hex.EncodeToString(b[:]), bootID())
}

// bootID is a short form of the kernel's id of this boot of this machine:
// a pid means the same process only under the same boot id.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	id := strings.ReplaceAll(strings.TrimSpace(string(b)), "-", "")
	if len(id) < 16 {
		return ""
	}
	return id[:16]
})

// deadHolder reports whether holder was named by a process of this boot
// of this machine that no longer exists. A holder from another machine or
// boot, one without a boot id, or one whose pid is alive (perhaps reused
// by another process) is not: its lease frees it.
func deadHolder(holder string) bool {
	f := strings.Split(holder, ":")
	if len(f) != 5 || f[4] == "" || f[4] != bootID() {
		return false
	}
	if host, _ := os.Hostname(); f[0] != host {
		return false
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// reclaimDead frees alias's slots whose holders died on this machine (a
// killed conductor's request) at least deadGrace ago: a resumed run need
// not wait out their leases. It reports whether it freed any, and whether
// a holder seen gone waits out its grace (the caller looks again then).
func (m *ModelSlots) reclaimDead(ctx context.Context, alias string) (freed, pending bool) {
	uses, err := m.Store.SlotsInUse(ctx)
	if err != nil {
		return false, false
	}
	now := time.Now()
	seen := map[[2]string]bool{}
	for _, u := range uses {
		if u.Name != alias {
			continue
		}
		for _, h := range u.Holders {
			if !deadHolder(h) {
				continue
			}
			key := [2]string{alias, h}
			seen[key] = true
			if first, ok := m.firstGone(key, now); !ok || now.Sub(first) < deadGrace {
				pending = true
				continue
			}
			if m.Store.ReleaseSlot(ctx, alias, h) == nil {
				m.log().Info("freed the model slot of a process that is gone", "alias", alias, "holder", h)
				freed = true
			}
		}
	}
	m.mu.Lock()
	for key := range m.gone {
		if key[0] == alias && !seen[key] {
			delete(m.gone, key) // freed, or its lease ran out
		}
	}
	m.mu.Unlock()
	return freed, pending
}

// firstGone reports when key's holder was first seen gone, recording now
// when it was not seen before (ok is then false).
func (m *ModelSlots) firstGone(key [2]string, now time.Time) (first time.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if first, ok = m.gone[key]; ok {
		return first, true
	}
	if m.gone == nil {
		m.gone = map[[2]string]time.Time{}
	}
	m.gone[key] = now
	return now, false
}

func (m *ModelSlots) ttl() time.Duration {
	if m.TTL > 0 {
		return m.TTL
	}
	return DefaultSlotTTL
}

func (m *ModelSlots) log() *slog.Logger {
	if m.Log != nil {
		return m.Log
	}
	return slog.New(slog.DiscardHandler)
}

// outage logs the first failure of an outage and the recovery, once each.
func (m *ModelSlots) outage(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case err != nil && !m.down:
		m.down = true
		m.log().Warn("model slots unreachable; waiting with backoff (the request is not failed)", "err", err)
	case err == nil && m.down:
		m.down = false
		m.log().Info("model slots reachable again")
	}
}

// Acquire waits until it holds one of max slots of alias, or ctx ends (its
// error is then ctx's). The returned release frees the slot; calling it
// again does nothing. max < 1 means unlimited: nothing is held.
func (m *ModelSlots) Acquire(ctx context.Context, alias string, max int) (func(), error) {
	if max < 1 {
		return func() {}, nil
	}
	if alias == "" {
		return nil, errors.New("model slots: empty alias")
	}
	holder, ttl := m.newHolder(), m.ttl()
	poll := m.Poll
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	// A waiter keeps its place in the store's queue only while it asks
	// again within bus.SlotWaitLease.
	poll = min(poll, bus.SlotWaitLease/4)
	bo := Backoff{Min: 200 * time.Millisecond, Max: 10 * time.Second}
	wait := 10 * time.Millisecond
	var nextReclaim time.Time // every slot held: look for dead holders now and then
	for {
		kick := m.kicked() // before the try: a give-back during it wakes the wait
		got, err := m.Store.TryAcquireSlot(ctx, alias, holder, max, ttl)
		if ctx.Err() != nil {
			m.releaseLater(alias, holder) // a take that raced the end
			return nil, ctx.Err()
		}
		m.outage(err)
		var d time.Duration
		switch {
		case err != nil:
			d = bo.Next()
		case got:
			return m.hold(ctx, alias, holder, ttl), nil
		case time.Now().After(nextReclaim):
			nextReclaim = time.Now().Add(reclaimEvery)
			freed, pending := m.reclaimDead(ctx, alias)
			if freed {
				continue
			}
			if pending {
				nextReclaim = time.Now().Add(deadGrace)
			}
			fallthrough
		default:
			bo.Reset()
			d = time.Duration(rand.Int64N(int64(wait))) + wait/2
			wait = min(wait*2, poll)
		}
		select {
		case <-ctx.Done():
			// Its place in the queue goes now; while the store is out of
			// reach, in the background (the place lapses anyway).
			if err != nil {
				go m.releaseLater(alias, holder)
			} else {
				m.releaseLater(alias, holder)
			}
			return nil, ctx.Err()
		case <-kick:
		case <-m.pollAfter(d):
		}
	}
}

// hold renews the lease every third of ttl until release.
func (m *ModelSlots) hold(ctx context.Context, alias, holder string, ttl time.Duration) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		lost := false
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl/3)
			ok, err := m.Store.RenewSlot(rctx, alias, holder, ttl)
			cancel()
			m.outage(err)
			if err == nil && !ok && !lost {
				lost = true
				m.log().Warn("model slot lease lost (the store was out of reach longer than the lease); the request goes on", "alias", alias, "holder", holder)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			<-done
			m.releaseLater(alias, holder)
		})
	}
}

// releaseLater frees holder's slot; on failure the lease frees it.
func (m *ModelSlots) releaseLater(alias, holder string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A release is safe to send twice (the Redis client sends nothing
	// again by itself): one more try on a new connection.
	err := m.Store.ReleaseSlot(ctx, alias, holder)
	if err != nil && ctx.Err() == nil {
		err = m.Store.ReleaseSlot(ctx, alias, holder)
	}
	if err != nil {
		m.log().Warn("release model slot (its lease frees it)", "alias", alias, "err", err)
		return
	}
	m.kickWaiters()
}
