package runtask

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/sandbox"
)

// gitEnv is an isolated git environment with fixed identities and dates.
func gitEnv(home string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LANG=C", "LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=Test Author", "GIT_AUTHOR_EMAIL=author@example.test",
		"GIT_COMMITTER_NAME=Test Committer", "GIT_COMMITTER_EMAIL=committer@example.test",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
	}
}

// git runs git in dir and fails the test on error.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := gitErr(dir, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(out)
}

func gitErr(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-c", "init.defaultBranch=main", "-c", "core.hooksPath=/dev/null"}, args...)...)
	cmd.Dir = dir
	cmd.Env = gitEnv(filepath.Join(os.TempDir(), "nonexistent-home"))
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	return buf.String(), err
}

// newTestRepo makes a repository with a few files and one commit.
func newTestRepo(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "-q")
	if files == nil {
		files = map[string]string{
			"README.md":   "# demo\n",
			"main.go":     "package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n",
			".gitignore":  "build/\n*.log\n",
			"lib/util.go": "package lib\n\n// Answer is the answer.\nconst Answer = 41\n",
		}
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "initial")
	return dir
}

// testRole is a RolePolicy for tests.
type testRole struct {
	name       string
	prompt     string
	denyTools  []string
	commands   [][]string
	env        []string
	backend    string
	maxSteps   int
	budget     int64
	cmdTimeout time.Duration
	outLimit   int
	denyWrite  string // path prefix the role may not write
}

func (r *testRole) Name() string {
	if r.name == "" {
		return "implementer"
	}
	return r.name
}
func (r *testRole) SystemPrompt() string {
	if r.prompt == "" {
		return "You are a careful implementer."
	}
	return r.prompt
}
func (r *testRole) AllowsTool(tool string) bool { return !slices.Contains(r.denyTools, tool) }
func (r *testRole) CheckCommand(argv []string) error {
	for _, p := range r.commands {
		if len(argv) >= len(p) && slices.Equal(argv[:len(p)], p) {
			return nil
		}
	}
	return refusal.New("command-not-allowed", fmt.Sprintf("%q is not on the role's command allowlist", strings.Join(argv, " ")), "use an allowlisted command")
}
func (r *testRole) CheckWrite(p string) error {
	if r.denyWrite != "" && strings.HasPrefix(p, r.denyWrite) {
		return refusal.New("path-not-writable", p+" is not writable for this role", "write elsewhere")
	}
	return nil
}
func (r *testRole) EnvAllowlist() []string        { return r.env }
func (r *testRole) SandboxBackend() string        { return cmp.Or(r.backend, "none") }
func (r *testRole) MaxSteps() int                 { return r.maxSteps }
func (r *testRole) TokenBudget() int64            { return r.budget }
func (r *testRole) CommandTimeout() time.Duration { return r.cmdTimeout }
func (r *testRole) OutputLimit() int              { return r.outLimit }

// execSandbox runs commands directly (tests only): the env it is given is
// the complete environment.
type execSandbox struct {
	mu    sync.Mutex
	specs []sandbox.Spec
}

func (s *execSandbox) Name() string { return "test-exec" }
func (s *execSandbox) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	s.mu.Lock()
	s.specs = append(s.specs, spec)
	s.mu.Unlock()
	if spec.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, spec.Timeout)
		defer cancel()
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir, cmd.Env = spec.Dir, spec.Env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	res := sandbox.Result{Output: out.Bytes(), Duration: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		res.ExitCode, res.TimedOut = -1, true
	case errors.As(err, &ee):
		res.ExitCode = ee.ExitCode()
	default:
		return res, err
	}
	return res, nil
}

// scriptModel is an in-test ModelClient playing turns.
type scriptModel struct {
	mu    sync.Mutex
	turns []func(req ModelRequest) (ModelReply, error)
	reqs  []ModelRequest
	// after the script ends: finish with a final message
}

func (m *scriptModel) Complete(ctx context.Context, req ModelRequest) (ModelReply, error) {
	m.mu.Lock()
	n := len(m.reqs)
	cp := req
	cp.Messages = append([]openai.ChatCompletionMessage(nil), req.Messages...)
	m.reqs = append(m.reqs, cp)
	m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return ModelReply{}, err
	}
	if n >= len(m.turns) {
		return final("done"), nil
	}
	return m.turns[n](req)
}

func (m *scriptModel) requests() []ModelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]ModelRequest(nil), m.reqs...)
}

var callSeq atomic.Int64 // parallel tests build replies

// call builds a reply with one tool call.
func call(tool string, args any) func(ModelRequest) (ModelReply, error) {
	return func(ModelRequest) (ModelReply, error) { return callReply(tool, args), nil }
}

