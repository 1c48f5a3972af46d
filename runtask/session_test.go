package runtask

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/runrec"
)

// readTranscript parses every line of a run's transcript.
func readTranscript(t *testing.T, dir runrec.Dir) []transcriptLine {
	t.Helper()
	f, err := os.Open(dir.Path(runrec.TranscriptFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []transcriptLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var l transcriptLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("transcript line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

func types(lines []transcriptLine) string {
	var s []string
	for _, l := range lines {
		s = append(s, l.Type)
	}
	return strings.Join(s, ",")
}

// checkRecord asserts a run folder is complete and consistent with res.
func checkRecord(t *testing.T, f *fixture, res runrec.Result) []transcriptLine {
	t.Helper()
	dir := runrec.Dir(filepath.Join(f.data, "runs", res.RunID))
	onDisk, err := dir.ReadResult()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(onDisk)
	b, _ := json.Marshal(res)
	if !bytes.Equal(a, b) {
		t.Fatalf("result.json differs from the returned result:\n%s\n%s", a, b)
	}
	for _, name := range []string{runrec.TaskFile, runrec.StderrFile, runrec.PatchFile} {
		if _, err := os.Stat(dir.Path(name)); err != nil {
			t.Fatalf("run folder lacks %s: %v", name, err)
		}
	}
	if _, err := LoadTask(dir.Path(runrec.TaskFile)); err != nil {
		t.Fatalf("task.json: %v", err)
	}
	if res.RunID == "" || res.TaskID == "" || res.Session == "" || res.Role == "" || res.BaseCommit == "" || res.StartedAt.IsZero() || res.FinishedAt.IsZero() || res.ModelAlias == "" || res.Model == "" {
		t.Fatalf("incomplete result: %+v", res)
	}
	lines := readTranscript(t, dir)
	if last := lines[len(lines)-1]; last.Type != lineStop || last.Status != res.Status {
		t.Fatalf("transcript does not end with the stop line: %+v", last)
	}
	return lines
}

func TestRunSucceeds(t *testing.T) {
	f := newFixture(t)
	f.role.env = []string{"GOFLAGS", "OPENAI_API_KEY"}
	f.env = map[string]string{"GOFLAGS": "-count=1", "OPENAI_API_KEY": "sk-live-SECRET", "GITEA_TOKEN": "gt-SECRET"}
	brief := filepath.Join(t.TempDir(), "brief.md")
	if err := os.WriteFile(brief, []byte("## Brief\nKeep it small.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	task := testTask("s1")
	task.Brief = "brief.md"
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		call(ToolListDir, map[string]any{}),
		call(ToolReadFile, map[string]any{"path": "lib/util.go"}),
		call(ToolEditFile, map[string]any{"path": "lib/util.go", "old_string": "= 41", "new_string": "= 42"}),
		call(ToolWriteFile, map[string]any{"path": "build/out.txt", "content": "ignored\n"}),
		call(ToolRunCommand, map[string]any{"argv": []string{"env"}}),
		finalTurn("Changed the answer."),
	}}
	opts := f.opts(task, m)
	opts.TaskPath = filepath.Join(filepath.Dir(brief), "task.json")
	var events bytes.Buffer
	opts.Events, opts.JSON = &events, true
	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != runrec.StatusSucceeded || res.Steps != 6 || res.Error != "" {
		t.Fatalf("result: %+v", res)
	}
	if *res.TotalTokens != 5*110+105 || *res.PromptTokens != 600 {
		t.Fatalf("tokens: %d %d", *res.TotalTokens, *res.PromptTokens)
	}
	if !slices.Equal(res.FilesChanged, []string{"lib/util.go"}) || res.PatchID == "" {
		t.Fatalf("files %v patch-id %q", res.FilesChanged, res.PatchID)
	}
	lines := checkRecord(t, f, res)
	if got := types(lines); got != "system,user,model,tool_call,tool_result,model,tool_call,tool_result,model,tool_call,tool_result,model,tool_call,tool_result,model,tool_call,tool_result,model,stop" {
		t.Fatalf("transcript types: %s", got)
	}
	diff, _ := os.ReadFile(filepath.Join(f.data, "runs", res.RunID, runrec.PatchFile))
	if !strings.Contains(string(diff), "+const Answer = 42") || strings.Contains(string(diff), "build/out.txt") {
		t.Fatalf("patch.diff:\n%s", diff)
	}
	reqs := m.requests()
	if sys := reqs[0].Messages[0]; sys.Role != "system" || sys.Content != "You are a careful implementer.\n\n## Brief\nKeep it small." {
		t.Fatalf("system prompt = %q", sys.Content)
	}
	if u := reqs[0].Messages[1]; u.Role != "user" || u.Content != task.Prompt {
		t.Fatalf("first user message = %+v", u)
	}
	if len(reqs[0].Tools) != len(CanonicalTools) {
		t.Fatalf("tools offered: %d", len(reqs[0].Tools))
	}
	// The tool result of read_file reached the model.
	if tr := reqs[2].Messages[len(reqs[2].Messages)-1]; tr.Role != "tool" || !strings.Contains(tr.Content, "const Answer = 41") || tr.ToolCallID == "" {
		t.Fatalf("tool result message: %+v", tr)
	}
	// The command env: allowlisted, no credential anywhere.
	spec := f.sb.specs[0]
	envText := strings.Join(spec.Env, "\n")
	if !strings.Contains(envText, "GOFLAGS=-count=1") || !strings.Contains(envText, "HOME="+filepath.Join(f.data, "scratch")) {
		t.Fatalf("command env: %q", spec.Env)
	}
	all, _ := json.Marshal(reqs)
	for _, secret := range []string{"sk-live-SECRET", "gt-SECRET"} {
		if strings.Contains(envText, secret) || strings.Contains(string(all), secret) {
			t.Fatalf("secret %s reached a command or the model", secret)
		}
		filepath.Walk(f.data, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
					t.Errorf("secret %s in %s", secret, p)
				}
			}
			return nil
		})
	}
	// Worktree: released to the pool, reset to base.
	if res.Worktree != "" {
		t.Fatalf("worktree not released: %s", res.Worktree)
	}
	// Events: JSONL, ending with the result.
	evLines := strings.Split(strings.TrimSpace(events.String()), "\n")
	var last Event
	if err := json.Unmarshal([]byte(evLines[len(evLines)-1]), &last); err != nil || last.Event != "result" || last.Result.RunID != res.RunID {
		t.Fatalf("last event %q: %v", evLines[len(evLines)-1], err)
	}
}

// loopModel calls the same tool forever.
func loopModel(tool string, args func(n int) any) *scriptModel {
	m := &scriptModel{}
	for i := 0; i < 100; i++ {
		m.turns = append(m.turns, call(tool, args(i)))
	}
	return m
}

func TestRunLimits(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(f *fixture, task *Task) (ModelClient, context.Context)
		status  string
		errText string
		steps   int
	}{
		{"max steps from task", func(f *fixture, task *Task) (ModelClient, context.Context) {
			task.MaxSteps = 3
			return loopModel(ToolReadFile, func(n int) any { return map[string]any{"path": "README.md", "start_line": n + 1} }), context.Background()
		}, runrec.StatusBudget, "step limit of 3 reached", 3},
		{"max steps from environment", func(f *fixture, task *Task) (ModelClient, context.Context) {
			f.cfg.MaxToolSteps = 2 // the operator's WORKER_MAX_TOOL_STEPS
			return loopModel(ToolListDir, func(n int) any { return map[string]any{"path": []string{"lib", "."}[n%2]} }), context.Background()
		}, runrec.StatusBudget, "step limit of 2 reached", 2},
		{"operator's steps under the role's ceiling", func(f *fixture, task *Task) (ModelClient, context.Context) {
			f.role.maxSteps, f.cfg.MaxToolSteps = 30, 5 // role maxSteps 30, WORKER_MAX_TOOL_STEPS=5
			return loopModel(ToolListDir, func(n int) any { return map[string]any{"path": []string{"lib", "."}[n%2]} }), context.Background()
		}, runrec.StatusBudget, "step limit of 5 reached", 5},
		{"operator's steps over the role's ceiling", func(f *fixture, task *Task) (ModelClient, context.Context) {
			f.role.maxSteps, f.cfg.MaxToolSteps = 30, 100 // role maxSteps 30, WORKER_MAX_TOOL_STEPS=100
			return loopModel(ToolWriteFile, func(n int) any { return map[string]any{"path": fmt.Sprintf("f%d.txt", n), "content": "x\n"} }), context.Background()
		}, runrec.StatusBudget, "step limit of 30 reached", 30},
		{"task's steps over the role's ceiling", func(f *fixture, task *Task) (ModelClient, context.Context) {
			f.role.maxSteps, task.MaxSteps = 4, 40
			return loopModel(ToolListDir, func(n int) any { return map[string]any{"path": []string{"lib", "."}[n%2]} }), context.Background()
		}, runrec.StatusBudget, "step limit of 4 reached", 4},
		{"token budget", func(f *fixture, task *Task) (ModelClient, context.Context) {
			task.TokenBudget = 250
			return loopModel(ToolReadFile, func(n int) any { return map[string]any{"path": "README.md", "end_line": n + 1} }), context.Background()
		}, runrec.StatusBudget, "token budget of 250 reached (330 used)", 3},
		{"stuck loop", func(f *fixture, task *Task) (ModelClient, context.Context) {
			return loopModel(ToolReadFile, func(int) any { return map[string]any{"path": "README.md"} }), context.Background()
		}, runrec.StatusStuck, "the same call returned the same result 3 times (read_file)", 3},
		{"wall clock", func(f *fixture, task *Task) (ModelClient, context.Context) {
			task.TimeoutSeconds = 1
			return &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
				call(ToolListDir, map[string]any{}),
				func(ModelRequest) (ModelReply, error) { time.Sleep(2 * time.Second); return final("late"), nil },
			}}, context.Background()
		}, runrec.StatusTimeout, "wall-clock limit of 1s reached", -1}, // steps: 0 or 1, as fast as the machine is
		{"cancelled", func(f *fixture, task *Task) (ModelClient, context.Context) {
			ctx, cancel := context.WithCancel(context.Background())
			return &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
				call(ToolListDir, map[string]any{}),
				func(ModelRequest) (ModelReply, error) { cancel(); return ModelReply{}, context.Canceled },
			}}, ctx
		}, runrec.StatusCancelled, "cancelled", 1},
		{"model error", func(f *fixture, task *Task) (ModelClient, context.Context) {
			return &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
				func(ModelRequest) (ModelReply, error) { return ModelReply{}, errors.New("server answered non-JSON") },
			}}, context.Background()
		}, runrec.StatusFailed, "model: server answered non-JSON", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			task := testTask("limits")
			m, ctx := tc.setup(f, &task)
			res, err := Run(ctx, f.opts(task, m))
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.status || res.Error != tc.errText || (tc.steps >= 0 && res.Steps != tc.steps) || res.Steps > 1 && tc.steps < 0 {
				t.Fatalf("status %q error %q steps %d; want %q %q %d", res.Status, res.Error, res.Steps, tc.status, tc.errText, tc.steps)
			}
			checkRecord(t, f, res)
		})
	}
}

