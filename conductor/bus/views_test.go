package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/bus/bustest"
	"github.com/conductor-dev/conductor/conductor/testenv"
)

func TestViews(t *testing.T) {
	for _, backend := range []string{"embedded", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			clock := bustest.NewClock()
			o := bus.Options{DataRoot: t.TempDir(), Now: clock.Now}
			if backend == "postgres" {
				o.DatabaseURL = testenv.Postgres(t)
			}
			ctx := context.Background()
			s, err := bus.Open(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			v, err := bus.ViewsOf(s)
			if err != nil {
				t.Fatal(err)
			}
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			for step := 1; step <= 3; step++ {
				clock.Advance(time.Second)
				must(s.PutCheckpoint(ctx, bus.Checkpoint{RunID: "r-1", Step: step, Files: []bus.FileHash{{Path: "a", Hash: "h"}}, CreatedAt: clock.Now()}))
			}
			stats, err := v.CheckpointStatsAll(ctx)
			must(err)
			if st := stats["r-1"]; st.Count != 3 || st.Step != 3 || !st.LastAt.Equal(clock.Now()) {
				t.Fatalf("stats %+v", st)
			}
			cps, err := v.ListCheckpoints(ctx, "r-1")
			must(err)
			if len(cps) != 3 || cps[0].Step != 1 || cps[2].Files != 1 {
				t.Fatalf("checkpoints %+v", cps)
			}
			n1, err := s.AddNote(ctx, bus.Note{RunID: "r-1", Text: "one"})
			must(err)
			_, err = s.AddNote(ctx, bus.Note{RunID: "r-1", Text: "two"})
			must(err)
			must(s.MarkNoteDelivered(ctx, n1.ID, 2))
			notes, err := v.ListNotes(ctx, "r-1")
			must(err)
			if len(notes) != 2 || notes[0].DeliveredAt != 2 || notes[1].DeliveredAt != 0 || notes[1].Text != "two" {
				t.Fatalf("notes %+v", notes)
			}
			_, err = s.PutVerdict(ctx, bus.Verdict{RunID: "r-1", WorkRef: "work/a", Commit: "c1", Verdict: bus.VerdictRequestChanges, Findings: []string{"x"}})
			must(err)
			_, err = s.PutVerdict(ctx, bus.Verdict{RunID: "r-2", WorkRef: "work/a", Commit: "c2", Verdict: bus.VerdictApprove})
			must(err)
			vs, err := v.ListVerdicts(ctx, "r-1", "")
			must(err)
			if len(vs) != 1 || vs[0].Findings[0] != "x" {
				t.Fatalf("verdicts of r-1 %+v", vs)
			}
			vs, err = v.ListVerdicts(ctx, "", "work/a")
			must(err)
			if len(vs) != 2 || vs[0].Commit != "c2" {
				t.Fatalf("verdicts of work/a %+v", vs)
			}
			d, err := s.RaiseDecision(ctx, bus.Decision{Kind: "ask", Options: []string{"yes"}})
			must(err)
			must(s.PutLanding(ctx, bus.Landing{DecisionID: d.ID, Commit: "c3", Target: "main"}))
			ls, err := v.ListLandings(ctx)
			must(err)
			if len(ls) != 1 || ls[0].Commit != "c3" {
				t.Fatalf("landings %+v", ls)
			}
			_, err = s.Enqueue(ctx, "q", []byte(`{"a":1}`))
			must(err)
			j2, err := s.Enqueue(ctx, "q", nil)
			must(err)
			j, ok, err := s.TakeJob(ctx, "q", "w1", time.Minute)
			must(err)
			if !ok {
				t.Fatal("no job")
			}
			must(s.FinishJob(ctx, j.ID, "w1", bus.JobDead, "boom"))
			_, _, err = s.TakeJob(ctx, "q", "w2", time.Minute)
			must(err)
			jobs, err := v.ListJobs(ctx)
			must(err)
			if len(jobs) != 2 || jobs[0].State() != "dead" || jobs[0].LastError != "boom" || jobs[1].ID != j2.ID || jobs[1].State() != "taken" {
				t.Fatalf("jobs %+v", jobs)
			}
		})
	}
}