func callReply(tool string, args any) ModelReply {
	b, _ := json.Marshal(args)
	seq := callSeq.Add(1)
	return ModelReply{
		Message: openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{
			ID: fmt.Sprintf("call_%d", seq), Type: openai.ToolTypeFunction,
			Function: openai.FunctionCall{Name: tool, Arguments: string(b)},
		}}},
		FinishReason: "tool_calls",
		Usage:        &Usage{PromptTokens: 100, CompletionTokens: 10, TotalTokens: 110},
		Model:        "test-model",
	}
}

func final(text string) ModelReply {
	return ModelReply{Message: openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: text},
		FinishReason: "stop", Usage: &Usage{PromptTokens: 100, CompletionTokens: 5, TotalTokens: 105}, Model: "test-model"}
}

func finalTurn(text string) func(ModelRequest) (ModelReply, error) {
	return func(ModelRequest) (ModelReply, error) { return final(text), nil }
}

// signalling is a model turn answering reply that closes asked the first
// time the model is asked for it.
func signalling(reply ModelReply) (turn func(ModelRequest) (ModelReply, error), asked <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	return func(ModelRequest) (ModelReply, error) {
		once.Do(func() { close(ch) })
		return reply, nil
	}, ch
}

// testTask returns a valid task for session.
func testTask(session string) Task {
	return Task{TaskVersion: 1, ID: "t-test", Prompt: "Change the answer to 42.", Workspace: "demo",
		Capabilities: Capabilities{Tools: []string{"read", "write", "edit", "bash"}}, Session: session, TimeoutSeconds: 60}
}

// testEnv is a getenv for runs.
func testEnv(vals map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := vals[k]; ok {
			return v
		}
		if k == "PATH" {
			return os.Getenv("PATH")
		}
		return ""
	}
}

// fixture is one repository and data root.
type fixture struct {
	repo string
	data string
	env  map[string]string // the host environment (command allowlist, API keys)
	cfg  conductor.Config  // the knobs (DataRoot is set by opts)
	sb   *execSandbox
	role *testRole
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	return &fixture{
		repo: newTestRepo(t, nil),
		data: filepath.Join(t.TempDir(), "data"),
		env:  map[string]string{},
		sb:   &execSandbox{},
		role: &testRole{commands: [][]string{{"cat"}, {"sh", "-c"}, {"sleep"}, {"env"}, {"true"}}},
	}
}

func (f *fixture) opts(task Task, m ModelClient) Options {
	return Options{
		Task: task, Config: f.config(), Repo: f.repo, Model: m, ModelName: "test-model",
		ModelAlias: "test", Role: f.role, Sandbox: f.sb, Getenv: testEnv(f.env), Stderr: &bytes.Buffer{},
	}
}

func (f *fixture) config() conductor.Config {
	c := f.cfg
	c.DataRoot = f.data
	return c
}

func ptr[T any](v T) *T { return &v }

// memStore is an in-memory bus.Store for the parts runtask uses.
type memStore struct {
	bus.Store // nil: other methods panic
	mu        sync.Mutex
	runs      map[string]bus.Run
	cps       []bus.Checkpoint
	notes     []bus.Note
	nextNote  int64
}

func newMemStore() *memStore { return &memStore{runs: map[string]bus.Run{}} }

func (s *memStore) PutRun(_ context.Context, r bus.Run) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs[r.ID] = r
	return nil
}
func (s *memStore) GetRun(_ context.Context, id string) (bus.Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.runs[id]
	if !ok {
		return r, bus.ErrNotFound
	}
	return r, nil
}
func (s *memStore) PutCheckpoint(_ context.Context, c bus.Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cps = append(s.cps, c)
	return nil
}
func (s *memStore) LatestCheckpoint(_ context.Context, runID string) (bus.Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.cps) - 1; i >= 0; i-- {
		if s.cps[i].RunID == runID {
			return s.cps[i], nil
		}
	}
	return bus.Checkpoint{}, bus.ErrNotFound
}
func (s *memStore) AddNote(_ context.Context, n bus.Note) (bus.Note, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextNote++
	n.ID = s.nextNote
	s.notes = append(s.notes, n)
	return n, nil
}
func (s *memStore) PendingNotes(_ context.Context, runID string) ([]bus.Note, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []bus.Note
	for _, n := range s.notes {
		if n.RunID == runID && n.DeliveredAt == 0 {
			out = append(out, n)
		}
	}
	return out, nil
}
func (s *memStore) MarkNoteDelivered(_ context.Context, id int64, step int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.notes {
		if s.notes[i].ID == id {
			s.notes[i].DeliveredAt = step
		}
	}
	return nil
}

func busNote(runID, text string) bus.Note { return bus.Note{RunID: runID, Text: text} }
