package runtask

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/runrec"
)

// holdStateWrites replaces writeState for one test: hook runs before each
// write of the session state, with the state about to be written.
func holdStateWrites(t *testing.T, hook func(st sessionState) error) {
	t.Helper()
	orig := writeState
	t.Cleanup(func() { writeState = orig })
	writeState = func(dir string, b []byte) error {
		var st sessionState
		if err := json.Unmarshal(b, &st); err != nil {
			return err
		}
		if err := hook(st); err != nil {
			return err
		}
		return orig(dir, b)
	}
}

// TestStepSaveOverlapsTheRequest: a step's results are saved while the
// next model request is out (issue 23), and the reply is acted on only
// once that save is on disk: its call does not run, and its transcript
// line is not written, while the save is held back.
func TestStepSaveOverlapsTheRequest(t *testing.T) {
	f := newFixture(t)
	requested := make(chan struct{})
	var once sync.Once
	var worktree string
	var violations []string
	holdStateWrites(t, func(st sessionState) error {
		if st.Step != 1 || len(st.History) != 1 {
			return nil // only the save of step 1's result is held
		}
		worktree = st.Worktree
		select {
		case <-requested:
		case <-time.After(time.Minute):
			violations = append(violations, "the next request was not sent while the step's save was in flight")
			return nil
		}
		// The reply of step 2 is back (or coming): until this save
		// returns, nothing may act on it.
		for range 20 {
			if _, err := os.Lstat(filepath.Join(worktree, "two.txt")); err == nil {
				violations = append(violations, "step 2's call ran before step 1's save was durable")
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	})
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		call(ToolWriteFile, map[string]any{"path": "one.txt", "content": "1\n"}),
		func(ModelRequest) (ModelReply, error) {
			once.Do(func() { close(requested) })
			return callReply(ToolWriteFile, map[string]any{"path": "two.txt", "content": "2\n"}), nil
		},
		finalTurn("done"),
	}}
	opts := f.opts(testTask("behind"), m)
	opts.KeepWorktree = true
	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Error(v)
	}
	if res.Status != runrec.StatusSucceeded || res.Steps != 3 {
		t.Fatalf("run: %s after %d steps: %s", res.Status, res.Steps, res.Error)
	}
	if strings.Join(res.FilesChanged, ",") != "one.txt,two.txt" {
		t.Fatalf("files: %v", res.FilesChanged)
	}
}

// TestStepSaveFailureStopsTheRun: a save that fails while the next request
// is out fails the run (recorded resumable: the disk is an outside cause)
// before the reply that came back meanwhile is acted on.
func TestStepSaveFailureStopsTheRun(t *testing.T) {
	f := newFixture(t)
	var worktree string
	holdStateWrites(t, func(st sessionState) error {
		if st.Step == 1 && len(st.History) == 1 {
			worktree = st.Worktree
			return errors.New("no space left on device")
		}
		return nil
	})
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		call(ToolWriteFile, map[string]any{"path": "one.txt", "content": "1\n"}),
		call(ToolWriteFile, map[string]any{"path": "two.txt", "content": "2\n"}),
		finalTurn("done"),
	}}
	res, err := Run(context.Background(), f.opts(testTask("behind-fail"), m))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != runrec.StatusFailed || !res.Resumable || !strings.Contains(res.Error, "session state: no space left on device") {
		t.Fatalf("run: %s (resumable %v): %q", res.Status, res.Resumable, res.Error)
	}
	if res.Steps != 1 {
		t.Fatalf("steps: %d, want 1 (step 2's reply is not counted before its save)", res.Steps)
	}
	if _, err := os.Lstat(filepath.Join(worktree, "two.txt")); err == nil {
		t.Fatal("step 2's call ran although step 1's save failed")
	}
	for _, l := range readTranscript(t, runrec.Dir(filepath.Join(f.data, "runs", res.RunID))) {
		if l.Step == 2 && l.Type != lineStop {
			t.Fatalf("transcript line of step 2 after the failed save: %+v", l)
		}
	}
}
