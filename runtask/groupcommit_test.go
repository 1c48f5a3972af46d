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
	"time"

	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/sandbox"
)

// TestCrashBetweenReplyAndResults: the loop makes a reply that calls
// tools durable in the transcript alone and writes the session state with
// the results (issue 23's group commit). A run killed in between resumes
// with that reply adopted from the transcript: the model is not asked for
// that step again, and the call runs.
func TestCrashBetweenReplyAndResults(t *testing.T) {
	if os.Getenv("RUNTASK_REPLY_CRASH_CHILD") != "" {
		replyCrashChild(t)
		return
	}
	f := newFixture(t)
	marker := filepath.Join(t.TempDir(), "in-command")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashBetweenReplyAndResults$", "-test.v")
	cmd.Env = append(os.Environ(), "RUNTASK_REPLY_CRASH_CHILD=1", "CHILD_REPO="+f.repo, "CHILD_DATA="+f.data, "CHILD_MARKER="+marker)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !exists(marker) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the child's command never started:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Killed while the command of step 2 runs: the reply is in the
	// transcript, the state is still at step 1.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		cmd.Process.Kill()
	}
	cmd.Wait()
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){finalTurn("done")}}
	res, err := Run(context.Background(), f.opts(testTask("reply-crash"), m))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != runrec.StatusSucceeded || res.Steps != 3 {
		t.Fatalf("resumed: status %s, %d steps (want 3: the recorded reply adopted, then the final one): %s", res.Status, res.Steps, res.Error)
	}
	reqs := m.requests()
	if len(reqs) != 1 {
		t.Fatalf("the model was asked %d times after the resume, want 1", len(reqs))
	}
	last := reqs[0].Messages[len(reqs[0].Messages)-1]
	if !strings.Contains(last.Content, "again") {
		t.Fatalf("the adopted call's result is not the last message: %+v", last)
	}
}

func replyCrashChild(t *testing.T) {
	f := &fixture{repo: os.Getenv("CHILD_REPO"), data: os.Getenv("CHILD_DATA"), env: map[string]string{}, sb: &execSandbox{},
		role: &testRole{commands: [][]string{{"sh", "-c"}}}}
	marker := os.Getenv("CHILD_MARKER")
	script := "if [ -e " + marker + " ]; then echo again; else touch " + marker + "; sleep 120; fi"
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		call(ToolWriteFile, map[string]any{"path": "one.txt", "content": "1\n"}),
		call(ToolRunCommand, map[string]any{"argv": []string{"sh", "-c", script}}),
	}}
	Run(context.Background(), f.opts(testTask("reply-crash"), m))
	t.Fatal("the child run returned")
}

// TestLimitEndsTheRun: a command a sandbox limit stopped (the process or
// the memory limit, on any backend) ends the run, recorded failed with
// "limit: ..." in result.json and the run row (issue 19).
func TestLimitEndsTheRun(t *testing.T) {
	for _, c := range []struct {
		name string
		res  sandbox.Result
		want string
	}{
		{"pids", sandbox.Result{ExitCode: 2, Outcome: sandbox.OutcomePidsExceeded, Output: []byte("fork: Resource temporarily unavailable")}, "process limit"},
		{"memory", sandbox.Result{ExitCode: -1, Outcome: sandbox.OutcomeMemoryExceeded, MemoryExceeded: true, Signal: "killed"}, "memory limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			store := newMemStore()
			m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
				call(ToolRunCommand, map[string]any{"argv": []string{"sh", "-c", "bomb"}}),
				call(ToolWriteFile, map[string]any{"path": "after.txt", "content": "x\n"}),
			}}
			o := f.opts(testTask("limit-"+c.name), m)
			o.Store, o.Sandbox = store, &fakeResultSandbox{res: c.res}
			res, err := Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != runrec.StatusFailed || !strings.HasPrefix(res.Error, "limit: ") || !strings.Contains(res.Error, c.want) {
				t.Fatalf("recorded %s: %q, want failed: limit (%s)", res.Status, res.Error, c.want)
			}
			if len(m.requests()) != 1 {
				t.Fatalf("the model was asked again after the limit (%d requests)", len(m.requests()))
			}
			rec, err := runrec.Dir(filepath.Join(f.data, "runs", res.RunID)).ReadResult()
			if err != nil || rec.Status != runrec.StatusFailed || rec.Error != res.Error {
				t.Fatalf("result.json: %+v %v", rec, err)
			}
			row, ok := store.runs[res.RunID]
			if !ok || row.Status != runrec.StatusFailed || !strings.HasPrefix(row.Outcome, "limit: ") {
				t.Fatalf("run row: %+v", row)
			}
		})
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
