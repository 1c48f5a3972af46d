package runtask

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/conductor-dev/conductor/conductor/runrec"
)

// TestCrashBeforeFirstSave: a worker killed after its run folder and start
// record exist but before the session state's first save (issue 23.2)
// left a run that Resume refused ("no checkpoint") and the queue
// dead-lettered. The resume now starts the run over under the same id:
// it succeeds, the model is asked for every step once, the transcript
// holds one system prompt, and the killed attempt's worktree goes back to
// the pool instead of staying busy.
func TestCrashBeforeFirstSave(t *testing.T) {
	if p := os.Getenv("RUNTASK_START_CRASH_CHILD"); p != "" {
		startCrashChild(t, p)
		return
	}
	for _, point := range []string{faultStarted, faultAcquired} {
		for _, withStore := range []bool{false, true} {
			name := point
			if withStore {
				name += "-store"
			}
			t.Run(name, func(t *testing.T) {
				f := newFixture(t)
				runID := "r-start-" + strings.ReplaceAll(name, "-", "")
				cmd := exec.Command(os.Args[0], "-test.run=^TestCrashBeforeFirstSave$", "-test.v")
				cmd.Env = append(os.Environ(), "RUNTASK_START_CRASH_CHILD="+point, "CHILD_REPO="+f.repo, "CHILD_DATA="+f.data, "CHILD_RUN="+runID)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				err := cmd.Run()
				if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("the child was not killed at %s (%v):\n%s", point, err, out.String())
				}
				dir := runrec.Dir(filepath.Join(f.data, "runs", runID))
				if prev, err := dir.ReadResult(); err != nil || prev.Status != runrec.StatusRunning {
					t.Fatalf("the killed run's record: %+v %v", prev, err)
				}
				m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
					call(ToolWriteFile, map[string]any{"path": "one.txt", "content": "1\n"}),
					finalTurn("done"),
				}}
				o := f.opts(testTask("start-crash"), m)
				if withStore {
					o.Store = newMemStore()
				}
				res, err := Resume(context.Background(), o, runID)
				if err != nil {
					t.Fatalf("resume after a kill at %s: %v", point, err)
				}
				if res.Status != runrec.StatusSucceeded || res.RunID != runID || res.Steps != 2 {
					t.Fatalf("resumed: %s %s, %d steps: %s", res.RunID, res.Status, res.Steps, res.Error)
				}
				if n := len(m.requests()); n != 2 {
					t.Fatalf("the model was asked %d times, want 2", n)
				}
				systems := 0
				for _, l := range readTranscript(t, dir) {
					if l.Type == lineSystem {
						systems++
					}
				}
				if systems != 1 {
					t.Fatalf("%d system prompts in the transcript, want 1", systems)
				}
				diff, err := os.ReadFile(dir.Path(runrec.PatchFile))
				if err != nil || strings.Count(string(diff), "+++ b/one.txt") != 1 {
					t.Fatalf("patch: %v\n%s", err, diff)
				}
				cfg := f.config().WithDefaults()
				repo, err := ResolveRepo(f.repo, "demo", cfg)
				if err != nil {
					t.Fatal(err)
				}
				pool := NewPool(cfg.WorktreeBase, repo, cfg)
				slots, err := pool.Status(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range slots {
					if s.State != SlotFree {
						t.Fatalf("slot %s left %s by the killed attempt (owner %s)", s.Slot, s.State, s.Owner)
					}
				}
			})
		}
	}
}

func startCrashChild(t *testing.T, point string) {
	f := &fixture{repo: os.Getenv("CHILD_REPO"), data: os.Getenv("CHILD_DATA"), env: map[string]string{}, sb: &execSandbox{},
		role: &testRole{commands: [][]string{{"true"}}}}
	faultHook = func(p string) {
		if p == point {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){finalTurn("never asked")}}
	o := f.opts(testTask("start-crash"), m)
	o.RunID = os.Getenv("CHILD_RUN")
	Run(context.Background(), o)
	t.Fatal("the child run returned")
}
