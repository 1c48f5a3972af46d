package land

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/policy"
)

var change = map[string]string{
	"lib/calc.go":   "package lib\n\nfunc Add(a, b int) int {\n\treturn a + b\n}\n\nfunc Sub(a, b int) int {\n\treturn a - b\n}\n\n// one\n// two\n// three\n// four\n// five\n// six\n// seven\n",
	"lib/new.go":    "package lib\n",
	"docs/guide.md": "",
}

func TestLandHappyPath(t *testing.T) {
	for _, mode := range []string{ModeTree, ModeWorktree} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t)
			marker := filepath.Join(t.TempDir(), "gate.log")
			f.rules.gate = []policy.GateCommand{{Name: "check", Argv: []string{"sh", "-c",
				`echo "$CONDUCTOR_LAND_TREE $CONDUCTOR_LAND_MODE $(ls | tr '\n' ' ')" >> ` + marker +
					// no way back to the repository, no credential, a scratch HOME
					` && test ! -e .git && ! git rev-parse --git-dir 2>/dev/null && ! env | grep -q s3cret && test "$HOME" != /root-home`}}}
			// main moves on elsewhere after the work was based.
			id, approvedCommit := f.approved("a", change)
			f.commit("refs/heads/main", "", map[string]string{"docs/other.md": "other\n"}, "unrelated")
			tip := f.rev("refs/heads/main")

			out, err := f.land(id, func(o *Options) {
				o.Worktree = mode == ModeWorktree
				o.Getenv = func(k string) string {
					switch k {
					case "HOME":
						return "/root-home"
					case "GITEA_TOKEN", "OPENAI_API_KEY":
						return "s3cret"
					}
					return os.Getenv(k)
				}
			})
			if err != nil {
				t.Fatalf("land: %v", err)
			}
			if out.Status != StatusLanded || out.Mode != mode {
				t.Fatalf("outcome %+v", out)
			}
			head := f.rev("refs/heads/main")
			if head != out.Commit {
				t.Fatalf("main at %s, outcome says %s", head, out.Commit)
			}
			if p := f.rev(head + "^"); p != tip {
				t.Fatalf("parent %s, want old tip %s", p, tip)
			}
			for _, ref := range []string{"refs/heads/main", NotesRef} {
				if got, want := f.git("reflog", "-1", "--format=%gn <%ge> %gs", ref), "conductor <conductor@localhost> conductor land "+id; got != want {
					t.Fatalf("%s reflog: %q, want %q", ref, got, want)
				}
			}
			if f.rev(head+"^2") != "" {
				t.Fatal("landed commit is a merge, want one squashed commit")
			}
			// Exact tree: the old tip plus the reviewed diff.
			want := f.commit("refs/heads/expected", tip, change, "expected")
			if got, w := f.rev(head+"^{tree}"), f.rev(want+"^{tree}"); got != w {
				t.Fatalf("tree %s, want %s", got, w)
			}
			msg := f.git("log", "-1", "--format=%B", head)
			pid := f.patchID(tip, head)
			for _, tr := range []string{"Decision-Id: " + id, "Reviewed-Commit: " + approvedCommit, "Patch-Id: " + pid,
				"Run-Id: run-a", "Model: fake", "Task-Id: t-a"} {
				if !strings.Contains(msg, tr) {
					t.Errorf("message lacks %q:\n%s", tr, msg)
				}
			}
			if !strings.HasPrefix(msg, "Change a\n") {
				t.Errorf("message does not keep the subject:\n%s", msg)
			}
			var rc Receipt
			if err := json.Unmarshal([]byte(f.git("notes", "--ref=conductor", "show", head)), &rc); err != nil {
				t.Fatalf("note: %v", err)
			}
			if rc.Decision != id || rc.PatchID != pid || rc.Run != "run-a" || rc.Model != "fake" || rc.Task != "t-a" ||
				rc.Tokens.Total == nil || *rc.Tokens.Total != 42 || rc.Verdict.Verdict != "approve" {
				t.Fatalf("receipt %+v", rc)
			}
			l, err := f.store.GetLanding(context.Background(), id)
			if err != nil || l.Commit != head || l.PatchID != pid || l.Target != "main" {
				t.Fatalf("landing row %+v, %v", l, err)
			}
			gateLog, _ := os.ReadFile(marker)
			if !strings.HasPrefix(string(gateLog), f.rev(head+"^{tree}")+" "+mode) {
				t.Fatalf("gate did not run on the landed tree: %q", gateLog)
			}
			if mode == ModeWorktree && !strings.Contains(string(gateLog), "lib") {
				t.Fatalf("worktree gate saw no files: %q", gateLog)
			}
			if wt := f.git("worktree", "list", "--porcelain"); strings.Count(wt, "worktree ") != 1 {
				t.Fatalf("worktrees left:\n%s", wt)
			}
			if left, _ := filepath.Glob(filepath.Join(f.dataRoot, "land", "*", "scratch", "*")); len(left) > 0 {
				t.Fatalf("scratch left: %v", left)
			}
			rep, err := Audit(context.Background(), AuditOptions{Git: f.g, Store: f.store, Commit: "main"})
			if err != nil || !rep.OK {
				t.Fatalf("audit: %+v %v", rep, err)
			}

			// Idempotent.
			before := f.snapshot()
			again, err := f.land(id, nil)
			if err != nil || again.Status != StatusAlreadyLanded || again.Commit != head {
				t.Fatalf("second land: %+v %v", again, err)
			}
			if f.snapshot() != before {
				t.Fatal("second land changed the repository")
			}
		})
	}
}