func TestCutOffReplyContinues(t *testing.T) {
	f := newFixture(t)
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		func(ModelRequest) (ModelReply, error) {
			r := final("I will now expl")
			r.FinishReason = "length"
			return r, nil
		},
		finalTurn("done"),
	}}
	res, err := Run(context.Background(), f.opts(testTask("cut"), m))
	if err != nil || res.Status != runrec.StatusSucceeded || res.Steps != 2 {
		t.Fatalf("%v %+v", err, res)
	}
	msgs := m.requests()[1].Messages
	if last := msgs[len(msgs)-1]; last.Role != "user" || last.Content != cutOffNudge {
		t.Fatalf("after a cut-off reply: %+v", last)
	}
}

func TestRoleRefusesTools(t *testing.T) {
	f := newFixture(t)
	f.role.denyTools = CanonicalTools
	_, err := Run(context.Background(), f.opts(testTask("x"), &scriptModel{}))
	var rf *refusal.Refusal
	if !errors.As(err, &rf) || rf.Code != "tools-not-allowed" {
		t.Fatalf("err = %v", err)
	}
	// A tool the role forbids is not offered, and a call to it is an error the model sees.
	f.role.denyTools = []string{ToolRunCommand}
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){call(ToolRunCommand, map[string]any{"argv": []string{"true"}})}}
	res, err := Run(context.Background(), f.opts(testTask("y"), m))
	if err != nil || res.Status != runrec.StatusSucceeded {
		t.Fatalf("%v %+v", err, res)
	}
	reqs := m.requests()
	for _, tool := range reqs[0].Tools {
		if tool.Function.Name == ToolRunCommand {
			t.Fatal("run_command offered")
		}
	}
	if last := reqs[1].Messages[len(reqs[1].Messages)-1]; !strings.Contains(last.Content, "not allowed for this task and role") {
		t.Fatalf("tool result: %q", last.Content)
	}
}

