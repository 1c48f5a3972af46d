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

// setFaultHook replaces faultHook for one test.
func setFaultHook(t *testing.T, hook func(point string)) {
	t.Helper()
	orig := faultHook
	t.Cleanup(func() { faultHook = orig })
	faultHook = hook
}

// TestFirstRequestOverlapsTheTake: a new session's first model request
// goes out while its start records are written and its worktree is taken
// (issue 23), and the run reads as before: "start" is the first event, the
// transcript keeps its order, the reply is acted on in the worktree it was
// taken for.
func TestFirstRequestOverlapsTheTake(t *testing.T) {
	for _, at := range []string{faultStarted, faultAcquired} {
		t.Run(at, func(t *testing.T) { firstRequestBefore(t, at) })
	}
}

// firstRequestBefore runs a task whose run waits at fault point at until
// the model has the first request.
func firstRequestBefore(t *testing.T, at string) {
	f := newFixture(t)
	answer, requested := signalling(callReply(ToolWriteFile, map[string]any{"path": "one.txt", "content": "1\n"}))
	var late bool
	setFaultHook(t, func(point string) {
		if point != at {
			return
		}
		select { // the worktree is taken: the request is already out
		case <-requested:
		case <-time.After(time.Minute):
			late = true
		}
	})
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){answer, finalTurn("done")}}
	opts := f.opts(testTask("early"), m)
	var events strings.Builder
	opts.Events, opts.JSON = &events, true
	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if late {
		t.Errorf("the first request was not sent before fault point %s", at)
	}
	if res.Status != runrec.StatusSucceeded || res.Steps != 2 || strings.Join(res.FilesChanged, ",") != "one.txt" {
		t.Fatalf("run: %s after %d steps, files %v: %s", res.Status, res.Steps, res.FilesChanged, res.Error)
	}
	if n := len(m.requests()); n != 2 {
		t.Fatalf("the model was asked %d times, want 2", n)
	}
	if *res.TotalTokens != 110+105 {
		t.Fatalf("tokens: %d", *res.TotalTokens)
	}
	lines := readTranscript(t, runrec.Dir(filepath.Join(f.data, "runs", res.RunID)))
	if got := types(lines); got != "system,user,model,tool_call,tool_result,model,stop" {
		t.Fatalf("transcript: %s", got)
	}
	var first Event
	if err := json.Unmarshal([]byte(strings.SplitN(events.String(), "\n", 2)[0]), &first); err != nil || first.Event != "start" {
		t.Fatalf("first event %+v (%v)", first, err)
	}
}

// TestNoteBeforeStartIsInTheFirstRequest: a note left for a run before it
// starts is delivered with its first request (the request then waits for
// the loop): the model is asked once per step, never twice.
func TestNoteBeforeStartIsInTheFirstRequest(t *testing.T) {
	f := newFixture(t)
	store := newMemStore()
	o := f.opts(testTask("early-note"), &scriptModel{})
	o.Store, o.RunID = store, "r-early-note-1"
	if _, err := store.AddNote(context.Background(), busNote(o.RunID, "keep it short")); err != nil {
		t.Fatal(err)
	}
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){finalTurn("ok")}}
	o.Model = m
	res, err := Run(context.Background(), o)
	if err != nil || res.Status != runrec.StatusSucceeded {
		t.Fatalf("%v %+v", err, res)
	}
	reqs := m.requests()
	if len(reqs) != 1 {
		t.Fatalf("the model was asked %d times, want 1", len(reqs))
	}
	if last := reqs[0].Messages[len(reqs[0].Messages)-1]; last.Content != notePrefix+"keep it short" {
		t.Fatalf("the first request ends with %+v", last)
	}
}

// TestFirstRequestDroppedWhenTheTakeFails: a run whose worktree cannot be
// taken fails as before; the early request is cancelled and waited for
// (no call outlives the run), and its reply is never acted on.
func TestFirstRequestDroppedWhenTheTakeFails(t *testing.T) {
	f := newFixture(t)
	blocker := filepath.Join(t.TempDir(), "not-a-folder")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.cfg.WorktreeBase = blocker
	blocking := &blockingModel{}
	task := testTask("early-fail")
	task.TimeoutSeconds = 3600 // the cancel is the run's, not its deadline
	res, err := Run(context.Background(), f.opts(task, blocking))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != runrec.StatusFailed || !strings.Contains(res.Error, "worktree") {
		t.Fatalf("run: %s: %s", res.Status, res.Error)
	}
	blocking.mu.Lock()
	defer blocking.mu.Unlock()
	if blocking.calls != 1 || !blocking.cancelled {
		t.Fatalf("early request: %d calls, cancelled %v (want 1, cancelled)", blocking.calls, blocking.cancelled)
	}
}

// blockingModel answers nothing until its request is cancelled (or a
// minute passed: then with a reply the run must not act on).
type blockingModel struct {
	mu        sync.Mutex
	calls     int
	cancelled bool
}

func (b *blockingModel) Complete(ctx context.Context, req ModelRequest) (ModelReply, error) {
	b.mu.Lock()
	b.calls++
	b.mu.Unlock()
	select {
	case <-ctx.Done():
		b.mu.Lock()
		b.cancelled = true
		b.mu.Unlock()
		return ModelReply{}, ctx.Err()
	case <-time.After(time.Minute):
		return callReply(ToolWriteFile, map[string]any{"path": "late.txt", "content": "x"}), nil
	}
}