func TestLandDryRunChangesNothing(t *testing.T) {
	for _, tc := range []struct{ mode, target string }{{ModeTree, "quiet"}, {ModeWorktree, "quiet"}, {ModeTree, "moved"}, {ModeWorktree, "moved"}} {
		mode := tc.mode
		t.Run(mode+" "+tc.target, func(t *testing.T) {
			f := newFixture(t)
			f.rules.gate = []policy.GateCommand{{Name: "ok", Argv: []string{"true"}, NeedsFiles: mode == ModeWorktree}}
			work := change
			if tc.target == "moved" { // the squash is then made in process
				work = map[string]string{"lib/new.go": "package lib\n", "docs/new.md": "n\n"}
			}
			id, _ := f.approved("a", work)
			if tc.target == "moved" {
				f.commit("refs/heads/main", "", map[string]string{"README.md": "# moved on\n"}, "unrelated")
			}
			before := f.snapshot()
			out, err := f.land(id, func(o *Options) { o.DryRun = true })
			if err != nil {
				t.Fatalf("dry run: %v", err)
			}
			if out.Status != StatusDryRun || out.Tree == "" || out.Mode != mode || !strings.Contains(out.Message, "Decision-Id: "+id) {
				t.Fatalf("outcome %+v", out)
			}
			if out.Decision != id || out.Target != "main" || out.Parent != f.rev("refs/heads/main") || out.PatchID == "" {
				t.Fatalf("dry-run outcome %+v", out)
			}
			if typ := f.git("cat-file", "-t", out.Tree); typ != "tree" {
				t.Fatalf("the reported tree %s is a %q", out.Tree, typ)
			}
			if after := f.snapshot(); after != before {
				t.Fatalf("dry run changed the repository:\n%s\n---\n%s", before, after)
			}
			if _, err := f.store.GetLanding(context.Background(), id); !errors.Is(err, bus.ErrNotFound) {
				t.Fatalf("dry run recorded a landing: %v", err)
			}
			// The real landing commits exactly the tree the dry run reported.
			real, err := f.land(id, nil)
			if err != nil || f.rev(real.Commit+"^{tree}") != out.Tree {
				t.Fatalf("land after dry run: %+v %v (dry-run tree %s)", real, err, out.Tree)
			}
		})
	}
}

// TestLandCommitterDate: the landed commit is dated when the landing
// starts (its objects may be written ahead), or, after a gate, when the
// gate has passed.
func TestLandCommitterDate(t *testing.T) {
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for _, gated := range []bool{false, true} {
		t.Run(fmt.Sprint("gated=", gated), func(t *testing.T) {
			f := newFixture(t)
			if gated {
				f.rules.gate = []policy.GateCommand{{Name: "ok", Argv: []string{"true"}}}
			}
			id, _ := f.approved("a", change)
			calls := 0
			out, err := f.land(id, func(o *Options) {
				o.Now = func() time.Time { calls++; return start.Add(time.Duration(calls-1) * time.Hour) }
			})
			if err != nil {
				t.Fatal(err)
			}
			want := start
			if gated {
				want = start.Add(time.Hour) // the first reading after the gate
			}
			if got := f.git("log", "-1", "--format=%ct", out.Commit); got != fmt.Sprint(want.Unix()) {
				t.Fatalf("committer date %s, want %d", got, want.Unix())
			}
		})
	}
}

// The landed commit's message says in prose what the trailers bind: the
// candidate and its run, the base and whether the target moved, who
// approved and decided, and that the gate ran again at the target.
func TestLandMessageSaysWhatLanded(t *testing.T) {
	for _, moved := range []bool{false, true} {
		t.Run(fmt.Sprintf("target moved %v", moved), func(t *testing.T) {
			f := newFixture(t)
			f.rules.gate = []policy.GateCommand{{Name: "check", Argv: []string{"true"}}}
			id, _ := f.approved("a", change)
			if moved {
				f.commit("refs/heads/main", "", map[string]string{"docs/other.md": "other\n"}, "unrelated")
			}
			out, err := f.land(id, nil)
			if err != nil {
				t.Fatalf("land: %v", err)
			}
			msg, err := f.g.Line(context.Background(), "log", "-1", "--format=%B", out.Commit)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{
				"Lands the candidate with patch-id " + patch.Short(out.PatchID),
				"The gate (check) was run again on the landed tree at the target and passed.",
				"in decision " + id,
				"Decision-Id: " + id, // the trailers stay, for machines
			}
			if moved {
				want = append(want, "changing none of the reviewed paths")
			} else {
				want = append(want, "the target has not moved since")
			}
			flat := strings.Join(strings.Fields(msg), " ")
			for _, w := range want {
				if !strings.Contains(flat, strings.Join(strings.Fields(w), " ")) {
					t.Errorf("message lacks %q:\n%s", w, msg)
				}
			}
			for _, line := range strings.Split(msg, "\n") {
				if len(line) > 72 && !strings.Contains(line, ": ") {
					t.Errorf("prose line longer than 72 columns: %q", line)
				}
			}
		})
	}
}