func TestFollowUpContinuesSession(t *testing.T) {
	f := newFixture(t)
	task := testTask("refine")
	m1 := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		call(ToolWriteFile, map[string]any{"path": "NEW.md", "content": "first\n"}),
		finalTurn("done"),
	}}
	res1, err := Run(context.Background(), f.opts(task, m1))
	if err != nil || res1.Status != runrec.StatusSucceeded {
		t.Fatalf("%v %+v", err, res1)
	}
	// Without a follow-up, the finished session refuses.
	_, err = Run(context.Background(), f.opts(task, &scriptModel{}))
	var rf *refusal.Refusal
	if !errors.As(err, &rf) || rf.Code != "session-finished" {
		t.Fatalf("err = %v", err)
	}
	// The same run id is answered from its record.
	again := f.opts(task, &scriptModel{})
	again.RunID = res1.RunID
	if r, err := Run(context.Background(), again); err != nil || r.RunID != res1.RunID || r.Status != res1.Status {
		t.Fatalf("idempotent rerun: %v %+v", err, r)
	}
	m2 := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		call(ToolReadFile, map[string]any{"path": "NEW.md"}),
		call(ToolEditFile, map[string]any{"path": "NEW.md", "old_string": "first", "new_string": "second"}),
		finalTurn("fixed"),
	}}
	o := f.opts(task, m2)
	o.FollowUp = "Your patch had these problems: NEW.md must say second."
	res2, err := Run(context.Background(), o)
	if err != nil || res2.Status != runrec.StatusSucceeded || res2.RunID == res1.RunID {
		t.Fatalf("%v %+v", err, res2)
	}
	reqs := m2.requests()
	msgs := reqs[0].Messages
	if last := msgs[len(msgs)-1]; last.Role != "user" || last.Content != o.FollowUp {
		t.Fatalf("refinement message: %+v", last)
	}
	if len(msgs) != 6 { // system, user, assistant+call, tool, assistant final, follow-up
		t.Fatalf("conversation has %d messages", len(msgs))
	}
	if tr := reqs[1].Messages[len(reqs[1].Messages)-1]; tr.Content != "first\n" {
		t.Fatalf("the worktree did not carry the first round: %q", tr.Content)
	}
	diff, _ := os.ReadFile(filepath.Join(f.data, "runs", res2.RunID, runrec.PatchFile))
	if !strings.Contains(string(diff), "+second") {
		t.Fatalf("diff:\n%s", diff)
	}
}