// TestLoopDoneBeforeTheFinish: Options.LoopDone is called once, after the
// model's last answer and before the patch is extracted and the final
// record written (the queue then hands the job's lane to its next job),
// and the run's outcome is the same; it comes before the last answer's
// save.
func TestLoopDoneBeforeTheFinish(t *testing.T) {
	f := newFixture(t)
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		func(ModelRequest) (ModelReply, error) {
			return callReply(ToolWriteFile, map[string]any{"path": "one.txt", "content": "1\n"}), nil
		},
		finalTurn("done"),
	}}
	opts := f.opts(testTask("handoff"), m)
	var calls, asked int
	var patchThen, resultThen string
	savedStep := -1
	opts.LoopDone = func() {
		calls++
		asked = len(m.requests())
		if st, _, err := loadState(sessionDir(opts.Config, opts.Task.Workspace, opts.Task.Session)); err == nil && st != nil {
			savedStep = st.Step
		}
		dir := runrec.Dir(filepath.Join(f.data, "runs", opts.RunID))
		if _, err := os.Stat(dir.Path(runrec.PatchFile)); err == nil {
			patchThen = "written"
		}
		if r, err := dir.ReadResult(); err == nil {
			resultThen = r.Status
		}
	}
	opts.RunID = "r-handoff"
	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != runrec.StatusSucceeded || strings.Join(res.FilesChanged, ",") != "one.txt" {
		t.Fatalf("run: %s, files %v: %s", res.Status, res.FilesChanged, res.Error)
	}
	if calls != 1 || asked != 2 {
		t.Fatalf("LoopDone called %d times, after %d model requests; want once, after 2", calls, asked)
	}
	if patchThen != "" || runrec.Final(resultThen) {
		t.Fatalf("at LoopDone the patch was %q and the record %q: the finish had begun", patchThen, resultThen)
	}
	// The lane is handed over as soon as the last answer is in, before
	// that answer's save.
	if savedStep != 1 {
		t.Fatalf("at LoopDone the session state was saved at step %d, want 1", savedStep)
	}
}

// TestClaimOverlapsTheFirstRequest: Options.Claim is called once, while
// the round's first model request is out and before the run folder
// exists; the run then goes on as before.
func TestClaimOverlapsTheFirstRequest(t *testing.T) {
	f := newFixture(t)
	first, requested := signalling(callReply(ToolWriteFile, map[string]any{"path": "one.txt", "content": "1\n"}))
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){first, finalTurn("done")}}
	opts := f.opts(testTask("claim"), m)
	opts.RunID = "r-claim"
	runDir := filepath.Join(f.data, "runs", opts.RunID)
	var claims int
	var late, folder bool
	opts.Claim = func(context.Context) (bool, error) {
		claims++
		select {
		case <-requested:
		case <-time.After(time.Minute):
			late = true
		}
		_, err := os.Stat(runDir)
		folder = err == nil
		return true, nil
	}
	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if claims != 1 || late || folder {
		t.Fatalf("claim: %d calls, request not out first %v, run folder there %v (want 1, false, false)", claims, late, folder)
	}
	if res.Status != runrec.StatusSucceeded || strings.Join(res.FilesChanged, ",") != "one.txt" || len(m.requests()) != 2 {
		t.Fatalf("run: %s, files %v, %d requests: %s", res.Status, res.FilesChanged, len(m.requests()), res.Error)
	}
}

// TestClaimLostLeavesNothing: a claim another run holds, or one the store
// cannot answer, ends the run before anything is made: ErrNotClaimed (or
// the store's error), the early request cancelled and waited for, no run
// folder, no session state, no worktree taken.
func TestClaimLostLeavesNothing(t *testing.T) {
	storeDown := errors.New("store down")
	for _, tc := range []struct {
		name string
		won  bool
		err  error
		want error
	}{{"lost", false, nil, ErrNotClaimed}, {"store-down", false, storeDown, storeDown}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			blocking := &blockingModel{}
			task := testTask("claim-" + tc.name)
			task.TimeoutSeconds = 3600
			opts := f.opts(task, blocking)
			opts.RunID = "r-claim-" + tc.name
			opts.Claim = func(context.Context) (bool, error) {
				// The early request is out before the claim answers.
				for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(time.Millisecond) {
					blocking.mu.Lock()
					n := blocking.calls
					blocking.mu.Unlock()
					if n > 0 {
						break
					}
				}
				return tc.won, tc.err
			}
			_, err := Run(context.Background(), opts)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run: %v, want %v", err, tc.want)
			}
			blocking.mu.Lock()
			calls, cancelled := blocking.calls, blocking.cancelled
			blocking.mu.Unlock()
			if calls != 1 || !cancelled {
				t.Fatalf("early request: %d calls, cancelled %v (want 1, cancelled)", calls, cancelled)
			}
			sess := sessionDir(opts.Config, task.Workspace, task.Session)
			for _, p := range []string{filepath.Join(f.data, "runs"), filepath.Join(sess, "state.json"), filepath.Join(f.data, "worktrees")} {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s: %v, want it absent", p, err)
				}
			}
		})
	}
}
