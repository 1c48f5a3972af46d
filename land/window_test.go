package land

import (
	"context"
	"errors"
	"testing"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/policy"
)

// TestGateWindow: what changes while the gate runs (a request-changes
// verdict, a push to the work ref) is seen before the target moves, even
// when it happens right before the compare-and-swap: the landing is refused
// and nothing is committed.
func TestGateWindow(t *testing.T) {
	ctx := context.Background()
	gate := []policy.GateCommand{{Name: "unit", Argv: []string{"true"}}}
	for _, tc := range []struct {
		name, step, code string
		gate             []policy.GateCommand
		mutate           func(f *fixture, c string)
	}{
		{"request-changes during the gate", "gate", "verdict-stale", gate, func(f *fixture, c string) {
			if _, err := f.store.PutVerdict(ctx, bus.Verdict{RunID: "run-a", WorkRef: "work/a", Commit: c, PatchID: f.patchID(f.rev("refs/heads/main"), c),
				Verdict: bus.VerdictRequestChanges, Reviewer: "late"}); err != nil {
				t.Fatal(err)
			}
		}},
		{"request-changes under the full ref name", "gate", "verdict-stale", gate, func(f *fixture, c string) {
			if _, err := f.store.PutVerdict(ctx, bus.Verdict{RunID: "run-a", WorkRef: "refs/heads/work/a", Commit: c, PatchID: "p",
				Verdict: bus.VerdictRequestChanges, Reviewer: "late"}); err != nil {
				t.Fatal(err)
			}
		}},
		{"an approval of another commit during the gate", "gate", "verdict-stale", gate, func(f *fixture, c string) {
			if _, err := f.store.PutVerdict(ctx, bus.Verdict{RunID: "run-a", WorkRef: "work/a", Commit: f.rev("refs/heads/main"), PatchID: "p",
				Verdict: bus.VerdictApprove, Reviewer: "late"}); err != nil {
				t.Fatal(err)
			}
		}},
		{"push to the work ref during the gate", "gate", "work-ref-moved", gate, func(f *fixture, c string) {
			f.commit("refs/heads/work/a", c, map[string]string{"lib/late.go": "package lib\n"}, "late")
		}},
		{"work ref deleted during the gate", "gate", "work-ref-moved", gate, func(f *fixture, c string) {
			f.git("update-ref", "-d", "refs/heads/work/a")
		}},
		{"push to the work ref right before the compare-and-swap", "commit", "work-ref-moved", gate, func(f *fixture, c string) {
			f.commit("refs/heads/work/a", c, map[string]string{"lib/late.go": "package lib\n"}, "late")
		}},
		{"push right before the compare-and-swap, no gate", "commit", "work-ref-moved", nil, func(f *fixture, c string) {
			f.commit("refs/heads/work/a", c, map[string]string{"lib/late.go": "package lib\n"}, "late")
		}},
		{"request-changes right before the compare-and-swap", "commit", "verdict-stale", gate, func(f *fixture, c string) {
			if _, err := f.store.PutVerdict(ctx, bus.Verdict{RunID: "run-a", WorkRef: "work/a", Commit: c, PatchID: "p",
				Verdict: bus.VerdictRequestChanges, Reviewer: "late"}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.rules = testRules{Landing: defaultLanding(t), gate: tc.gate}
			id, c := f.approved("a", change)
			main, notes := f.rev("refs/heads/main"), f.rev(NotesRef)
			_, err := f.land(id, func(o *Options) {
				o.Fault = func(step string) {
					if step == tc.step {
						tc.mutate(f, c)
					}
				}
			})
			var rf *refusal.Refusal
			if !errors.As(err, &rf) || string(rf.Code) != tc.code {
				t.Fatalf("land: %v, want refusal %s", err, tc.code)
			}
			if got := f.rev("refs/heads/main"); got != main {
				t.Errorf("main moved: %s -> %s", main, got)
			}
			if got := f.rev(NotesRef); got != notes {
				t.Errorf("notes moved: %q -> %q", notes, got)
			}
			if _, err := f.store.GetLanding(ctx, id); !errors.Is(err, bus.ErrNotFound) {
				t.Errorf("landing recorded: %v", err)
			}
		})
	}
}

// TestGateWindowTagWorkRef: a work ref that names an annotated tag of the
// approved commit is verified by its own value (the tag's id) and lands.
func TestGateWindowTagWorkRef(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.rules = testRules{Landing: defaultLanding(t), gate: []policy.GateCommand{{Name: "unit", Argv: []string{"true"}}}}
	_, c := f.approved("a", change)
	f.git("tag", "-a", "-m", "reviewed", "reviewed-a", c)
	pid := f.patchID(f.rev("refs/heads/main"), c)
	if _, err := f.store.PutVerdict(ctx, bus.Verdict{RunID: "run-a", WorkRef: "refs/tags/reviewed-a", Commit: c, PatchID: pid,
		Verdict: bus.VerdictApprove, Reviewer: "rev"}); err != nil {
		t.Fatal(err)
	}
	d, err := f.store.RaiseDecision(ctx, bus.Decision{Kind: bus.KindMergeProtected, RaisedBy: "review", Repo: f.gitdir,
		WorkRef: "refs/tags/reviewed-a", Commit: c, Target: "main", RunID: "run-a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.ResolveDecision(ctx, d.ID, bus.OptionMerge, "pm"); err != nil {
		t.Fatal(err)
	}
	out, err := f.land(d.ID, nil)
	if err != nil || out.Status != StatusLanded {
		t.Fatalf("land: %+v, %v", out, err)
	}
}