func TestNotesDelivered(t *testing.T) {
	f := newFixture(t)
	store := newMemStore()
	var runID string
	m := &scriptModel{}
	m.turns = []func(ModelRequest) (ModelReply, error){
		func(req ModelRequest) (ModelReply, error) {
			// The operator leaves a note while the model is mid-run.
			if _, err := store.AddNote(context.Background(), busNote(runID, "use tabs, not spaces")); err != nil {
				return ModelReply{}, err
			}
			return callReply(ToolListDir, map[string]any{}), nil
		},
		finalTurn("ok"),
	}
	task := testTask("notes")
	task.Harness = "code"
	o := f.opts(task, m)
	o.Store = store
	o.RunID = "r-notes-1"
	runID = o.RunID
	res, err := Run(context.Background(), o)
	if err != nil || res.Status != runrec.StatusSucceeded {
		t.Fatalf("%v %+v", err, res)
	}
	msgs := m.requests()[1].Messages
	if last := msgs[len(msgs)-1]; last.Role != "user" || last.Content != notePrefix+"use tabs, not spaces" {
		t.Fatalf("note not in the next request: %+v", last)
	}
	if store.notes[0].DeliveredAt != 2 {
		t.Fatalf("delivered at %d", store.notes[0].DeliveredAt)
	}
	if run, _ := store.GetRun(context.Background(), res.RunID); run.Status != runrec.StatusSucceeded || run.PatchID != res.PatchID || run.HarnessAlias != "code" {
		t.Fatalf("store run: %+v", run)
	}
}

