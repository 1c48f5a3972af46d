package runtask

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/runrec"
)

// holdStateWrites replaces writeState for one test: hook runs before each
// write of the session state, with the state about to be written.
func holdStateWrites(t *testing.T, hook func(st sessionState) error) {
	t.Helper()
	orig := writeState
	t.Cleanup(func() { writeState = orig })
	writeState = func(dir string, seq int64, b []byte) error {
		var st sessionState
		if err := json.Unmarshal(b, &st); err != nil {
			return err
		}
		if err := hook(st); err != nil {
			return err
		}
		return orig(dir, seq, b)
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

// TestWrittenFileSyncedWithTheStepSave: a write_file's fsync is not on
// the way to the next model request: it joins the step's group commit,
// after the call's result line is written and before the session state
// that records the step is; each written file is synced once. A failed
// fsync there fails the run like any failed save (resumable).
func TestWrittenFileSyncedWithTheStepSave(t *testing.T) {
	f := newFixture(t)
	opts := f.opts(testTask("write-sync"), &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		call(ToolWriteFile, map[string]any{"path": "one.txt", "content": "1\n"}),
		call(ToolEditFile, map[string]any{"path": "one.txt", "old_string": "1", "new_string": "2"}),
		finalTurn("done"),
	}})
	opts.RunID = "r-write-sync"
	transcript := filepath.Join(f.data, "runs", opts.RunID, runrec.TranscriptFile)
	var mu sync.Mutex
	var order []string
	orig := syncFile
	t.Cleanup(func() { syncFile = orig })
	syncFile = func(file *os.File) error {
		if strings.Contains(file.Name(), writeTempMark) {
			b, _ := os.ReadFile(transcript)
			results := strings.Count(string(b), `"type":"tool_result"`)
			mu.Lock()
			order = append(order, fmt.Sprintf("sync after %d results", results))
			mu.Unlock()
		}
		return orig(file)
	}
	holdStateWrites(t, func(st sessionState) error {
		mu.Lock()
		order = append(order, fmt.Sprintf("state %d", len(st.History)))
		mu.Unlock()
		return nil
	})
	res, err := Run(context.Background(), opts)
	if err != nil || res.Status != runrec.StatusSucceeded {
		t.Fatalf("run: %v %+v", err, res)
	}
	mu.Lock()
	got := strings.Join(order, ", ")
	mu.Unlock()
	// state 0: the take's and the start's saves; each step: its file synced once its
	// result line is written, then the state with that step; the final
	// reply's and the finish's saves.
	if want := "state 0, state 0, sync after 1 results, state 1, sync after 2 results, state 2, state 2, state 2"; got != want {
		t.Fatalf("order:\n got %s\nwant %s", got, want)
	}

	f = newFixture(t)
	syncFile = func(file *os.File) error {
		if strings.Contains(file.Name(), writeTempMark) {
			return errors.New("input/output error")
		}
		return orig(file)
	}
	res, err = Run(context.Background(), f.opts(testTask("write-sync-fail"), &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		call(ToolWriteFile, map[string]any{"path": "one.txt", "content": "1\n"}),
		call(ToolWriteFile, map[string]any{"path": "two.txt", "content": "2\n"}),
		finalTurn("done"),
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != runrec.StatusFailed || !res.Resumable || !strings.Contains(res.Error, "input/output error") || res.Steps != 1 {
		t.Fatalf("run: %s (resumable %v) after %d steps: %q", res.Status, res.Resumable, res.Steps, res.Error)
	}
}

// gatedStore is a store whose checkpoint writes and first run row can
// wait for a signal first; a wait that returns false (the signal never
// came) is noted late. runs lists the statuses of the rows written.
type gatedStore struct {
	*memStore
	checkpoint func(step int) bool // nil: no wait
	firstRun   func() bool         // nil: no wait
	late       []string
	runs       []string
}

func (g *gatedStore) wait(gate func() bool, what string) {
	if gate != nil && !gate() {
		g.mu.Lock()
		g.late = append(g.late, what)
		g.mu.Unlock()
	}
}

func (g *gatedStore) PutCheckpoint(ctx context.Context, c bus.Checkpoint) error {
	if g.checkpoint != nil {
		g.wait(func() bool { return g.checkpoint(c.Step) }, fmt.Sprintf("checkpoint %d", c.Step))
	}
	return g.memStore.PutCheckpoint(ctx, c)
}

func (g *gatedStore) PutRun(ctx context.Context, r bus.Run) error {
	g.mu.Lock()
	first := len(g.runs) == 0
	g.mu.Unlock()
	if first {
		g.wait(g.firstRun, "run row "+r.Status)
	}
	g.mu.Lock()
	g.runs = append(g.runs, r.Status)
	g.mu.Unlock()
	return g.memStore.PutRun(ctx, r)
}

// TestCheckpointOverlapsTheRequest: a step's checkpoint is written to the
// store while the next model request is out (its commit is not on the way
// to the model), in step order, and every one is in the store when the
// run returns.
func TestCheckpointOverlapsTheRequest(t *testing.T) {
	f := newFixture(t)
	f.cfg.CheckpointEvery = ptr(1)
	asked := make([]chan struct{}, 4) // asked[n]: request n is out
	for i := range asked {
		asked[i] = make(chan struct{})
	}
	turn := func(n int, reply ModelReply) func(ModelRequest) (ModelReply, error) {
		return func(ModelRequest) (ModelReply, error) { close(asked[n]); return reply, nil }
	}
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		turn(1, callReply(ToolWriteFile, map[string]any{"path": "one.txt", "content": "1\n"})),
		turn(2, callReply(ToolWriteFile, map[string]any{"path": "two.txt", "content": "2\n"})),
		turn(3, final("done")),
	}}
	store := &gatedStore{memStore: newMemStore()}
	store.checkpoint = func(step int) bool {
		select { // step n's checkpoint is written while request n+1 is out
		case <-asked[step+1]:
			return true
		case <-time.After(time.Minute):
			return false
		}
	}
	opts := f.opts(testTask("cp-behind"), m)
	opts.Store = store
	res, err := Run(context.Background(), opts)
	if err != nil || res.Status != runrec.StatusSucceeded {
		t.Fatalf("run: %v %+v", err, res)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.late) > 0 {
		t.Fatalf("written before the next request went out: %v", store.late)
	}
	var steps []int
	for _, c := range store.cps {
		steps = append(steps, c.Step)
	}
	if fmt.Sprint(steps) != "[1 2]" {
		t.Fatalf("checkpoints in the store at the run's end: steps %v, want [1 2]", steps)
	}
}

