package land

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/policy"
)

// gateCommitsToMain is a gate that commits to main (at most max times,
// counted in a file) — the target advancing while the gate runs.
func gateCommitsToMain(gitdir, counter string, max int) policy.GateCommand {
	script := fmt.Sprintf(`n=$(cat %[1]s 2>/dev/null || echo 0); [ "$n" -ge %[2]d ] && exit 0; echo $((n+1)) > %[1]s
g="git --git-dir=%[3]s -c user.name=gate -c user.email=gate@example.test"
c=$($g commit-tree "refs/heads/main^{tree}" -p refs/heads/main -m "gate commit $n") && $g update-ref refs/heads/main "$c"`, counter, max, gitdir)
	return policy.GateCommand{Name: "sneaky", Argv: []string{"sh", "-c", script}}
}

func TestLandTargetMovesDuringGate(t *testing.T) {
	t.Parallel()
	t.Run("every time: target-moved, nothing lost", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		f.rules.gate = []policy.GateCommand{gateCommitsToMain(f.gitdir, filepath.Join(t.TempDir(), "n"), 100)}
		id, _ := f.approved("a", change)
		out, err := f.land(id, nil)
		var rf *refusal.Refusal
		if !errors.As(err, &rf) || rf.Code != "target-moved" || out.Attempts != 2 {
			t.Fatalf("got %v %+v, want target-moved after 2 attempts", err, out)
		}
		log := f.git("log", "--format=%s", "refs/heads/main")
		if log != "gate commit 1\ngate commit 0\ninitial" {
			t.Fatalf("main history:\n%s", log)
		}
		if strings.Contains(f.git("log", "--format=%B", "refs/heads/main"), "Decision-Id") {
			t.Fatal("an ungated landing reached main")
		}
		if _, err := f.store.GetLanding(context.Background(), id); !errors.Is(err, bus.ErrNotFound) {
			t.Fatalf("landing recorded: %v", err)
		}
		if f.rev(NotesRef) != "" {
			t.Fatal("a note was written")
		}
	})
	t.Run("once: the retry lands on the new tip", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		f.rules.gate = []policy.GateCommand{gateCommitsToMain(f.gitdir, filepath.Join(t.TempDir(), "n"), 1)}
		id, _ := f.approved("a", change)
		out, err := f.land(id, nil)
		if err != nil || out.Status != StatusLanded || out.Attempts != 2 {
			t.Fatalf("got %v %+v", err, out)
		}
		if log := f.git("log", "--format=%s", "refs/heads/main"); log != "Change a\ngate commit 0\ninitial" {
			t.Fatalf("main history:\n%s", log)
		}
	})
}

func TestLandUpdatesCheckedOutTarget(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.git("symbolic-ref", "HEAD", "refs/heads/main")
	f.runIn(f.dir, nil, "git", "reset", "-q", "--hard")
	os.WriteFile(filepath.Join(f.dir, "untracked.txt"), []byte("mine\n"), 0o644)
	id, _ := f.approved("a", change)
	if _, err := f.land(id, nil); err != nil {
		t.Fatal(err)
	}
	if st := f.runIn(f.dir, nil, "git", "status", "--porcelain", "--untracked-files=no"); st != "" {
		t.Fatalf("phantom diff in the checked-out target:\n%s", st)
	}
	b, err := os.ReadFile(filepath.Join(f.dir, "lib", "new.go"))
	if err != nil || string(b) != "package lib\n" {
		t.Fatalf("worktree did not follow: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "docs", "guide.md")); !os.IsNotExist(err) {
		t.Fatal("deleted file still in the worktree")
	}
	if b, _ := os.ReadFile(filepath.Join(f.dir, "untracked.txt")); string(b) != "mine\n" {
		t.Fatal("untracked file lost")
	}
}

func TestLandConcurrent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.rules.gate = []policy.GateCommand{{Name: "ok", Argv: []string{"sh", "-c", "sleep 0.05"}}}
	var ids []string
	for i := range 10 {
		id, _ := f.approved(fmt.Sprint("c", i), map[string]string{fmt.Sprintf("lib/f%d.go", i): "package lib\n"})
		ids = append(ids, id)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = f.land(id, nil)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("landing %d: %v", i, err)
		}
	}
	msgs := f.git("log", "--format=%B", "refs/heads/main")
	for _, id := range ids {
		if strings.Count(msgs, "Decision-Id: "+id+"\n") != 1 {
			t.Errorf("main lacks exactly one landing of %s", id)
		}
		if _, err := f.store.GetLanding(context.Background(), id); err != nil {
			t.Errorf("no landing row for %s: %v", id, err)
		}
	}
	if n := f.git("rev-list", "--count", "refs/heads/main"); n != "11" {
		t.Fatalf("main has %s commits, want 11", n)
	}
}