func TestCheckpointResumeAndDrift(t *testing.T) {
	for _, tc := range []struct {
		name        string
		tamper      bool
		acceptDrift bool
		want        string
	}{
		{"resume from checkpoint", false, false, runrec.StatusSucceeded},
		{"drift stops", true, false, StatusDrift},
		{"drift accepted", true, true, runrec.StatusSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.cfg.CheckpointEvery = ptr(2)
			store := newMemStore()
			ctx, cancel := context.WithCancel(context.Background())
			m1 := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
				call(ToolWriteFile, map[string]any{"path": "a.txt", "content": "A\n"}),
				call(ToolWriteFile, map[string]any{"path": "b.txt", "content": "B\n"}),
				func(ModelRequest) (ModelReply, error) { cancel(); return ModelReply{}, ctx.Err() },
			}}
			o := f.opts(testTask("cp"), m1)
			o.Store = store
			res, err := Run(ctx, o)
			if err != nil || res.Status != runrec.StatusCancelled || res.Worktree == "" {
				t.Fatalf("%v %+v", err, res)
			}
			cp, err := store.LatestCheckpoint(context.Background(), res.RunID)
			if err != nil || cp.Step != 2 || len(cp.Files) != 2 || cp.Files[0].Path != "a.txt" || len(cp.Files[0].Hash) != 64 {
				t.Fatalf("checkpoint %+v %v", cp, err)
			}
			if bytes.Contains(cp.History, []byte("sk-")) || !bytes.Contains(cp.History, []byte("write_file")) {
				t.Fatalf("history %s", cp.History)
			}
			// The session folder is lost (another host): resume from the store.
			if err := os.RemoveAll(filepath.Join(f.data, "sessions")); err != nil {
				t.Fatal(err)
			}
			if tc.tamper {
				if err := os.WriteFile(filepath.Join(res.Worktree, "a.txt"), []byte("changed by someone\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			m2 := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
				call(ToolWriteFile, map[string]any{"path": "c.txt", "content": "C\n"}),
				finalTurn("done"),
			}}
			o2 := f.opts(Task{}, m2)
			o2.Store, o2.AcceptDrift = store, tc.acceptDrift
			res2, err := Resume(context.Background(), o2, res.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if res2.Status != tc.want || res2.RunID != res.RunID {
				t.Fatalf("resumed: %+v", res2)
			}
			if tc.want == StatusDrift {
				if !strings.Contains(res2.Error, "a.txt") || len(m2.requests()) != 0 {
					t.Fatalf("drift: %q, %d model calls", res2.Error, len(m2.requests()))
				}
				return
			}
			sys := m2.requests()[0].Messages[0].Content
			if !strings.Contains(sys, "## Resumed run") || !strings.Contains(sys, "step 2: write_file") || !strings.Contains(sys, "a.txt, b.txt") {
				t.Fatalf("system prompt: %s", sys)
			}
			if res2.Steps != 4 || !slices.Equal(res2.FilesChanged, []string{"a.txt", "b.txt", "c.txt"}) {
				t.Fatalf("resumed result: %+v", res2)
			}
			lines := checkRecord(t, f, res2)
			if !strings.Contains(types(lines), "stop,resume") {
				t.Fatalf("transcript: %s", types(lines))
			}
		})
	}
}

