package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/testenv"
)

func TestConsumerRunsEachJobOnceAndBuriesPoison(t *testing.T) {
	url := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := dial(t, url, "w1", 3*time.Second)
	for i := 0; i < 20; i++ {
		q.Push(ctx, []byte(fmt.Sprintf(`{"n":%d}`, i)))
	}
	q.Push(ctx, []byte(`{"poison":1}`))
	var mu sync.Mutex
	ran := map[string]int{}
	var running, peak atomic.Int32
	c := &Consumer{Queue: q, Concurrency: 4, Wait: 100 * time.Millisecond,
		Handle: func(ctx context.Context, stop <-chan struct{}, d *Delivery) error {
			n := running.Add(1)
			defer running.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
			if string(d.Payload) == `{"poison":1}` {
				return errors.New("poison")
			}
			mu.Lock()
			ran[string(d.Payload)]++
			mu.Unlock()
			return nil
		}}
	done := runConsumer(t, ctx, c)
	deadline := time.Now().Add(60 * time.Second)
	for {
		dl, _ := q.DeadLetters(context.Background())
		mu.Lock()
		n := len(ran)
		mu.Unlock()
		if n == 20 && len(dl) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ran %d jobs, %d dead letters", n, len(dl))
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	st := <-done
	if st.Done != 20 || st.Dead != 1 || st.Failed != 2 {
		t.Fatalf("stats %+v, want 20 done, 2 failed retries, 1 dead", st)
	}
	for p, n := range ran {
		if n != 1 {
			t.Fatalf("%s ran %d times", p, n)
		}
	}
	if peak.Load() > 4 {
		t.Fatalf("peak concurrency %d > 4", peak.Load())
	}
	qn, pn, _, _ := q.Lengths(context.Background())
	if qn != 0 || pn != 0 {
		t.Fatalf("queue %d processing %d, want empty", qn, pn)
	}
}

func TestConsumerGracefulShutdownReleasesJob(t *testing.T) {
	url := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	q := dial(t, url, "w1", 3*time.Second)
	q.Push(ctx, []byte(`{"long":1}`))
	started := make(chan struct{})
	c := &Consumer{Queue: q, Wait: 100 * time.Millisecond, Grace: 5 * time.Second,
		Handle: func(jctx context.Context, stop <-chan struct{}, d *Delivery) error {
			close(started)
			select {
			case <-stop: // checkpoint at the step boundary, then hand back
				return ErrInterrupted
			case <-jctx.Done():
				return jctx.Err()
			}
		}}
	done := make(chan Stats)
	go func() { st, _ := c.Run(ctx); done <- st }()
	<-started
	cancel()
	select {
	case st := <-done:
		if st.Released != 1 {
			t.Fatalf("stats %+v, want 1 released", st)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("consumer did not stop after its context was cancelled")
	}
	d, err := q.Take(context.Background(), time.Second)
	if err != nil || d == nil || d.Attempt != 1 {
		t.Fatalf("released job: %+v %v, want it back at attempt 1", d, err)
	}
}

func TestParseJobShapes(t *testing.T) {
	for _, tc := range []struct {
		name, payload, shape, wantErr string
	}{
		{"task", `{"taskVersion":1,"id":"t1"}`, "task", ""},
		{"envelope", `{"runId":"r-1","task":{"taskVersion":1,"id":"t1"}}`, "envelope", ""},
		{"seed camel", `{"roleId":"implementer","briefPath":"b.md","harness":"code","modelAlias":"m","resume":true}`, "seed", ""},
		{"seed snake", `{"role_id":"doc-writer","brief_path":"b.md","harness":"doc","model_alias":"m"}`, "seed", ""},
		{"not json", `nope`, "", "not a JSON object"},
		{"seed without role", `{"briefPath":"b.md"}`, "", "roleId is required"},
		{"unknown field", `{"roleId":"x","colour":"red"}`, "", "colour"},
		{"bad harness", `{"roleId":"x","harness":"gui tool"}`, "", "harnessAlias"},
		// The seed's own payloads (issue 20).
		{"role_dispatch", `{"type":"role_dispatch","roleId":"role-implementer","briefPath":".convoys/x.md","harnessAlias":"code","modelAlias":"ollama-qwen","workspace":"stack-repo","resumeFromCheckpoint":true}`, "seed", ""},
		{"doc-writer example", `{"roleId":"role-doc-writer","harnessAlias":"doc-writer"}`, "seed", ""},
		{"other job type", `{"type":"convoy_close","roleId":"role-implementer"}`, "", `type "convoy_close"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := ParseJob([]byte(tc.payload))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if j.Shape != tc.shape || j.RunID == "" || len(j.Task) == 0 {
				t.Fatalf("job %+v", j)
			}
		})
	}
	d, _ := ParseJob([]byte(`{"type":"role_dispatch","roleId":"role-doc-writer","harnessAlias":"doc-writer","resumeFromCheckpoint":true}`))
	if !d.Resume || !strings.Contains(string(d.Task), `"role":"doc-writer"`) || !strings.Contains(string(d.Task), `"harness":"doc-writer"`) ||
		strings.Contains(string(d.Task), `"bash"`) {
		t.Fatalf("role_dispatch mapping: %+v %s", d, d.Task)
	}
	j, _ := ParseJob([]byte(`{"roleId":"implementer","briefPath":"b.md","resume":true,"runId":"r-9"}`))
	if !j.Resume || j.RunID != "r-9" || !strings.Contains(string(j.Task), `"brief":"b.md"`) {
		t.Fatalf("seed mapping: %+v %s", j, j.Task)
	}
}

// TestConsumerInfraErrorsAreNotAttempts: a handler failing with an
// infrastructure error (the store is down) keeps its job leased and runs
// again after a backoff, however often; the attempt is never counted and
// nothing is dead-lettered. A permanent error dead-letters on the first
// attempt, telling OnDead the reason.
func TestConsumerInfraErrorsAreNotAttempts(t *testing.T) {
	url := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := dial(t, url, "w1", 3*time.Second)
	q.Push(ctx, []byte(`{"job":"flaky-store"}`))
	q.Push(ctx, []byte(`{"job":"bad-input"}`))
	var mu sync.Mutex
	calls := map[string][]int{} // payload → attempts seen
	var dead []string
	c := &Consumer{Queue: q, Concurrency: 2, Wait: 50 * time.Millisecond, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Handle: func(ctx context.Context, stop <-chan struct{}, d *Delivery) error {
			mu.Lock()
			calls[string(d.Payload)] = append(calls[string(d.Payload)], d.Attempt)
			n := len(calls[string(d.Payload)])
			mu.Unlock()
			if string(d.Payload) == `{"job":"bad-input"}` {
				return Permanent(errors.New("unknown role"))
			}
			if n <= 10 { // more failures than MaxAttempts
				return Infra(errors.New("store: connection refused"))
			}
			return nil
		},
		OnDead: func(ctx context.Context, d *Delivery, cause error) error {
			mu.Lock()
			dead = append(dead, string(d.Payload)+": "+cause.Error())
			mu.Unlock()
			return nil
		}}
	done := make(chan Stats)
	go func() { st, _ := c.Run(ctx); done <- st }()
	waitUntil(t, func() bool {
		_, pn, dn, _ := q.Lengths(context.Background())
		mu.Lock()
		defer mu.Unlock()
		return len(calls[`{"job":"flaky-store"}`]) == 11 && pn == 0 && dn == 1
	})
	cancel()
	st := <-done
	if st.Done != 1 || st.Dead != 1 || st.Failed != 0 {
		t.Fatalf("stats %+v, want 1 done, 1 dead, 0 failed", st)
	}
	for _, a := range calls[`{"job":"flaky-store"}`] {
		if a != 1 {
			t.Fatalf("attempts seen %v: an infrastructure error was counted", calls[`{"job":"flaky-store"}`])
		}
	}
	if n := len(calls[`{"job":"bad-input"}`]); n != 1 {
		t.Fatalf("bad input ran %d times, want once", n)
	}
	if len(dead) != 1 || !strings.Contains(dead[0], "unknown role") {
		t.Fatalf("OnDead got %q", dead)
	}
	dls, _ := q.DeadLetters(context.Background())
	if len(dls) != 1 || dls[0].Attempts != 1 || !strings.Contains(dls[0].Error, "unknown role") {
		t.Fatalf("dead letters %+v", dls)
	}
}

// TestConsumerSurvivesRedisRestart: redis-server is killed and restarted
// under a running consumer (twice). The consumer does not exit: it waits
// the outage out, and every job (those queued before the crash survive in
// the append-only file, those pushed after) is done exactly once.
func TestConsumerSurvivesRedisRestart(t *testing.T) {
	srv := testenv.PrivateRedis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := dial(t, srv.URL(), "w1", 2*time.Second)
	prod := dial(t, srv.URL(), "", time.Second)
	var mu sync.Mutex
	ran := map[string]int{}
	c := &Consumer{Queue: q, Concurrency: 2, Wait: 100 * time.Millisecond, BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		Handle: func(ctx context.Context, stop <-chan struct{}, d *Delivery) error {
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			ran[string(d.Payload)]++
			mu.Unlock()
			return nil
		}}
	done := make(chan error, 1)
	go func() { _, err := c.Run(ctx); done <- err }()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ran)
	}
	total := 0
	for round := 0; round < 3; round++ {
		for i := 0; i < 10; i++ {
			for {
				if err := prod.Push(ctx, []byte(fmt.Sprintf(`{"round":%d,"n":%d}`, round, i))); err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			total++
		}
		if round < 2 {
			srv.Kill()
			time.Sleep(300 * time.Millisecond) // the outage
			select {
			case err := <-done:
				t.Fatalf("consumer exited during a Redis outage: %v", err)
			default:
			}
			srv.Start()
		}
	}
	waitUntil(t, func() bool { return count() == total })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for p, n := range ran {
		if n != 1 {
			t.Errorf("%s ran %d times", p, n)
		}
	}
}

// waitUntil polls cond until it holds or the test's own deadline is near.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline, ok := t.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Minute)
	} else {
		deadline = deadline.Add(-10 * time.Second)
	}
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The operator's roleId mappings (conductor.Config.RoleIDs) name the role
// of a seed job; an id they do not name keeps the built-in rule.
func TestParseJobWithRoleIDs(t *testing.T) {
	m := map[string]string{"role-coder": "implementer", "scribe": "doc-writer"}
	for _, tc := range []struct{ payload, role string }{
		{`{"roleId":"role-coder"}`, "implementer"},
		{`{"roleId":"scribe"}`, "doc-writer"},
		{`{"roleId":"role-reviewer"}`, "reviewer"},
		{`{"task":{"roleId":"role-coder"}}`, "implementer"}, // inside an envelope too
	} {
		j, err := ParseJobWith([]byte(tc.payload), m)
		if err != nil {
			t.Fatalf("%s: %v", tc.payload, err)
		}
		var task struct {
			Role string `json:"role"`
		}
		if err := json.Unmarshal(j.Task, &task); err != nil || task.Role != tc.role {
			t.Errorf("%s: role %q (%v), want %q", tc.payload, task.Role, err, tc.role)
		}
	}
	// Without mappings "role-coder" is the role "coder".
	j, err := ParseJob([]byte(`{"roleId":"role-coder"}`))
	if err != nil || !strings.Contains(string(j.Task), `"role":"coder"`) {
		t.Errorf("no mapping: %s (%v)", j.Task, err)
	}
}

// TestConsumerFinishingSlots: a job whose model conversation ended
// (LoopDone) gives its lane to the next job and finishes on a finishing
// slot; with every finishing slot taken, a job keeps its lane. So at most
// Concurrency jobs are ever before their LoopDone, and at most Concurrency
// + Finishing run at once, however slow their finish.
func TestConsumerFinishingSlots(t *testing.T) {
	url := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := dial(t, url, "w1", 3*time.Second)
	const jobs = 7
	for i := range jobs {
		q.Push(ctx, []byte(fmt.Sprintf(`{"n":%d}`, i)))
	}
	var inLoop, running, loopPeak atomic.Int32
	finish := make(chan struct{}) // the finishes wait for it
	c := &Consumer{Queue: q, Concurrency: 2, Finishing: 2, Wait: time.Second,
		Handle: func(ctx context.Context, stop <-chan struct{}, d *Delivery) error {
			running.Add(1)
			defer running.Add(-1)
			raisePeak(&loopPeak, inLoop.Add(1))
			inLoop.Add(-1)
			d.LoopDone()
			d.LoopDone() // a second call changes nothing
			<-finish
			return nil
		}}
	done := runConsumer(t, ctx, c)
	// Two jobs move to the finishing slots, two more keep their lanes:
	// nothing else is taken while their finishes wait.
	waitFor(t, "four jobs running", func() bool { return running.Load() == 4 })
	time.Sleep(300 * time.Millisecond)
	if n := running.Load(); n != 4 {
		t.Fatalf("%d jobs running at once with 2 lanes and 2 finishing slots, want 4", n)
	}
	close(finish)
	waitFor(t, "every job done", func() bool {
		qn, pn, _, _ := q.Lengths(context.Background())
		return qn == 0 && pn == 0 && running.Load() == 0
	})
	cancel()
	if st := <-done; st.Done != jobs {
		t.Fatalf("stats %+v, want %d done", st, jobs)
	}
	if p := loopPeak.Load(); p > 2 {
		t.Fatalf("%d jobs in their model conversation at once, want at most the 2 lanes", p)
	}
}

// TestLaneHandOff: the hand-off's bookkeeping. A LoopDone moves the job to
// a free finishing slot and frees its lane and its hold (the consumer may
// take one more job); with none free the job keeps both; a LoopDone after
// the job ended takes nothing (its lane is the next job's by then); without
// finishing slots nothing moves.
func TestLaneHandOff(t *testing.T) {
	lanes, held, finishing := make(chan struct{}, 2), make(chan struct{}, 3), make(chan struct{}, 1)
	// enter is a job taken (its hold) that takes a lane.
	enter := func(finishing chan struct{}) *lane {
		held <- struct{}{}
		l := &lane{lanes: lanes, held: held, finishing: finishing, stop: make(chan struct{})}
		if err := l.take(context.Background()); err != nil {
			t.Fatal(err)
		}
		return l
	}
	a := enter(finishing)
	b := enter(finishing)
	a.loopDone()
	if len(lanes) != 1 || len(held) != 1 || len(finishing) != 1 {
		t.Fatalf("after a's LoopDone: %d lanes, %d held, %d finishing; want 1, 1 and 1", len(lanes), len(held), len(finishing))
	}
	third := enter(finishing) // the next job takes a's lane
	b.loopDone()              // no finishing slot free: b stays on its lane
	if len(lanes) != 2 || len(held) != 2 || len(finishing) != 1 {
		t.Fatalf("after b's LoopDone: %d lanes, %d held, %d finishing; want 2, 2 and 1", len(lanes), len(held), len(finishing))
	}
	a.done()
	b.done()
	if len(lanes) != 1 || len(held) != 1 || len(finishing) != 0 {
		t.Fatalf("after both ended: %d lanes, %d held, %d finishing; want 1, 1 and 0", len(lanes), len(held), len(finishing))
	}
	third.done()     // it ends without a LoopDone
	c := enter(nil)  // the fourth job takes the lane (no finishing slots)
	third.loopDone() // late: must not take the fourth job's lane
	if len(lanes) != 1 || len(held) != 1 || len(finishing) != 0 {
		t.Fatalf("after a late LoopDone: %d lanes, %d held, %d finishing; want 1, 1 and 0", len(lanes), len(held), len(finishing))
	}
	// A job started ahead that ends before it takes a lane gives back its
	// hold only, and a LoopDone from it moves nothing.
	d := &lane{lanes: lanes, held: held, finishing: finishing, stop: make(chan struct{})}
	held <- struct{}{}
	d.loopDone()
	d.done()
	if len(lanes) != 1 || len(held) != 1 || len(finishing) != 0 {
		t.Fatalf("after a job that took no lane: %d lanes, %d held, %d finishing; want 1, 1 and 0", len(lanes), len(held), len(finishing))
	}
	c.loopDone()
	if len(lanes) != 1 || len(held) != 1 {
		t.Fatal("a LoopDone without finishing slots freed a lane")
	}
	c.done()
	if len(lanes) != 0 || len(held) != 0 {
		t.Fatal("the job's lane was not given back")
	}
}

// TestConsumerPrefetch: with every lane busy, Prefetch more jobs are taken
// (leased here) and none runs before a lane frees; the one that frees is
// given the prefetched job at once, and one more is taken behind it. Every
// job runs once, and never more than Concurrency at a time.
func TestConsumerPrefetch(t *testing.T) {
	url := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := dial(t, url, "w1", 3*time.Second)
	const jobs = 6
	for i := range jobs {
		q.Push(ctx, []byte(fmt.Sprintf(`{"n":%d}`, i)))
	}
	var running, peak atomic.Int32
	var mu sync.Mutex
	started := map[string]int{}
	release := make(chan struct{}) // each receive lets one job end
	c := &Consumer{Queue: q, Concurrency: 2, Prefetch: 1, Wait: time.Second,
		Handle: func(ctx context.Context, stop <-chan struct{}, d *Delivery) error {
			mu.Lock()
			started[d.ID]++
			mu.Unlock()
			raisePeak(&peak, running.Add(1))
			defer running.Add(-1)
			<-release
			return nil
		}}
	done := runConsumer(t, ctx, c)
	lengths := func() (queued, processing int64) {
		qn, pn, _, err := q.Lengths(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return qn, pn
	}
	// Two running, one more taken ahead of a lane.
	waitFor(t, "two jobs running and one prefetched", func() bool {
		qn, pn := lengths()
		return running.Load() == 2 && pn == 3 && qn == jobs-3
	})
	time.Sleep(200 * time.Millisecond)
	if qn, pn := lengths(); running.Load() != 2 || pn != 3 || qn != jobs-3 {
		t.Fatalf("%d running, %d taken, %d queued with 2 lanes and prefetch 1; want 2, 3 and %d", running.Load(), pn, qn, jobs-3)
	}
	if o, want := c.Occupancy(), (Occupancy{Lanes: 2, Waiting: 1}); o != want {
		t.Fatalf("occupancy %+v, want %+v", o, want)
	}
	// One lane frees: the prefetched job starts and the next is taken.
	release <- struct{}{}
	waitFor(t, "the prefetched job started and another taken", func() bool {
		qn, pn := lengths()
		mu.Lock()
		n := len(started)
		mu.Unlock()
		return n == 3 && running.Load() == 2 && pn == 3 && qn == jobs-4
	})
	for range jobs - 1 {
		release <- struct{}{}
	}
	waitFor(t, "every job done", func() bool {
		qn, pn := lengths()
		return qn == 0 && pn == 0 && running.Load() == 0
	})
	cancel()
	if st := <-done; st.Done != jobs {
		t.Fatalf("stats %+v, want %d done", st, jobs)
	}
	if p := peak.Load(); p > 2 {
		t.Fatalf("%d jobs ran at once with 2 lanes, want at most 2", p)
	}
	for id, n := range started {
		if n != 1 {
			t.Fatalf("job %s started %d times, want once", id, n)
		}
	}
}

// TestConsumerPrefetchedJobHandedBackAtShutdown: a job taken ahead of a
// lane and never started goes back to the queue at shutdown, uncounted
// (its next delivery is attempt 1), beside the running job that
// checkpoints and hands itself back. Nothing waits for a lease to run out.
func TestConsumerPrefetchedJobHandedBackAtShutdown(t *testing.T) {
	url := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	q := dial(t, url, "w1", time.Minute)
	q.Push(ctx, []byte(`{"n":1}`))
	q.Push(ctx, []byte(`{"n":2}`))
	var starts atomic.Int32
	c := &Consumer{Queue: q, Concurrency: 1, Prefetch: 1, Wait: 100 * time.Millisecond, Grace: 5 * time.Second,
		Handle: func(jctx context.Context, stop <-chan struct{}, d *Delivery) error {
			starts.Add(1)
			select {
			case <-stop:
				return ErrInterrupted
			case <-jctx.Done():
				return jctx.Err()
			}
		}}
	done := make(chan Stats)
	go func() { st, _ := c.Run(ctx); done <- st }()
	waitFor(t, "one running, one prefetched", func() bool {
		_, pn, _, _ := q.Lengths(context.Background())
		return starts.Load() == 1 && pn == 2
	})
	cancel()
	if st := <-done; st.Released != 2 || st.Done != 0 {
		t.Fatalf("stats %+v, want 2 handed back", st)
	}
	if n := starts.Load(); n != 1 {
		t.Fatalf("%d jobs started, want 1 (the prefetched one never runs after shutdown began)", n)
	}
	requireHandedBack(t, q, 2)
}

// TestConsumerOnceTakesNoneAhead: a --once round takes at most Concurrency
// jobs, whatever Prefetch says: the rest stay queued for the next round.
func TestConsumerOnceTakesNoneAhead(t *testing.T) {
	url := testenv.Redis(t)
	ctx := context.Background()
	q := dial(t, url, "w1", 3*time.Second)
	for i := range 4 {
		q.Push(ctx, []byte(fmt.Sprintf(`{"n":%d}`, i)))
	}
	var ran atomic.Int32
	c := &Consumer{Queue: q, Concurrency: 1, Prefetch: 3, Once: true, Wait: 100 * time.Millisecond,
		Handle: func(ctx context.Context, stop <-chan struct{}, d *Delivery) error {
			ran.Add(1)
			return nil
		}}
	st, err := c.Run(ctx)
	if err != nil || st.Done != 1 || ran.Load() != 1 {
		t.Fatalf("once: stats %+v, %d ran, err %v; want 1 done", st, ran.Load(), err)
	}
	qn, pn, _, err := q.Lengths(ctx)
	if err != nil || qn != 3 || pn != 0 {
		t.Fatalf("after the round: %d queued, %d taken (%v); want 3 and 0", qn, pn, err)
	}
}

// runConsumer runs c until ctx ends; its stats come on the channel.
func runConsumer(t *testing.T, ctx context.Context, c *Consumer) <-chan Stats {
	done := make(chan Stats, 1)
	go func() {
		st, err := c.Run(ctx)
		if err != nil {
			t.Error(err)
		}
		done <- st
	}()
	return done
}

// raisePeak sets peak to n when n is higher.
func raisePeak(peak *atomic.Int32, n int32) {
	for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
	}
}

// waitFor polls cond until it holds (failing only after a minute: a
// condition that never comes, not a slow machine).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A consumer with StartAhead starts a prefetched job's handler before a
// lane frees: its work before Delivery.Lane runs beside the lanes' jobs,
// its work after it never does (at most Concurrency at once), and every
// job runs once.
func TestConsumerStartAhead(t *testing.T) {
	url := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := dial(t, url, "w1", 3*time.Second)
	const jobs = 5
	for i := range jobs {
		q.Push(ctx, []byte(fmt.Sprintf(`{"n":%d}`, i)))
	}
	var inLane, peak, ahead atomic.Int32
	var mu sync.Mutex
	ran := map[string]int{}
	release := make(chan struct{}) // each receive lets one job end
	c := &Consumer{Queue: q, Concurrency: 1, Prefetch: 1, StartAhead: true, Wait: time.Second,
		Handle: func(ctx context.Context, stop <-chan struct{}, d *Delivery) error {
			ahead.Add(1) // the work before the lane
			if err := d.Lane(ctx); err != nil {
				return err
			}
			ahead.Add(-1)
			if err := d.Lane(ctx); err != nil { // a second call: the lane is held
				return err
			}
			mu.Lock()
			ran[d.ID]++
			mu.Unlock()
			raisePeak(&peak, inLane.Add(1))
			defer inLane.Add(-1)
			<-release
			return nil
		}}
	done := runConsumer(t, ctx, c)
	waitFor(t, "one job in its lane and the prefetched one past its start", func() bool {
		return inLane.Load() == 1 && ahead.Load() == 1
	})
	for range jobs {
		release <- struct{}{}
	}
	waitFor(t, "every job done", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == jobs
	})
	cancel()
	st := <-done
	if st.Done != jobs || peak.Load() != 1 {
		t.Fatalf("stats %+v, peak %d in lanes; want %d done and never more than 1 in a lane", st, peak.Load(), jobs)
	}
	for id, n := range ran {
		if n != 1 {
			t.Fatalf("job %s ran %d times", id, n)
		}
	}
}

// A job started ahead that is still waiting for its lane when shutdown
// begins goes back uncounted; one that ends without taking a lane (a run
// already finished) gives back its place.
func TestConsumerStartAheadShutdownAndNoLane(t *testing.T) {
	url := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	q := dial(t, url, "w1", time.Minute)
	for _, p := range []string{`{"skip":1}`, `{"skip":2}`, `{"n":1}`, `{"n":2}`} {
		q.Push(ctx, []byte(p))
	}
	var inLane, waiting atomic.Int32
	c := &Consumer{Queue: q, Concurrency: 1, Prefetch: 1, StartAhead: true, Wait: 100 * time.Millisecond, Grace: 5 * time.Second,
		Handle: func(jctx context.Context, stop <-chan struct{}, d *Delivery) error {
			if strings.Contains(string(d.Payload), "skip") {
				return nil // acknowledged without a lane
			}
			waiting.Add(1)
			if err := d.Lane(jctx); err != nil {
				waiting.Add(-1)
				return err
			}
			waiting.Add(-1)
			inLane.Add(1)
			select {
			case <-stop:
				return ErrInterrupted
			case <-jctx.Done():
				return jctx.Err()
			}
		}}
	done := make(chan Stats)
	go func() { st, _ := c.Run(ctx); done <- st }()
	waitFor(t, "one in its lane, one waiting for it", func() bool {
		return inLane.Load() == 1 && waiting.Load() == 1
	})
	cancel()
	if st := <-done; st.Released != 2 || st.Done != 2 {
		t.Fatalf("stats %+v, want 2 done (no lane needed) and 2 handed back", st)
	}
	if n := inLane.Load(); n != 1 {
		t.Fatalf("%d jobs reached a lane, want 1 (none after shutdown began)", n)
	}
	requireHandedBack(t, q, 2)
}

// Lanes go to jobs started ahead in the order they were taken, even when a
// later job is ready first.
func TestConsumerStartAheadKeepsTakeOrder(t *testing.T) {
	url := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := dial(t, url, "w1", 3*time.Second)
	for i := range 3 {
		q.Push(ctx, []byte(fmt.Sprintf(`{"n":%d}`, i)))
	}
	var mu sync.Mutex
	var order []string
	ready := make(chan struct{}, 3) // a job's work before its lane is done
	firstMayGo := make(chan struct{})
	c := &Consumer{Queue: q, Concurrency: 1, Prefetch: 2, StartAhead: true, Wait: time.Second,
		Handle: func(ctx context.Context, stop <-chan struct{}, d *Delivery) error {
			if strings.Contains(string(d.Payload), `"n":0`) {
				<-firstMayGo // the first job's lookups are the slowest
			}
			ready <- struct{}{}
			if err := d.Lane(ctx); err != nil {
				return err
			}
			mu.Lock()
			order = append(order, string(d.Payload))
			mu.Unlock()
			return nil
		}}
	done := runConsumer(t, ctx, c)
	<-ready // the second and third jobs are ready, waiting for their turn
	<-ready
	close(firstMayGo)
	<-ready
	waitFor(t, "three jobs in their lanes", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 3
	})
	cancel()
	<-done
	want := []string{`{"n":0}`, `{"n":1}`, `{"n":2}`}
	if !slices.Equal(order, want) {
		t.Fatalf("lanes went to %v, want the take order %v", order, want)
	}
}

// requireHandedBack checks, after a shutdown, that n jobs are queued again,
// none is left taken, and each comes back at attempt 1 (uncounted).
func requireHandedBack(t *testing.T, q *Redis, n int64) {
	t.Helper()
	qn, pn, _, err := q.Lengths(context.Background())
	if err != nil || qn != n || pn != 0 {
		t.Fatalf("after shutdown: %d queued, %d taken (%v); want %d and 0", qn, pn, err, n)
	}
	for range n {
		d, err := q.Take(context.Background(), time.Second)
		if err != nil || d == nil || d.Attempt != 1 {
			t.Fatalf("handed-back job: %+v %v, want it back at attempt 1", d, err)
		}
	}
}

// Occupancy says where the jobs are: one on its lane, one finishing
// beside the lanes, one started ahead and waiting for a lane. Lanes never
// counts the other two, so a worker's heartbeat never reports more than its
// concurrency in flight; a consumer waiting on an empty queue has none.
func TestConsumerOccupancy(t *testing.T) {
	url := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := dial(t, url, "w1", time.Minute)
	for _, p := range []string{`{"n":"finishing"}`, `{"n":"lane"}`, `{"n":"ahead"}`} {
		q.Push(ctx, []byte(p))
	}
	var started, finishing, inLane, waiting, ended atomic.Int32
	release := make(chan struct{})
	c := &Consumer{Queue: q, Concurrency: 1, Finishing: 1, Prefetch: 1, StartAhead: true, Wait: 100 * time.Millisecond, Grace: 5 * time.Second,
		Handle: func(jctx context.Context, stop <-chan struct{}, d *Delivery) error {
			defer ended.Add(1)
			started.Add(1)
			waiting.Add(1)
			if err := d.Lane(jctx); err != nil {
				waiting.Add(-1)
				return err
			}
			waiting.Add(-1)
			if strings.Contains(string(d.Payload), "finishing") {
				d.LoopDone() // off its lane, onto the finishing slot
				finishing.Add(1)
				defer finishing.Add(-1)
			} else {
				inLane.Add(1)
				defer inLane.Add(-1)
			}
			<-release
			return nil
		}}
	if o := c.Occupancy(); o != (Occupancy{}) {
		t.Fatalf("occupancy %+v before Run", o)
	}
	done := runConsumer(t, ctx, c)
	waitFor(t, "a job finishing, one in its lane and one waiting ahead", func() bool {
		return finishing.Load() == 1 && inLane.Load() == 1 && waiting.Load() == 1
	})
	if o, want := c.Occupancy(), (Occupancy{Lanes: 1, Finishing: 1, Waiting: 1}); o != want {
		t.Fatalf("occupancy %+v with %d handlers running, want %+v", o, started.Load(), want)
	}
	close(release)
	waitFor(t, "every job done", func() bool { return ended.Load() == 3 })
	// The queue is empty: the consumer waits in its take, holding no job.
	waitFor(t, "nothing on a lane, finishing or waiting", func() bool { return c.Occupancy() == Occupancy{} })
	time.Sleep(300 * time.Millisecond) // a few empty takes (Wait is 100 ms)
	if o := c.Occupancy(); o != (Occupancy{}) {
		t.Fatalf("occupancy %+v while the queue is empty", o)
	}
	cancel()
	if st := <-done; st.Done != 3 {
		t.Fatalf("stats %+v, want 3 done", st)
	}
	if o := c.Occupancy(); o != (Occupancy{}) {
		t.Fatalf("occupancy %+v after Run", o)
	}
}