// TestLandHelperProcess is the landing run in a child process by
// TestLandKilledAtEachStep; it SIGKILLs itself at LAND_FAULT.
func TestLandHelperProcess(t *testing.T) {
	if os.Getenv("LAND_HELPER") != "1" {
		t.Skip("helper process")
	}
	st, err := bus.Open(context.Background(), bus.Options{DataRoot: os.Getenv("LAND_DATA")})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Store: st, Rules: testRules{Landing: defaultLanding(t), gate: killGate(os.Getenv("LAND_GATELOG"))},
		DecisionID: os.Getenv("LAND_DECISION"), DataRoot: os.Getenv("LAND_DATA"), Worktree: true, Sandbox: unsandboxed(t),
		Fault: func(step string) {
			if step == os.Getenv("LAND_FAULT") {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}}
	Run(context.Background(), o)
	t.Fatal("not killed")
}

func killGate(log string) []policy.GateCommand {
	return []policy.GateCommand{{Name: "log", NeedsFiles: true, Argv: []string{"sh", "-c", `echo "$CONDUCTOR_LAND_TREE" >> ` + log}}}
}

func TestLandKilledAtEachStep(t *testing.T) {
	t.Parallel()
	steps := []string{"decision", "lock", "verdict", "policy", "squash", "worktree", "gate", "commit", "update-ref", "record"}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			gateLog := filepath.Join(t.TempDir(), "gate.log")
			f.rules.gate = killGate(gateLog)
			id, _ := f.approved("a", change)
			cmd := exec.Command(os.Args[0], "-test.run=^TestLandHelperProcess$")
			cmd.Env = append(os.Environ(), "LAND_HELPER=1", "LAND_DATA="+f.dataRoot, "LAND_DECISION="+id,
				"LAND_FAULT="+step, "LAND_GATELOG="+gateLog)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("helper not killed at %s: %v\n%s", step, err, out)
			}
			// Whatever the kill left, main never points at an ungated tree.
			gated, _ := os.ReadFile(gateLog)
			if tip := f.rev("refs/heads/main"); strings.Contains(f.git("log", "-1", "--format=%B", tip), "Decision-Id") &&
				!strings.Contains(string(gated), f.rev(tip+"^{tree}")) {
				t.Fatal("main points at an ungated commit")
			}
			// A later run completes.
			res, err := f.land(id, func(o *Options) { o.Worktree = true; o.Now = time.Now })
			if err != nil || (res.Status != StatusLanded && res.Status != StatusAlreadyLanded) {
				t.Fatalf("after kill at %s: %+v %v", step, res, err)
			}
			tip := f.rev("refs/heads/main")
			if !strings.Contains(string(mustRead(t, gateLog)), f.rev(tip+"^{tree}")) {
				t.Fatal("landed tree was never gated")
			}
			if n := strings.Count(f.git("log", "--format=%B", "refs/heads/main"), "Decision-Id: "+id); n != 1 {
				t.Fatalf("%d landings of %s on main", n, id)
			}
			if l, err := f.store.GetLanding(context.Background(), id); err != nil || l.Commit != tip {
				t.Fatalf("landing row %+v %v", l, err)
			}
			if wt := f.git("worktree", "list", "--porcelain"); strings.Count(wt, "worktree ") != 1 {
				t.Fatalf("stale worktrees:\n%s", wt)
			}
			if left, _ := filepath.Glob(filepath.Join(f.dataRoot, "land", "*", "scratch", "*")); len(left) > 0 {
				t.Fatalf("scratch left: %v", left)
			}
			if _, err := os.Stat(filepath.Join(f.gitdir, "worktrees")); !os.IsNotExist(err) {
				t.Fatal("worktrees admin folder left")
			}
		})
	}
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
