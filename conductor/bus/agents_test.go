package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/bus/bustest"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/testenv"
)

func i64(v int64) *int64 { return &v }

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var r *refusal.Refusal
	if !errors.As(err, &r) || !errors.Is(err, bus.ErrConflict) {
		t.Fatalf("error = %v, want refusal %s", err, code)
	}
	if string(r.Code) != code || r.Fix == "" {
		t.Fatalf("refusal %q (fix %q), want %q with a fix", r.Code, r.Fix, code)
	}
}

// agentBackends runs fn on the embedded store and on PostgreSQL.
func agentBackends(t *testing.T, fn func(t *testing.T, s bus.AgentStore, c *bustest.Clock)) {
	for _, backend := range []string{"embedded", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			c := bustest.NewClock()
			o := bus.Options{DataRoot: t.TempDir(), Now: c.Now}
			if backend == "postgres" {
				o.DatabaseURL = testenv.Postgres(t)
			}
			s, err := bus.Open(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			a, err := bus.Agents(s)
			if err != nil {
				t.Fatal(err)
			}
			fn(t, a, c)
		})
	}
}

func lease(task, holder, run, token string) bus.LeaseRequest {
	return bus.LeaseRequest{TaskID: task, Holder: holder, Token: token, TTL: time.Minute, Run: bus.Run{ID: run}}
}

