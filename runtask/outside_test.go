package runtask

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/sandbox"
)

// TestUnresolvableModelLeavesNoRunFolder: a model alias the registry does
// not know fails the run before its folder exists: no phantom run.
func TestUnresolvableModelLeavesNoRunFolder(t *testing.T) {
	f := newFixture(t)
	opts := f.opts(testTask("phantom"), nil)
	reg, err := LoadRegistry("", testEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	opts.Model, opts.ModelName, opts.ModelAlias, opts.Registry = nil, "", "no-such-model", reg
	if _, err := Run(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "no-such-model") {
		t.Fatalf("run: %v, want the unknown alias named", err)
	}
	if dirs, _ := filepath.Glob(filepath.Join(f.data, "runs", "*")); len(dirs) != 0 {
		t.Fatalf("phantom run folders: %v", dirs)
	}
}

// TestSandboxWarningInRunStderr: the none backend's "NO isolation" warning
// for a command of the run lands in the run's stderr.txt (and the
// conductor's stderr), not only on the process's stderr.
func TestSandboxWarningInRunStderr(t *testing.T) {
	f := newFixture(t)
	none, err := sandbox.NewWithOptions("none", sandbox.Options{Warn: io.Discard})
	if err != nil {
		t.Skipf("sandbox none: %v", err)
	}
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		call(ToolRunCommand, map[string]any{"argv": []string{"true"}}),
		finalTurn("ran it"),
	}}
	opts := f.opts(testTask("warn"), m)
	opts.Sandbox = none
	var stderr strings.Builder
	opts.Stderr = &stderr
	res, err := Run(context.Background(), opts)
	if err != nil || res.Status != runrec.StatusSucceeded {
		t.Fatalf("run: %+v %v", res, err)
	}
	b, err := os.ReadFile(filepath.Join(f.data, "runs", res.RunID, runrec.StderrFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "NO isolation") {
		t.Fatalf("stderr.txt lacks the sandbox warning:\n%s", b)
	}
	if !strings.Contains(stderr.String(), "NO isolation") {
		t.Fatalf("the conductor's stderr lacks the sandbox warning:\n%s", stderr.String())
	}
}

// TestResumeAfterOutsideFailure: a run that failed because the model server
// did not answer is recorded resumable; resume continues it (with another
// model client, as --model ALIAS gives) to success. A run the server
// refused (HTTP 400) is not resumable: resume returns its failure.
func TestResumeAfterOutsideFailure(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		resumable bool
	}{
		{"server down", &ModelError{Alias: "test", URL: "http://127.0.0.1:1/v1", Attempts: 3, Msg: "connection refused"}, true},
		{"server overloaded", &ModelError{Alias: "test", Status: 503, Attempts: 3, Msg: "overloaded"}, true},
		{"request refused", &ModelError{Alias: "test", Status: 400, Msg: "bad request"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			down := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
				call(ToolEditFile, map[string]any{"path": "lib/util.go", "old_string": "= 41", "new_string": "= 42"}),
				func(ModelRequest) (ModelReply, error) { return ModelReply{}, tc.err },
			}}
			task := testTask("outside")
			res, err := Run(context.Background(), f.opts(task, down))
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != runrec.StatusFailed || res.Resumable != tc.resumable {
				t.Fatalf("first run: status %s resumable %v, want failed %v (%s)", res.Status, res.Resumable, tc.resumable, res.Error)
			}
			up := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){finalTurn("done after the outage")}}
			again, err := Resume(context.Background(), f.opts(Task{}, up), res.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.resumable {
				if again.Status != runrec.StatusFailed || len(up.requests()) != 0 {
					t.Fatalf("a refused run was resumed: %+v", again)
				}
				return
			}
			if again.Status != runrec.StatusSucceeded || again.Resumable || again.Steps != 2 {
				t.Fatalf("resumed: %+v", again)
			}
			if again.PatchID == "" || len(again.FilesChanged) != 1 || again.FilesChanged[0] != "lib/util.go" {
				t.Fatalf("resumed run lost the earlier step's edit: %+v", again)
			}
			if n := len(up.requests()); n != 1 {
				t.Fatalf("the new model got %d requests, want 1", n)
			}
		})
	}
}

// downStore fails every write and read while down is set.
type downStore struct {
	*memStore
	down atomic.Bool
}

var errStoreDown = errors.New("connect: connection refused")

func (s *downStore) PutRun(ctx context.Context, r bus.Run) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.memStore.PutRun(ctx, r)
}
func (s *downStore) PutCheckpoint(ctx context.Context, c bus.Checkpoint) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.memStore.PutCheckpoint(ctx, c)
}
func (s *downStore) PendingNotes(ctx context.Context, runID string) ([]bus.Note, error) {
	if s.down.Load() {
		return nil, errStoreDown
	}
	return s.memStore.PendingNotes(ctx, runID)
}

// TestStoreOutageWarnsOncePerOutage: a run goes on through a store outage
// and says so once when it starts and once when it ends, not once per step.
func TestStoreOutageWarnsOncePerOutage(t *testing.T) {
	f := newFixture(t)
	f.cfg.CheckpointEvery = ptr(1)
	store := &downStore{memStore: newMemStore()}
	var turns []func(ModelRequest) (ModelReply, error)
	for i, path := range []string{"README.md", "main.go", "lib/util.go", ".gitignore", "README.md", "main.go"} {
		turns = append(turns, func(ModelRequest) (ModelReply, error) {
			store.down.Store(i >= 1 && i < 4) // down for three steps
			return callReply(ToolReadFile, map[string]any{"path": path}), nil
		})
	}
	m := &scriptModel{turns: append(turns, finalTurn("ok"))}
	opts := f.opts(testTask("outage"), m)
	opts.Store = store
	var stderr strings.Builder
	opts.Stderr = &stderr
	res, err := Run(context.Background(), opts)
	if err != nil || res.Status != runrec.StatusSucceeded {
		t.Fatalf("run: %+v %v", res, err)
	}
	if n := strings.Count(stderr.String(), "bus store unavailable"); n != 1 {
		t.Fatalf("%d outage warnings, want 1:\n%s", n, stderr.String())
	}
	if n := strings.Count(stderr.String(), "bus store reachable again"); n != 1 {
		t.Fatalf("%d recovery lines, want 1:\n%s", n, stderr.String())
	}
	if run, err := store.GetRun(context.Background(), res.RunID); err != nil || run.Status != runrec.StatusSucceeded {
		t.Fatalf("store run after the outage: %+v %v", run, err)
	}
}
