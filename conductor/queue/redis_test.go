package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/testenv"
)

func dial(t *testing.T, url, consumer string, ttl time.Duration) *Redis {
	t.Helper()
	r, err := DialRedis(context.Background(), RedisOptions{URL: url, Key: "jobs", Consumer: consumer, HeartbeatTTL: ttl, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestRedisTakeAckDelivery(t *testing.T) {
	url := testenv.Redis(t)
	ctx := context.Background()
	q := dial(t, url, "c1", 3*time.Second)
	for i := 0; i < 3; i++ {
		if err := q.Push(ctx, []byte(fmt.Sprintf(`{"n":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		d, err := q.Take(ctx, time.Second)
		if err != nil || d == nil {
			t.Fatalf("take %d: %v %v", i, d, err)
		}
		if want := fmt.Sprintf(`{"n":%d}`, i); string(d.Payload) != want {
			t.Fatalf("take %d: got %s want %s (FIFO)", i, d.Payload, want)
		}
		if d.Attempt != 1 {
			t.Fatalf("attempt = %d, want 1", d.Attempt)
		}
		if err := q.Ack(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	d, err := q.Take(ctx, 100*time.Millisecond)
	if err != nil || d != nil {
		t.Fatalf("empty queue: got %v, %v", d, err)
	}
	qn, pn, dn, err := q.Lengths(ctx)
	if err != nil || qn != 0 || pn != 0 || dn != 0 {
		t.Fatalf("lengths %d %d %d %v, want all 0", qn, pn, dn, err)
	}
}

func TestRedisReapDeadConsumer(t *testing.T) {
	url := testenv.Redis(t)
	ctx := context.Background()
	dead := dial(t, url, "dead", 600*time.Millisecond)
	if err := dead.Push(ctx, []byte(`{"job":"a"}`)); err != nil {
		t.Fatal(err)
	}
	d, err := dead.Take(ctx, time.Second)
	if err != nil || d == nil {
		t.Fatalf("take: %v %v", d, err)
	}
	// Simulate a SIGKILL: the heartbeat stops but the processing list stays.
	close(dead.stop)
	<-dead.done
	live := dial(t, url, "live", 600*time.Millisecond)
	// While the dead consumer's heartbeat has not expired, nothing is reaped.
	if n, err := live.Reap(ctx); err != nil || n != 0 {
		t.Fatalf("early reap moved %d (%v), want 0", n, err)
	}
	time.Sleep(800 * time.Millisecond)
	got, err := live.Take(ctx, time.Second)
	if err != nil || got == nil {
		t.Fatalf("live take after expiry: %v %v", got, err)
	}
	if string(got.Payload) != `{"job":"a"}` || got.Attempt != 2 {
		t.Fatalf("got %s attempt %d, want the reaped job at attempt 2", got.Payload, got.Attempt)
	}
	if err := live.Ack(ctx, got); err != nil {
		t.Fatal(err)
	}
	n, err := live.c.LLen(ctx, "jobs:processing:dead").Result()
	if err != nil || n != 0 {
		t.Fatalf("dead consumer's processing list has %d (%v)", n, err)
	}
}

func TestRedisDeadLetterAfterMaxAttempts(t *testing.T) {
	url := testenv.Redis(t)
	ctx := context.Background()
	q := dial(t, url, "c1", 3*time.Second)
	if err := q.Push(ctx, []byte(`{"poison":true}`)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		d, err := q.Take(ctx, time.Second)
		if err != nil || d == nil {
			t.Fatalf("take %d: %v %v", i, d, err)
		}
		if d.Attempt != i {
			t.Fatalf("take %d: attempt %d", i, d.Attempt)
		}
		if i < q.MaxAttempts() {
			err = q.Requeue(ctx, d, errors.New("boom"))
		} else {
			err = q.Bury(ctx, d, errors.New("boom"))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	dls, err := q.DeadLetters(ctx)
	if err != nil || len(dls) != 1 || dls[0].Error != "boom" || dls[0].Attempts != 3 {
		t.Fatalf("dead letters = %+v, %v", dls, err)
	}
	qn, pn, _, _ := q.Lengths(ctx)
	if qn != 0 || pn != 0 {
		t.Fatalf("queue %d processing %d, want 0 0", qn, pn)
	}
}

func TestRedisConcurrentConsumersTakeEachJobOnce(t *testing.T) {
	url := testenv.Redis(t)
	ctx := context.Background()
	prod := dial(t, url, "", time.Second)
	const jobs = 200
	for i := 0; i < jobs; i++ {
		prod.Push(ctx, []byte(fmt.Sprint(i)))
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for c := 0; c < 8; c++ {
		q := dial(t, url, fmt.Sprintf("c%d", c), 3*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				d, err := q.Take(ctx, 100*time.Millisecond)
				if err != nil {
					t.Error(err)
					return
				}
				if d == nil {
					return
				}
				mu.Lock()
				seen[string(d.Payload)]++
				mu.Unlock()
				q.Ack(ctx, d)
			}
		}()
	}
	wg.Wait()
	if len(seen) != jobs {
		t.Fatalf("saw %d distinct jobs, want %d", len(seen), jobs)
	}
	for p, n := range seen {
		if n != 1 {
			t.Fatalf("job %s taken %d times", p, n)
		}
	}
}

func TestRedisLockIsExclusive(t *testing.T) {
	url := testenv.Redis(t)
	ctx := context.Background()
	a := dial(t, url, "a", time.Second)
	b := dial(t, url, "b", time.Second)
	ok, _, release, err := a.Lock(ctx, "run-1", time.Minute)
	if err != nil || !ok {
		t.Fatalf("a lock: %v %v", ok, err)
	}
	if ok, _, _, err := b.Lock(ctx, "run-1", time.Minute); err != nil || ok {
		t.Fatalf("b took a held lock: %v %v", ok, err)
	}
	release(ctx)
	if ok, _, _, err := b.Lock(ctx, "run-1", time.Minute); err != nil || !ok {
		t.Fatalf("b after release: %v %v", ok, err)
	}
}

func TestRedisUnreachable(t *testing.T) {
	_, err := DialRedis(context.Background(), RedisOptions{URL: "redis://:secretpw@127.0.0.1:1/0", Consumer: "x"})
	if err == nil {
		t.Fatal("dial to a closed port succeeded")
	}
	if got := err.Error(); !strings.Contains(got, "cannot reach") || strings.Contains(got, "secretpw") {
		t.Fatalf("error %q: want 'cannot reach' and no password", got)
	}
}

// TestRedisZombieCannotFinishReapedJob: a consumer whose heartbeat stopped
// loses its job to the reaper; when it finishes late, its ack, requeue,
// release and bury all fail with ErrLeaseLost and change nothing: the job
// is neither acked twice nor duplicated.
func TestRedisZombieCannotFinishReapedJob(t *testing.T) {
	url := testenv.Redis(t)
	ctx := context.Background()
	zombie := dial(t, url, "zombie", 300*time.Millisecond)
	zombie.Push(ctx, []byte(`{"job":"z"}`))
	d, err := zombie.Take(ctx, time.Second)
	if err != nil || d == nil {
		t.Fatalf("take: %v %v", d, err)
	}
	close(zombie.stop) // paused: no heartbeat
	<-zombie.done
	live := dial(t, url, "live", 300*time.Millisecond)
	var got *Delivery
	for got == nil {
		live.lastReap = time.Time{}
		if got, err = live.Take(ctx, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if got.Attempt != 2 {
		t.Fatalf("reaped job at attempt %d, want 2", got.Attempt)
	}
	for name, op := range map[string]func() error{
		"ack":     func() error { return zombie.Ack(ctx, d) },
		"requeue": func() error { return zombie.Requeue(ctx, d, errors.New("late")) },
		"release": func() error { return zombie.Release(ctx, d) },
		"bury":    func() error { return zombie.Bury(ctx, d, errors.New("late")) },
	} {
		if err := op(); !errors.Is(err, ErrLeaseLost) {
			t.Errorf("zombie %s: %v, want ErrLeaseLost", name, err)
		}
	}
	qn, pn, dn, _ := live.Lengths(ctx)
	if qn != 0 || pn != 1 || dn != 0 {
		t.Fatalf("queue %d, live processing %d, dead %d; want 0 1 0", qn, pn, dn)
	}
	if err := live.Ack(ctx, got); err != nil {
		t.Fatal(err)
	}
	if n, _ := live.c.HLen(ctx, "jobs:attempts").Result(); n != 0 {
		t.Fatalf("attempts hash keeps %d entries", n)
	}
}

// TestRedisDeadLettersRetryAndDrop: the operator lists dead letters,
// retries one (its exact payload goes back, attempts reset) and drops one.
func TestRedisDeadLettersRetryAndDrop(t *testing.T) {
	url := testenv.Redis(t)
	ctx := context.Background()
	q := dial(t, url, "c1", 3*time.Second)
	payloads := []string{"{ \"spaced\": 1 }", "not json"}
	for _, p := range payloads {
		q.Push(ctx, []byte(p))
		d, err := q.Take(ctx, time.Second)
		if err != nil || d == nil {
			t.Fatal(d, err)
		}
		if err := q.Bury(ctx, d, errors.New("bad "+p)); err != nil {
			t.Fatal(err)
		}
	}
	dls, err := q.DeadLetters(ctx)
	if err != nil || len(dls) != 2 {
		t.Fatalf("dead letters %+v %v", dls, err)
	}
	if err := q.RetryDead(ctx, "0000000000000000"); !errors.Is(err, ErrNoDeadLetter) {
		t.Fatalf("retry of an unknown id: %v", err)
	}
	if err := q.RetryDead(ctx, dls[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := q.DropDead(ctx, dls[1].ID); err != nil {
		t.Fatal(err)
	}
	d, err := q.Take(ctx, time.Second)
	if err != nil || d == nil || string(d.Payload) != payloads[0] || d.Attempt != 1 || d.ID != dls[0].ID {
		t.Fatalf("retried job = %+v %v, want %q back at attempt 1", d, err, payloads[0])
	}
	if _, _, dn, _ := q.Lengths(ctx); dn != 0 {
		t.Fatalf("%d dead letters left", dn)
	}
}

// TestRedisCloseLeavesConsumerSet: a consumer that exits holding nothing
// is removed from the consumer set; one holding a job stays until reaped.
func TestRedisCloseLeavesConsumerSet(t *testing.T) {
	url := testenv.Redis(t)
	ctx := context.Background()
	idle := dial(t, url, "idle", 3*time.Second)
	busy := dial(t, url, "busy", 3*time.Second)
	busy.Push(ctx, []byte("j"))
	if d, err := busy.Take(ctx, time.Second); err != nil || d == nil {
		t.Fatal(d, err)
	}
	idle.Close()
	busy.Close()
	probe := dial(t, url, "", time.Second)
	got, err := probe.c.SMembers(ctx, "jobs:consumers").Result()
	if err != nil || len(got) != 1 || got[0] != "busy" {
		t.Fatalf("consumers = %q %v, want [busy]", got, err)
	}
}
