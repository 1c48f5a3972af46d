package queue

import (
	"context"
	"errors"
	"fmt"
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
	done := make(chan Stats)
	go func() {
		st, err := c.Run(ctx)
		if err != nil {
			t.Error(err)
		}
		done <- st
	}()
	deadline := time.Now().Add(10 * time.Second)
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
	case <-time.After(5 * time.Second):
		t.Fatal("consumer did not stop within the grace period")
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
		{"bad harness", `{"roleId":"x","harness":"gui"}`, "", "harness"},
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
	j, _ := ParseJob([]byte(`{"roleId":"implementer","briefPath":"b.md","resume":true,"runId":"r-9"}`))
	if !j.Resume || j.RunID != "r-9" || !strings.Contains(string(j.Task), `"brief":"b.md"`) {
		t.Fatalf("seed mapping: %+v %s", j, j.Task)
	}
}
