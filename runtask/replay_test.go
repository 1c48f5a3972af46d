package runtask

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// continueWith appends the reply and a tool result per call, as the loop does.
func continueWith(req ModelRequest, reply ModelReply, result string) ModelRequest {
	req.Messages = append(req.Messages, reply.Message)
	for _, c := range reply.Message.ToolCalls {
		req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: "tool", ToolCallID: c.ID, Content: result})
	}
	return req
}

func TestReplayPlaysNormalisedTurns(t *testing.T) {
	p := writeScript(t, `{"model":"recorded-model","turns":[
		{"error":{"status":429,"retryAfter":"30"}},
		{"content":"looking","toolCalls":[{"name":"read_file","arguments":{"path":"a.go"}}],"quirks":["calls-in-content-tag"]},
		{"expectLast":["package a"],"toolCalls":[{"name":"list_dir","arguments":{}}],"quirks":["arguments-object","missing-ids","no-usage"],"finishReason":"tool_call"},
		{"content":"finished"}
	]}`)
	c, err := NewReplay(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := baseRequest()
	r1, err := c.Complete(ctx, req) // the scripted 429 is retried at once
	if err != nil {
		t.Fatal(err)
	}
	if r1.Message.Content != "looking" || len(r1.Message.ToolCalls) != 1 || r1.Message.ToolCalls[0].Function.Arguments != `{"path":"a.go"}` ||
		r1.FinishReason != "tool_calls" || r1.Model != "recorded-model" || r1.Usage == nil {
		t.Fatalf("turn 1: %+v", r1)
	}
	req = continueWith(req, r1, "package a")
	r2, err := c.Complete(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if id := r2.Message.ToolCalls[0].ID; id == "" || id == r1.Message.ToolCalls[0].ID || r2.Usage != nil || r2.FinishReason != "tool_calls" {
		t.Fatalf("turn 2: %+v", r2)
	}
	req = continueWith(req, r2, "a.go")
	r3, err := c.Complete(ctx, req)
	if err != nil || r3.Message.Content != "finished" || r3.FinishReason != "stop" {
		t.Fatalf("turn 3: %+v %v", r3, err)
	}
	// Out of turns: a plain "done" so loops end.
	r4, err := c.Complete(ctx, continueWith(req, r3, ""))
	if err != nil || r4.Message.Content != "done" || r4.FinishReason != "stop" || len(r4.Message.ToolCalls) != 0 {
		t.Fatalf("after the script: %+v %v", r4, err)
	}
}

func TestReplayDivergenceIsAnError(t *testing.T) {
	p := writeScript(t, `[{"expect":["the secret plan"],"forbid":["fix the bug"],"content":"x"}]`)
	c, err := NewReplay(p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Complete(context.Background(), baseRequest())
	if err == nil || !strings.Contains(err.Error(), "diverged from the recording") ||
		!strings.Contains(err.Error(), `does not contain "the secret plan"`) || !strings.Contains(err.Error(), `forbidden "fix the bug"`) || !strings.Contains(err.Error(), p) {
		t.Fatalf("err %v", err)
	}
}

func TestReplayErrors(t *testing.T) {
	if _, err := NewReplay(filepath.Join(t.TempDir(), "absent.json")); err == nil || !strings.Contains(err.Error(), "absent.json") {
		t.Fatalf("missing file: %v", err)
	}
	p := writeScript(t, `[{"contnet":"x"}]`)
	if _, err := NewReplay(p); err == nil || !strings.Contains(err.Error(), `turns[0]: unknown field "contnet"`) {
		t.Fatalf("bad script: %v", err)
	}
	// A scripted 400 is not retried and reaches the caller.
	p = writeScript(t, `[{"error":{"status":400,"message":"context length exceeded"}},{"content":"never"}]`)
	c, err := NewReplay(p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Complete(context.Background(), baseRequest())
	var me *ModelError
	if !errors.As(err, &me) || me.Status != 400 || !strings.Contains(err.Error(), "context length exceeded") {
		t.Fatalf("err %v", err)
	}
	// Garbage is reported like a live server's.
	p = writeScript(t, `[{"content":"x","quirks":["garbage"]}]`)
	c, _ = NewReplay(p)
	if _, err := c.Complete(context.Background(), baseRequest()); err == nil || !strings.Contains(err.Error(), "answer is not JSON") {
		t.Fatalf("garbage: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Complete(ctx, baseRequest()); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestReplayThroughRegistry(t *testing.T) {
	p := writeScript(t, `[{"content":"hi"}]`)
	r, err := LoadRegistry("", envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := r.Lookup(ReplayPrefix + p)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(spec, envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if reply, err := c.Complete(context.Background(), baseRequest()); err != nil || reply.Message.Content != "hi" {
		t.Fatalf("%+v %v", reply, err)
	}
}

// TestDemoScript plays testdata/models/demo.json against the demo
// repository the way the tool loop would, applying its edit for real, and
// checks the story holds: the tests fail before the edit and pass after.
func TestDemoScript(t *testing.T) {
	script := filepath.Join("..", "testdata", "models", "demo.json")
	repo := t.TempDir()
	if err := os.CopyFS(repo, os.DirFS(filepath.Join("..", "testdata", "models", "demo-repo"))); err != nil {
		t.Fatal(err)
	}
	c, err := NewReplay(script)
	if err != nil {
		t.Fatal(err)
	}
	goBin, goErr := exec.LookPath("go")
	runTests := func() (string, bool) {
		if goErr != nil {
			return "ok  \texample.com/demo/mathx\t0.001s (go not installed; not run)", true
		}
		cmd := exec.Command(goBin, "test", "./...")
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		return string(out), err == nil
	}
	if out, ok := runTests(); ok {
		t.Fatalf("the demo repository should fail its tests before the fix:\n%s", out)
	}

	req := ModelRequest{
		Messages: []openai.ChatCompletionMessage{
			{Role: "system", Content: "You are a coding worker."},
			{Role: "user", Content: "mathx.Clamp returns the wrong value above the upper bound. Fix it and run go test ./..."},
		},
		Tools: []openai.Tool{readFileTool, listDirTool},
	}
	for _, name := range []string{"edit_file", "run_command"} {
		req.Tools = append(req.Tools, openai.Tool{Type: "function", Function: &openai.FunctionDefinition{Name: name, Parameters: json.RawMessage(`{"type":"object"}`)}})
	}
	var sequence []string
	for step := 0; step < 10; step++ {
		reply, err := c.Complete(context.Background(), req)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if reply.Usage == nil || reply.Usage.TotalTokens == 0 {
			t.Errorf("step %d: usage %+v", step, reply.Usage)
		}
		req.Messages = append(req.Messages, reply.Message)
		if len(reply.Message.ToolCalls) == 0 {
			if reply.FinishReason != "stop" || !strings.Contains(reply.Message.Content, "Clamp") {
				t.Fatalf("final turn: %+v", reply)
			}
			sequence = append(sequence, "summary")
			break
		}
		for _, call := range reply.Message.ToolCalls {
			sequence = append(sequence, call.Function.Name)
			var args struct {
				Path      string   `json:"path"`
				OldString string   `json:"old_string"`
				NewString string   `json:"new_string"`
				Argv      []string `json:"argv"`
			}
			if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil {
				t.Fatalf("%s arguments %q: %v", call.Function.Name, call.Function.Arguments, err)
			}
			var result string
			switch call.Function.Name {
			case "list_dir":
				entries, err := os.ReadDir(filepath.Join(repo, args.Path))
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range entries {
					result += e.Name()
					if e.IsDir() {
						result += "/"
					}
					result += "\n"
				}
			case "read_file":
				b, err := os.ReadFile(filepath.Join(repo, args.Path))
				if err != nil {
					t.Fatal(err)
				}
				result = string(b)
			case "edit_file":
				p := filepath.Join(repo, args.Path)
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if n := strings.Count(string(b), args.OldString); n != 1 {
					t.Fatalf("edit_file old_string matches %d times", n)
				}
				if err := os.WriteFile(p, []byte(strings.Replace(string(b), args.OldString, args.NewString, 1)), fs.FileMode(0o644)); err != nil {
					t.Fatal(err)
				}
				result = "edited " + args.Path
			case "run_command":
				if strings.Join(args.Argv, " ") != "go test ./..." {
					t.Fatalf("argv %q", args.Argv)
				}
				out, ok := runTests()
				if !ok {
					t.Fatalf("the demo's fix does not make the tests pass:\n%s", out)
				}
				result = out
			default:
				t.Fatalf("unexpected tool %s", call.Function.Name)
			}
			req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: "tool", ToolCallID: call.ID, Content: result})
		}
	}
	if got := strings.Join(sequence, ","); got != "list_dir,read_file,edit_file,run_command,summary" {
		t.Fatalf("sequence %s", got)
	}
}

// TestReplayTranscript replays a run transcript written with the tool
// loop's own line type, so a change of the transcript format shows here.
func TestReplayTranscript(t *testing.T) {
	calls := openai.ChatCompletionMessage{Role: "assistant", Content: "Reading.", ToolCalls: []openai.ToolCall{
		{ID: "call_1", Type: "function", Function: openai.FunctionCall{Name: "read_file", Arguments: `{"path":"a.go"}`}},
	}}
	final := openai.ChatCompletionMessage{Role: "assistant", Content: "Done: fixed a.go."}
	lines := []transcriptLine{
		{Type: lineSystem, Text: "you are a worker"},
		{Type: lineUser, Text: "fix a.go"},
		{Type: lineModel, Step: 1, Message: &calls, FinishReason: "tool_calls", Usage: &Usage{PromptTokens: 100, CompletionTokens: 10, TotalTokens: 110}},
		{Type: lineToolCall, Step: 1, CallID: "call_1", Tool: "read_file", Arguments: `{"path":"a.go"}`},
		{Type: lineToolResult, Step: 1, CallID: "call_1", Content: "package a"},
		{Type: lineModel, Step: 2, Message: &final, FinishReason: "stop", UsageUnknown: true},
	}
	var buf strings.Builder
	for _, l := range lines {
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	buf.WriteString(`{"type":"model","message":{"content":"cut sh`) // a crash mid-line
	p := filepath.Join(t.TempDir(), "transcript.jsonl")
	if err := os.WriteFile(p, []byte(buf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := NewReplay(p)
	if err != nil {
		t.Fatal(err)
	}
	req := baseRequest()
	r1, err := c.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Message.Content != "Reading." || len(r1.Message.ToolCalls) != 1 || r1.Message.ToolCalls[0].ID != "call_1" ||
		r1.Message.ToolCalls[0].Function.Arguments != `{"path":"a.go"}` || r1.Usage == nil || r1.Usage.TotalTokens != 110 || r1.FinishReason != "tool_calls" {
		t.Fatalf("turn 1: %+v", r1)
	}
	r2, err := c.Complete(context.Background(), continueWith(req, r1, "package a"))
	if err != nil || r2.Message.Content != "Done: fixed a.go." || r2.Usage != nil || r2.FinishReason != "stop" {
		t.Fatalf("turn 2: %+v %v", r2, err)
	}

	for name, body := range map[string]string{
		"no model turns": `{"type":"user","text":"x"}` + "\n",
		"damaged line":   "not json\n" + `{"type":"user"}` + "\n",
	} {
		p := filepath.Join(t.TempDir(), "t.jsonl")
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := NewReplay(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}
