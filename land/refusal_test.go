package land

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/policy"
)

func TestLandRefusals(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		code  string
		setup func(f *fixture) string
	}{
		{"unknown decision", "decision-not-found", func(f *fixture) string {
			f.approved("a", change)
			return "d-nope"
		}},
		{"open decision", "decision-not-resolved", func(f *fixture) string {
			_, c := f.approved("a", change)
			return f.decide("a", c, "main", "run-a", "")
		}},
		{"rejected decision", "decision-not-merge", func(f *fixture) string {
			_, c := f.approved("a", change)
			return f.decide("a", c, "main", "run-a", bus.OptionReject)
		}},
		{"no verdict", "no-approval", func(f *fixture) string {
			c := f.commit("refs/heads/work/b", f.rev("refs/heads/main"), change, "unreviewed")
			return f.decide("b", c, "main", "", bus.OptionMerge)
		}},
		{"changes requested", "no-approval", func(f *fixture) string {
			id, c := f.approved("a", change)
			if _, err := f.store.PutVerdict(ctx, bus.Verdict{WorkRef: "work/a", Commit: c, PatchID: "p",
				Verdict: bus.VerdictRequestChanges}); err != nil {
				t.Fatal(err)
			}
			return id
		}},
		{"changes requested under the full ref name", "no-approval", func(f *fixture) string {
			id, c := f.approved("a", change)
			if _, err := f.store.PutVerdict(ctx, bus.Verdict{WorkRef: "refs/heads/work/a", Commit: c, PatchID: "p",
				Verdict: bus.VerdictRequestChanges}); err != nil {
				t.Fatal(err)
			}
			return id
		}},
		{"verdict for another commit", "verdict-stale", func(f *fixture) string {
			_, c := f.approved("a", change)
			c2 := f.commit("refs/heads/work/a", c, map[string]string{"lib/more.go": "package lib\n"}, "more")
			return f.decide("a", c2, "main", "run-a", bus.OptionMerge)
		}},
		{"work ref moved: same message", "work-ref-moved", func(f *fixture) string {
			id, c := f.approved("a", change)
			f.commit("refs/heads/work/a", c, map[string]string{"lib/new.go": "package lib // sneaky\n"},
				"Change a\n\nRun-Id: run-a\nTask-Id: t-a\nPatch-Id: x\nModel: fake")
			return id
		}},
		{"work ref moved: whitespace only", "work-ref-moved", func(f *fixture) string {
			id, _ := f.approved("a", change)
			ws := map[string]string{}
			for k, v := range change {
				ws[k] = v
			}
			ws["lib/new.go"] = "package lib \n"
			f.commit("refs/heads/work/a", f.rev("refs/heads/main"), ws, "Change a")
			return id
		}},
		{"work ref deleted", "work-ref-moved", func(f *fixture) string {
			id, _ := f.approved("a", change)
			f.git("update-ref", "-d", "refs/heads/work/a")
			return id
		}},
		{"whitespace change bound to the old patch-id", "patch-id-mismatch", func(f *fixture) string {
			// The verdict names the commit but carries the patch-id of
			// what was reviewed before a whitespace-only edit.
			base := f.rev("refs/heads/main")
			reviewed := f.commit("refs/heads/work/w", base, change, "reviewed")
			ws := map[string]string{}
			for k, v := range change {
				ws[k] = v
			}
			ws["lib/new.go"] = "package  lib\n"
			c := f.commit("refs/heads/work/w", base, ws, "edited")
			if _, err := f.store.PutVerdict(ctx, bus.Verdict{WorkRef: "work/w", Commit: c, PatchID: f.patchID(base, reviewed),
				Verdict: bus.VerdictApprove}); err != nil {
				t.Fatal(err)
			}
			return f.decide("w", c, "main", "", bus.OptionMerge)
		}},
		{"target changed the context", "patch-id-mismatch", func(f *fixture) string {
			id, _ := f.approved("a", change)
			calc := strings.Replace(change["lib/calc.go"], "func Sub(a, b int) int {\n\treturn a - b\n}\n\n", "", 1)
			f.commit("refs/heads/main", "", map[string]string{"lib/calc.go": strings.Replace(calc, "// two", "// TWO", 1)}, "nearby")
			return id
		}},
		{"root file", "adds-root-file", func(f *fixture) string {
			id, _ := f.approved("a", map[string]string{"NOTES.txt": "x\n"})
			return id
		}},
		{"top-level dir", "adds-top-level-dir", func(f *fixture) string {
			id, _ := f.approved("a", map[string]string{"tools/x.sh": "echo\n"})
			return id
		}},
		{"forbidden path", "forbidden-path", func(f *fixture) string {
			id, _ := f.approved("a", map[string]string{"src/keep.txt": "changed\n"})
			return id
		}},
		{"forbidden path, other case", "forbidden-path", func(f *fixture) string {
			id, _ := f.approved("a", map[string]string{"SRC/x.txt": "x\n", "src/keep.txt": ""})
			return id
		}},
		{"symlink into forbidden path", "forbidden-path", func(f *fixture) string {
			id, _ := f.approved("a", map[string]string{"lib/link": "-> ../src/keep.txt"})
			return id
		}},
		{"target not allowed", "target-not-allowed", func(f *fixture) string {
			_, c := f.approved("a", change)
			f.git("update-ref", "refs/heads/release", f.rev("refs/heads/main"))
			return f.decide("a", c, "release", "run-a", bus.OptionMerge)
		}},
		{"target missing", "target-not-found", func(f *fixture) string {
			_, c := f.approved("a", change)
			return f.decide("a", c, "nosuch", "run-a", bus.OptionMerge)
		}},
		{"conflict", "conflict", func(f *fixture) string {
			id, _ := f.approved("a", change)
			f.commit("refs/heads/main", "", map[string]string{"lib/calc.go": "package lib\n\nfunc Add(a, b int) int {\n\treturn b + a\n}\n\nfunc Mul() {}\n"}, "clash")
			return id
		}},
		{"gate fails", "gate-failed", func(f *fixture) string {
			f.rules.gate = []policy.GateCommand{{Name: "ok", Argv: []string{"true"}},
				{Name: "test", Argv: []string{"sh", "-c", "echo line1; echo boom-tail >&2; exit 1"}, NeedsFiles: true}}
			id, _ := f.approved("a", change)
			return id
		}},
		{"gate times out", "gate-failed", func(f *fixture) string {
			f.rules.gate = []policy.GateCommand{{Name: "hang", Argv: []string{"sh", "-c", "sleep 30 & sleep 30"}, Timeout: 300e6}}
			id, _ := f.approved("a", change)
			return id
		}},
		{"target checked out and dirty", "target-checked-out-dirty", func(f *fixture) string {
			id, _ := f.approved("a", change)
			f.git("symbolic-ref", "HEAD", "refs/heads/main")
			f.runIn(f.dir, nil, "git", "reset", "-q", "--hard")
			if err := os.WriteFile(filepath.Join(f.dir, "lib", "calc.go"), []byte("local edit\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return id
		}},
		{"untracked file in the way", "target-checked-out-dirty", func(f *fixture) string {
			id, _ := f.approved("a", change)
			f.git("symbolic-ref", "HEAD", "refs/heads/main")
			f.runIn(f.dir, nil, "git", "reset", "-q", "--hard")
			if err := os.WriteFile(filepath.Join(f.dir, "lib", "new.go"), []byte("mine\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return id
		}},
	}
	for _, tc := range cases {
		for _, mode := range []string{ModeTree, ModeWorktree} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t)
				id := tc.setup(f)
				main, work := f.rev("refs/heads/main"), f.rev("refs/heads/work/a")
				before := f.snapshot()
				for _, dry := range []bool{true, false} {
					out, err := f.land(id, func(o *Options) { o.Worktree = mode == ModeWorktree; o.DryRun = dry })
					var rf *refusal.Refusal
					if !errors.As(err, &rf) || string(rf.Code) != tc.code {
						t.Fatalf("dry=%v: got %v (%+v), want refusal %s", dry, err, out, tc.code)
					}
					if rf.Reason == "" || rf.Fix == "" || strings.Contains(rf.Reason, "\n") {
						t.Errorf("refusal needs a one-line reason and a fix: %+v", rf)
					}
					if js, _ := json.Marshal(out); out.Status != StatusRefused || !strings.Contains(string(js), `"code":"`+tc.code+`"`) {
						t.Errorf("outcome as JSON %s", js)
					}
					if after := f.snapshot(); after != before {
						t.Fatalf("refusal changed the repository:\n%s\n---\n%s", before, after)
					}
					if f.rev("refs/heads/main") != main || f.rev("refs/heads/work/a") != work {
						t.Fatal("refusal moved a ref")
					}
					if _, err := f.store.GetLanding(ctx, id); !errors.Is(err, bus.ErrNotFound) {
						t.Fatalf("refusal recorded a landing: %v", err)
					}
				}
				if tc.code == "gate-failed" && tc.name == "gate fails" {
					_, err := f.land(id, nil)
					var rf *refusal.Refusal
					errors.As(err, &rf)
					if !strings.Contains(rf.Detail, "boom-tail") || !strings.Contains(rf.Reason, "test") {
						t.Errorf("gate-failed lacks the output tail: %+v", rf)
					}
				}
			})
		}
	}
}