func TestLeaseLifecycle(t *testing.T) {
	agentBackends(t, func(t *testing.T, s bus.AgentStore, c *bustest.Clock) {
		ctx := context.Background()
		got, err := s.ClaimLease(ctx, lease("t-1", "alice", "r-a", "tok-a"))
		if err != nil {
			t.Fatal(err)
		}
		if got.Lease.RunID != "r-a" || !got.Lease.ExpiresAt.Equal(c.Now().Add(time.Minute)) {
			t.Fatalf("lease = %+v", got)
		}
		run, err := s.GetRun(ctx, "r-a")
		if err != nil || run.Status != "running" || run.TaskID != "t-1" || run.Session != "alice" {
			t.Fatalf("run = %+v, %v", run, err)
		}
		// Someone else, while the lease lives: refused, naming the holder.
		_, err = s.ClaimLease(ctx, lease("t-1", "bob", "r-b", "tok-b"))
		wantCode(t, err, bus.CodeTaskClaimed)
		if want := "claimed by alice (run r-a)"; !strings.Contains(err.Error(), want) {
			t.Fatalf("refusal %q does not name the holder (%q)", err, want)
		}
		if _, err := s.GetRun(ctx, "r-b"); !errors.Is(err, bus.ErrNotFound) {
			t.Fatalf("refused claim left run r-b: %v", err)
		}
		// The holder renews with its token.
		c.Advance(30 * time.Second)
		got, err = s.ClaimLease(ctx, lease("t-1", "alice", "r-ignored", "tok-a"))
		if err != nil || !got.Renewed || got.Lease.RunID != "r-a" || !got.Lease.ExpiresAt.Equal(c.Now().Add(time.Minute)) {
			t.Fatalf("renew = %+v, %v", got, err)
		}
		// Expired: bob takes over; alice's run is cancelled.
		c.Advance(2 * time.Minute)
		got, err = s.ClaimLease(ctx, lease("t-1", "bob", "r-b", "tok-b"))
		if err != nil || got.Expired == nil || got.Expired.RunID != "r-a" || got.Lease.Holder != "bob" {
			t.Fatalf("reclaim = %+v, %v", got, err)
		}
		if run, _ := s.GetRun(ctx, "r-a"); run.Status != "cancelled" {
			t.Fatalf("old run status %q", run.Status)
		}
		cl, _ := s.GetClaim(ctx, "t-1")
		if cl.Claimant != "r-b" {
			t.Fatalf("claim = %+v", cl)
		}
		// Alice can no longer complete; a wrong token neither.
		comp := bus.LeaseCompletion{RunID: "r-a", Token: "tok-a", Status: "succeeded"}
		_, _, err = s.CompleteLease(ctx, comp)
		wantCode(t, err, bus.CodeNotLeaseHolder)
		_, _, err = s.CompleteLease(ctx, bus.LeaseCompletion{RunID: "r-b", Token: "tok-a", Status: "succeeded"})
		wantCode(t, err, bus.CodeNotLeaseHolder)
		_, _, err = s.CompleteLease(ctx, bus.LeaseCompletion{RunID: "r-none", Token: "x", Status: "succeeded"})
		if !errors.Is(err, bus.ErrNotFound) {
			t.Fatalf("unknown run: %v", err)
		}
		if cl, _ := s.GetClaim(ctx, "t-1"); cl.Completion != nil {
			t.Fatalf("refused completions changed the claim: %+v", cl)
		}
		// Bob completes; the same completion again changes nothing.
		comp = bus.LeaseCompletion{RunID: "r-b", Token: "tok-b", Status: "succeeded", ModelAlias: "claude",
			PromptTokens: i64(100), CompletionTokens: i64(20), TotalTokens: i64(120), PatchID: "abc"}
		cl, repeated, err := s.CompleteLease(ctx, comp)
		if err != nil || repeated || cl.Completion == nil || cl.Completion.RunID != "r-b" || *cl.Completion.TotalTokens != 120 {
			t.Fatalf("complete = %+v %v %v", cl, repeated, err)
		}
		run, _ = s.GetRun(ctx, "r-b")
		if run.Status != "succeeded" || run.ModelAlias != "claude" || *run.TotalTokens != 120 || run.PatchID != "abc" || run.FinishedAt.IsZero() {
			t.Fatalf("finished run = %+v", run)
		}
		c.Advance(time.Second)
		if _, repeated, err = s.CompleteLease(ctx, comp); err != nil || !repeated {
			t.Fatalf("repeat: %v %v", repeated, err)
		}
		comp.Status = "failed"
		_, _, err = s.CompleteLease(ctx, comp)
		wantCode(t, err, bus.CodeCompletionDiffer)
		_, err = s.ClaimLease(ctx, lease("t-1", "carol", "r-c", "tok-c"))
		wantCode(t, err, bus.CodeTaskCompleted)

		// A claim that ended failed was released, as the worker's claims
		// are: the task may be leased again.
		if _, err := s.ClaimLease(ctx, lease("t-f", "erin", "r-f1", "tok-f1")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.CompleteLease(ctx, bus.LeaseCompletion{RunID: "r-f1", Token: "tok-f1", Status: "failed"}); err != nil {
			t.Fatal(err)
		}
		again, err := s.ClaimLease(ctx, lease("t-f", "frank", "r-f2", "tok-f2"))
		if err != nil || again.Lease.Holder != "frank" || again.Lease.RunID != "r-f2" {
			t.Fatalf("claim after a failed completion = %+v, %v", again, err)
		}
		if cl, _ := s.GetClaim(ctx, "t-f"); cl.Claimant != "r-f2" || cl.Completion != nil {
			t.Fatalf("claim = %+v", cl)
		}

		// An expired lease nobody took over can still be completed.
		if _, err := s.ClaimLease(ctx, lease("t-3", "dan", "r-dan", "tok-dan")); err != nil {
			t.Fatal(err)
		}
		c.Advance(time.Hour)
		if _, _, err := s.CompleteLease(ctx, bus.LeaseCompletion{RunID: "r-dan", Token: "tok-dan", Status: "failed"}); err != nil {
			t.Fatalf("completing an expired, untaken lease: %v", err)
		}

		// A conductor worker's claim has no lease: refused, naming the run.
		if _, err := s.ClaimTask(ctx, "t-2", "r-worker"); err != nil {
			t.Fatal(err)
		}
		_, err = s.ClaimLease(ctx, lease("t-2", "bob", "r-d", "tok-d"))
		wantCode(t, err, bus.CodeTaskClaimed)

		evs, err := s.ListEvents(ctx, bus.EventFilter{TaskID: "t-1"})
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, e := range evs {
			kinds = append(kinds, e.Kind)
		}
		if want := "[claimed lease_renewed reclaimed completed]"; fmt.Sprint(kinds) != want {
			t.Fatalf("events %v, want %s", kinds, want)
		}
	})
}

func TestLeaseConcurrentClaims(t *testing.T) {
	agentBackends(t, func(t *testing.T, s bus.AgentStore, c *bustest.Clock) {
		ctx := context.Background()
		const n = 12
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			wins []string
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				who := fmt.Sprint("agent-", i)
				_, err := s.ClaimLease(ctx, lease("t-race", who, "r-"+who, "tok-"+who))
				var r *refusal.Refusal
				switch {
				case err == nil:
					mu.Lock()
					wins = append(wins, who)
					mu.Unlock()
				case errors.As(err, &r) && r.Code == bus.CodeTaskClaimed:
				default:
					t.Errorf("%s: %v", who, err)
				}
			}()
		}
		wg.Wait()
		if len(wins) != 1 {
			t.Fatalf("winners %v, want exactly one", wins)
		}
		runs, err := s.ListRuns(ctx, bus.RunFilter{TaskID: "t-race"})
		if err != nil || len(runs) != 1 || runs[0].ID != "r-"+wins[0] {
			t.Fatalf("runs %+v, %v", runs, err)
		}

		// The lease expires: many take it over at once, one wins.
		c.Advance(2 * time.Minute)
		first := wins[0]
		wins = nil
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				who := fmt.Sprint("late-", i)
				_, err := s.ClaimLease(ctx, lease("t-race", who, "r-"+who, "tok-"+who))
				var r *refusal.Refusal
				switch {
				case err == nil:
					mu.Lock()
					wins = append(wins, who)
					mu.Unlock()
				case errors.As(err, &r) && r.Code == bus.CodeTaskClaimed:
					if !strings.Contains(err.Error(), "claimed by late-") {
						t.Errorf("%s: refusal does not name the new holder: %v", who, err)
					}
				default:
					t.Errorf("%s: %v", who, err)
				}
			}()
		}
		wg.Wait()
		if len(wins) != 1 {
			t.Fatalf("take-over winners %v, want exactly one", wins)
		}
		if run, _ := s.GetRun(ctx, "r-"+first); run.Status != "cancelled" {
			t.Fatalf("the expired lease's run is %q", run.Status)
		}
		cl, err := s.GetClaim(ctx, "t-race")
		if err != nil || cl.Claimant != "r-"+wins[0] {
			t.Fatalf("claim %+v, %v", cl, err)
		}
	})
}