// eventWatch is a progress writer that closes seen when the event named
// want is written.
type eventWatch struct {
	want string
	seen chan struct{}
	once sync.Once
}

func (w *eventWatch) Write(p []byte) (int, error) {
	if strings.Contains(string(p), `"event":"`+w.want+`"`) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// TestStartSaveOverlapsTheFirstAnswer: a new round's last start save
// (the state with its opening) is made while the first request, already
// out, is answered: the run goes on to its loop without waiting for the
// disk, and the first answer is acted on only once that save is done.
func TestStartSaveOverlapsTheFirstAnswer(t *testing.T) {
	f := newFixture(t)
	watch := &eventWatch{want: "start", seen: make(chan struct{})}
	opts := f.opts(testTask("start-behind"), &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		call(ToolWriteFile, map[string]any{"path": "one.txt", "content": "1\n"}),
		finalTurn("done"),
	}})
	opts.RunID, opts.Events, opts.JSON = "r-start-behind", watch, true
	transcript := filepath.Join(f.data, "runs", opts.RunID, runrec.TranscriptFile)
	var saves int
	var problems []string
	holdStateWrites(t, func(st sessionState) error {
		if st.Step != 0 {
			return nil
		}
		if saves++; saves != 2 { // the take's save, then the start's
			return nil
		}
		select {
		case <-watch.seen:
		case <-time.After(time.Minute):
			problems = append(problems, "the run waited for the start save before its loop")
		}
		time.Sleep(20 * time.Millisecond) // the first answer is back meanwhile
		if b, _ := os.ReadFile(transcript); strings.Contains(string(b), `"type":"model"`) {
			problems = append(problems, "the first answer was acted on before the start save was done")
		}
		return nil
	})
	res, err := Run(context.Background(), opts)
	if err != nil || res.Status != runrec.StatusSucceeded || res.Steps != 2 {
		t.Fatalf("run: %v %+v", err, res)
	}
	if saves < 2 || len(problems) > 0 {
		t.Fatalf("%d saves at step 0; %v", saves, problems)
	}
}

// TestStartRowOverlapsTheTake: the start's store row is written while the
// worktree is taken (after the folder's record), and it is in the store
// before the conversation's first tool runs and before the final row.
func TestStartRowOverlapsTheTake(t *testing.T) {
	f := newFixture(t)
	taken := make(chan struct{})
	var once sync.Once
	setFaultHook(t, func(point string) {
		if point == faultAcquired {
			once.Do(func() { close(taken) })
		}
	})
	store := &gatedStore{memStore: newMemStore()}
	store.firstRun = func() bool {
		select {
		case <-taken:
			return true
		case <-time.After(time.Minute):
			return false
		}
	}
	var rowsAtTool []string
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		call(ToolWriteFile, map[string]any{"path": "one.txt", "content": "1\n"}),
		func(ModelRequest) (ModelReply, error) {
			store.mu.Lock()
			rowsAtTool = append([]string(nil), store.runs...)
			store.mu.Unlock()
			return final("done"), nil
		},
	}}
	opts := f.opts(testTask("start-row"), m)
	opts.Store, opts.RunID = store, "r-start-row"
	var heard []string
	opts.RunRowPut = func(row bus.Run, err error) { heard = append(heard, row.Status) }
	res, err := Run(context.Background(), opts)
	if err != nil || res.Status != runrec.StatusSucceeded {
		t.Fatalf("run: %v %+v", err, res)
	}
	if len(store.late) > 0 {
		t.Fatalf("the start's row was written before the worktree was taken: %v", store.late)
	}
	if fmt.Sprint(rowsAtTool) != "[running]" {
		t.Fatalf("rows in the store when the second request went out: %v, want [running]", rowsAtTool)
	}
	if fmt.Sprint(store.runs) != "[running succeeded]" || fmt.Sprint(heard) != "[running succeeded]" {
		t.Fatalf("rows written %v, heard %v; want [running succeeded] both", store.runs, heard)
	}
	if got, _ := store.GetRun(context.Background(), opts.RunID); got.Status != runrec.StatusSucceeded {
		t.Fatalf("the store's row at the end: %s", got.Status)
	}
}