// TestCrashContinues kills a conductor (a child process running Run) with
// SIGKILL mid-run; the next run of the same session continues it.
func TestCrashContinues(t *testing.T) {
	if os.Getenv("RUNTASK_CRASH_CHILD") != "" {
		crashChild(t)
		return
	}
	f := newFixture(t)
	marker := filepath.Join(t.TempDir(), "mid-run")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashContinues$", "-test.v")
	cmd.Env = append(os.Environ(), "RUNTASK_CRASH_CHILD=1", "CHILD_REPO="+f.repo, "CHILD_DATA="+f.data, "CHILD_MARKER="+marker)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("child never reached the middle of the run:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// The transcript is readable up to the kill.
	runs, _ := os.ReadDir(filepath.Join(f.data, "runs"))
	if len(runs) != 1 {
		t.Fatalf("runs: %v", runs)
	}
	runID := runs[0].Name()
	lines := readTranscript(t, runrec.Dir(filepath.Join(f.data, "runs", runID)))
	if got := types(lines); got != "system,user,model,tool_call,tool_result,model,tool_call,tool_result" {
		t.Fatalf("transcript after the kill: %s", got)
	}
	// The next run of the same session continues in the same worktree.
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		call(ToolReadFile, map[string]any{"path": "one.txt"}),
		finalTurn("done"),
	}}
	res, err := Run(context.Background(), f.opts(testTask("crash"), m))
	if err != nil {
		t.Fatal(err)
	}
	if res.RunID != runID || res.Status != runrec.StatusSucceeded || res.Steps != 4 {
		t.Fatalf("continued: %+v", res)
	}
	reqs := m.requests()
	if n := len(reqs[0].Messages); n != 6 {
		t.Fatalf("continued conversation has %d messages", n)
	}
	if c := reqs[1].Messages[len(reqs[1].Messages)-1].Content; c != "1\n" {
		t.Fatalf("worktree content lost: %q", c)
	}
	if !slices.Equal(res.FilesChanged, []string{"one.txt", "two.txt"}) {
		t.Fatalf("files: %v", res.FilesChanged)
	}
}

func crashChild(t *testing.T) {
	f := &fixture{repo: os.Getenv("CHILD_REPO"), data: os.Getenv("CHILD_DATA"), env: map[string]string{}, sb: &execSandbox{},
		role: &testRole{}}
	marker := os.Getenv("CHILD_MARKER")
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		call(ToolWriteFile, map[string]any{"path": "one.txt", "content": "1\n"}),
		call(ToolWriteFile, map[string]any{"path": "two.txt", "content": "2\n"}),
		func(ModelRequest) (ModelReply, error) {
			os.WriteFile(marker, nil, 0o644)
			select {} // killed here
		},
	}}
	Run(context.Background(), f.opts(testTask("crash"), m))
	t.Fatal("the child run returned")
}

func TestSessionBusy(t *testing.T) {
	f := newFixture(t)
	started := make(chan struct{})
	release := make(chan struct{})
	m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
		func(ModelRequest) (ModelReply, error) { close(started); <-release; return final("x"), nil },
	}}
	done := make(chan error)
	go func() { _, err := Run(context.Background(), f.opts(testTask("busy"), m)); done <- err }()
	<-started
	_, err := Run(context.Background(), f.opts(testTask("busy"), &scriptModel{}))
	if !errors.Is(err, ErrSessionBusy) {
		t.Fatalf("err = %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

var _ = openai.ChatMessageRoleUser
