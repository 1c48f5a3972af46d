package land

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/policy"
)

// TestPreviewEqualsDryRunAfterResolution: the preview of an open decision
// is what `land --dry-run` says once the decision is resolved with merge by
// the same operator (would land, or the same refusal), and the preview
// changes nothing: refs, worktrees, scratch folders, the decision row.
func TestPreviewEqualsDryRunAfterResolution(t *testing.T) {
	okGate := []policy.GateCommand{{Name: "check", Argv: []string{"sh", "-c", "test -f lib/new.go && echo checked"}, NeedsFiles: true}}
	cases := []struct {
		name  string
		code  string // "" : would land
		setup func(f *fixture) string
	}{
		{"would land", "", func(f *fixture) string {
			f.rules.gate = okGate
			id, _ := f.approvedWith("a", change, "")
			return id
		}},
		{"would land on a moved target", "", func(f *fixture) string {
			f.rules.gate = okGate
			id, _ := f.approvedWith("a", change, "")
			f.commit("refs/heads/main", "", map[string]string{"docs/other.md": "other\n"}, "unrelated")
			return id
		}},
		{"gate fails", "gate-failed", func(f *fixture) string {
			f.rules.gate = []policy.GateCommand{{Name: "ok", Argv: []string{"true"}},
				{Name: "test", Argv: []string{"sh", "-c", "echo line1; echo boom-tail >&2; exit 1"}, NeedsFiles: true}}
			id, _ := f.approvedWith("a", change, "")
			return id
		}},
		{"work ref moved", "work-ref-moved", func(f *fixture) string {
			id, c := f.approvedWith("a", change, "")
			f.commit("refs/heads/work/a", c, map[string]string{"lib/new.go": "package lib // sneaky\n"}, "Change a")
			return id
		}},
		{"patch-id no longer binds", "patch-id-mismatch", func(f *fixture) string {
			id, _ := f.approvedWith("a", change, "")
			calc := strings.Replace(change["lib/calc.go"], "func Sub(a, b int) int {\n\treturn a - b\n}\n\n", "", 1)
			f.commit("refs/heads/main", "", map[string]string{"lib/calc.go": strings.Replace(calc, "// two", "// TWO", 1)}, "nearby")
			return id
		}},
		{"policy", "adds-root-file", func(f *fixture) string {
			id, _ := f.approvedWith("a", map[string]string{"NOTES.txt": "x\n"}, "")
			return id
		}},
	}
	for _, tc := range cases {
		for _, mode := range []string{ModeTree, ModeWorktree} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				f := newFixture(t)
				id := tc.setup(f)
				withMode := func(o *Options) { o.Worktree = mode == ModeWorktree }
				before, dec := f.snapshot(), f.decision(id)

				pv, perr := Preview(ctx, f.optsWith(id, withMode), "pm")
				if after := f.snapshot(); after != before {
					t.Fatalf("the preview changed the repository or the data root:\nbefore\n%s\nafter\n%s", before, after)
				}
				if got := f.decision(id); !reflect.DeepEqual(got, dec) || !got.Open() {
					t.Fatalf("the preview changed the decision row:\nbefore %+v\nafter  %+v", dec, got)
				}
				if _, err := f.store.GetLanding(ctx, id); !errors.Is(err, bus.ErrNotFound) {
					t.Fatalf("the preview wrote a landing row (%v)", err)
				}
				checkCode(t, "preview", pv, perr, tc.code)
				if tc.code == "" && (pv.Status != StatusPreview || pv.Message == "" || pv.PatchID == "" || pv.Tree == "") {
					t.Fatalf("preview: %+v", pv)
				}

				if _, err := f.store.ResolveDecision(ctx, id, bus.OptionMerge, "pm"); err != nil {
					t.Fatal(err)
				}
				dry, derr := f.land(id, func(o *Options) { withMode(o); o.DryRun = true })
				checkCode(t, "dry run", dry, derr, tc.code)
				if tc.code == "" && dry.Status != StatusDryRun {
					t.Fatalf("dry run: %+v", dry)
				}
				if a, b := comparable(pv), comparable(dry); !reflect.DeepEqual(a, b) {
					t.Fatalf("the preview differs from the dry run after resolution:\npreview %+v\ndry run %+v", a, b)
				}
				if (perr == nil) != (derr == nil) || (perr != nil && perr.Error() != derr.Error()) {
					t.Fatalf("errors differ: preview %v, dry run %v", perr, derr)
				}
			})
		}
	}
}

// TestPreviewRefusesWhatIsNotOpen: a preview is for an open merge decision;
// anything else is refused by name, and nothing changes.
func TestPreviewRefusesWhatIsNotOpen(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	merged, _ := f.approvedWith("m", change, bus.OptionMerge)
	rejected, _ := f.approvedWith("r", change, "reject")
	ask, err := f.store.RaiseDecision(ctx, bus.Decision{Kind: "ask", Options: []string{"yes", "no"}, Repo: f.gitdir,
		WorkRef: "work/m", Commit: f.rev("refs/heads/work/m"), Target: "main"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, id, code, says string
	}{
		{"resolved merge", merged, "decision-already-resolved", "land --dry-run " + merged},
		{"rejected", rejected, "decision-already-resolved", `"reject" by pm`},
		{"not a merge decision", ask.ID, "decision-not-merge", `"ask" decision`},
		{"unknown", "d-nosuch", "decision-not-found", "d-nosuch"},
		{"not an id", "../x", "decision-id-invalid", "not a decision id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.snapshot()
			var dec bus.Decision
			if tc.code != "decision-not-found" && tc.code != "decision-id-invalid" {
				dec = f.decision(tc.id)
			}
			out, err := Preview(ctx, f.opts(tc.id), "pm")
			checkCode(t, "preview", out, err, tc.code)
			if !strings.Contains(out.Refusal.Reason+" "+out.Refusal.Fix, tc.says) {
				t.Errorf("the refusal %+v does not say %q", out.Refusal, tc.says)
			}
			if f.snapshot() != before {
				t.Fatal("a refused preview changed the repository")
			}
			if dec.ID != "" && !reflect.DeepEqual(f.decision(tc.id), dec) {
				t.Fatal("a refused preview changed the decision")
			}
		})
	}
}

func (f *fixture) decision(id string) bus.Decision {
	f.t.Helper()
	d, err := f.store.GetDecision(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

func (f *fixture) optsWith(id string, mod func(*Options)) Options {
	o := f.opts(id)
	mod(&o)
	return o
}

func checkCode(t *testing.T, what string, out Outcome, err error, code string) {
	t.Helper()
	var rf *refusal.Refusal
	switch {
	case code == "" && err != nil:
		t.Fatalf("%s: %v (%+v)", what, err, out)
	case code == "":
	case !errors.As(err, &rf) || string(rf.Code) != code:
		t.Fatalf("%s: got %v, want the refusal %s", what, err, code)
	case out.Status != StatusRefused || out.Refusal == nil || string(out.Refusal.Code) != code:
		t.Fatalf("%s: outcome %+v, want refused with %s", what, out, code)
	}
}

// comparable is an outcome without what differs between two runs of the
// same landing: the preview's status name and the gate's timings.
func comparable(o Outcome) Outcome {
	if o.Status == StatusPreview {
		o.Status = StatusDryRun
	}
	o.Gate = append([]sandbox.GateResult(nil), o.Gate...)
	for i := range o.Gate {
		o.Gate[i].Duration = 0
	}
	return o
}
