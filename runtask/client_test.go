package runtask

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// sleepRecorder replaces the retry wait and records it.
type sleepRecorder struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (s *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.delays = append(s.delays, d)
	s.mu.Unlock()
	return ctx.Err()
}

func startFake(t *testing.T, script string) *fakellm.Server {
	t.Helper()
	sc, err := fakellm.Parse([]byte(script))
	if err != nil {
		t.Fatalf("script: %v", err)
	}
	srv := fakellm.Start(*sc)
	t.Cleanup(srv.Close)
	return srv
}

func testSpec(t *testing.T, url string) ModelSpec {
	return ModelSpec{
		Alias: "test-" + strings.ReplaceAll(t.Name(), "/", "-"), BaseURL: url, Model: "qwen-test",
		Timeout: 10 * time.Second, MaxAttempts: 3, RetryBase: 100 * time.Millisecond, RetryMax: 2 * time.Second,
	}
}

func newTestClient(t *testing.T, spec ModelSpec, getenv func(string) string, opts ...ClientOption) ModelClient {
	t.Helper()
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	c, err := NewClient(spec, getenv, opts...)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return c
}

var readFileTool = openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
	Name: "read_file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`),
}}
var listDirTool = openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
	Name: "list_dir", Parameters: json.RawMessage(`{"type":"object"}`),
}}

func baseRequest() ModelRequest {
	return ModelRequest{
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: "you are a worker"},
			{Role: openai.ChatMessageRoleUser, Content: "fix the bug"},
		},
		Tools: []openai.Tool{readFileTool, listDirTool},
	}
}

type wantCall struct{ name, args string }

// TestQuirksThroughGoOpenAI plays each server quirk through the real
// go-openai client against fakellm and checks the normalised reply.
// quirkCase is one server answer and the normalised reply it must give.
type quirkCase struct {
	name      string
	turn      string
	content   string
	calls     []wantCall
	ids       []string // nil: only check unique, non-empty
	finish    string
	fixes     []string
	usageNil  bool
	wantUsage *Usage
}

func TestQuirksThroughGoOpenAI(t *testing.T) {
	two := `"toolCalls":[{"name":"read_file","arguments":{"path":"a.go"}},{"name":"list_dir","arguments":{"path":"."}}]`
	twoCalls := []wantCall{{"read_file", `{"path":"a.go"}`}, {"list_dir", `{"path":"."}`}}
	tests := []quirkCase{
		{name: "well formed", turn: `{` + two + `,"usage":{"promptTokens":11,"completionTokens":4}}`,
			calls: twoCalls, ids: []string{"call_1_0", "call_1_1"}, finish: "tool_calls", wantUsage: &Usage{11, 4, 15}},
		{name: "arguments object (llama.cpp)", turn: `{` + two + `,"quirks":["arguments-object"]}`,
			calls: twoCalls, finish: "tool_calls", fixes: []string{FixArgumentsObject}},
		{name: "missing ids (llama.cpp)", turn: `{` + two + `,"quirks":["missing-ids"]}`,
			calls: twoCalls, ids: []string{"call_1", "call_2"}, finish: "tool_calls", fixes: []string{FixMissingID}},
		{name: "duplicate ids", turn: `{` + two + `,"quirks":["duplicate-ids"]}`,
			calls: twoCalls, ids: []string{"call_0", "call_1"}, finish: "tool_calls", fixes: []string{FixDuplicateID}},
		{name: "uuid ids (mlx)", turn: `{` + two + `,"quirks":["uuid-ids"]}`,
			calls: twoCalls, finish: "tool_calls"},
		{name: "missing type", turn: `{` + two + `,"quirks":["missing-type"]}`,
			calls: twoCalls, finish: "tool_calls", fixes: []string{FixMissingType}},
		{name: "calls in content tags (ollama)", turn: `{"content":"I will look.",` + two + `,"quirks":["calls-in-content-tag"]}`,
			content: "I will look.", calls: twoCalls, finish: "tool_calls", fixes: []string{FixCallsInContent, FixFinishReason}},
		{name: "calls in content bare json (vllm wrong parser)", turn: `{` + two + `,"quirks":["calls-in-content-json"]}`,
			calls: twoCalls, finish: "tool_calls", fixes: []string{FixCallsInContent, FixFinishReason}},
		{name: "legacy function_call", turn: `{` + two + `,"quirks":["legacy-function-call"]}`,
			calls: twoCalls[:1], finish: "tool_calls", fixes: []string{FixFunctionCall}},
		{name: "finish tool_call (old mlx)", turn: `{` + two + `,"finishReason":"tool_call"}`,
			calls: twoCalls, finish: "tool_calls", fixes: []string{FixFinishReason}},
		{name: "finish stop with calls (vllm)", turn: `{` + two + `,"finishReason":"stop"}`,
			calls: twoCalls, finish: "tool_calls", fixes: []string{FixFinishReason}},
		{name: "finish function_call", turn: `{` + two + `,"finishReason":"function_call"}`,
			calls: twoCalls, finish: "tool_calls", fixes: []string{FixFinishReason}},
		{name: "finish tool_calls without calls", turn: `{"content":"all done","finishReason":"tool_calls"}`,
			content: "all done", finish: "stop", fixes: []string{FixFinishReason}},
		{name: "finish null", turn: `{"content":"all done","finishReason":"null"}`,
			content: "all done", finish: "stop", fixes: []string{FixFinishReason}},
		{name: "length kept", turn: `{"content":"partial","finishReason":"length"}`,
			content: "partial", finish: "length"},
		{name: "usage missing is nil, not zero", turn: `{"content":"hi","quirks":["no-usage"]}`,
			content: "hi", finish: "stop", usageNil: true, fixes: []string{FixUsageMissing}},
		{name: "think block in content (reasoning model, no reasoning parser)", turn: `{"content":"<think>\nThe user wants a summary.\n</think>\n\nall done"}`,
			content: "all done", finish: "stop", fixes: []string{FixThinkInContent}},
		{name: "a call mentioned while thinking is not a call", turn: `{"content":"<think>maybe <tool_call>{\"name\":\"read_file\",\"arguments\":{}}</tool_call>? no.</think>nothing to read"}`,
			content: "nothing to read", finish: "stop", fixes: []string{FixThinkInContent}},
		{name: "thinking then a call in content", turn: `{"content":"<think>read it first</think><tool_call>{\"name\":\"read_file\",\"arguments\":{\"path\":\"a.go\"}}</tool_call>"}`,
			calls: twoCalls[:1], finish: "tool_calls", fixes: []string{FixThinkInContent, FixCallsInContent, FixFinishReason}},
		{name: "closing tag only (the template sent the opening one)", turn: `{"content":"weighing options</think>\nanswer"}`,
			content: "answer", finish: "stop", fixes: []string{FixThinkInContent}},
		{name: "usage zero is zero", turn: `{"content":"hi","usage":{"promptTokens":0,"completionTokens":0}}`,
			content: "hi", finish: "stop", wantUsage: &Usage{}},
		{name: "everything at once", turn: `{` + two + `,"quirks":["arguments-object","missing-ids","missing-type","no-usage"],"finishReason":"stop"}`,
			calls: twoCalls, ids: []string{"call_1", "call_2"}, finish: "tool_calls", usageNil: true,
			fixes: []string{FixArgumentsObject, FixMissingID, FixMissingType, FixFinishReason, FixUsageMissing}},
		{name: "json answer naming no offered tool stays content", turn: `{"content":"{\"name\":\"delete_repo\",\"arguments\":{}}"}`,
			content: `{"name":"delete_repo","arguments":{}}`, finish: "stop"},
		{name: "invalid arguments string passes through", turn: `{"toolCalls":[{"name":"read_file","arguments":"{\"path\": "}]}`,
			calls: []wantCall{{"read_file", `{"path": `}}, finish: "tool_calls"},
	}
	// Every quirk, answered whole and streamed: the reassembled stream must
	// give the same reply.
	for _, mode := range []string{"json", "stream"} {
		for _, tt := range tests {
			t.Run(mode+"/"+tt.name, func(t *testing.T) { checkQuirk(t, mode == "stream", tt) })
		}
	}
}

func checkQuirk(t *testing.T, stream bool, tt quirkCase) {
	srv := startFake(t, `{"model":"qwen2.5-coder","turns":[`+tt.turn+`]}`)
	spec := testSpec(t, srv.URL())
	spec.Stream = stream
	c := newTestClient(t, spec, nil)
	reply, err := c.Complete(context.Background(), baseRequest())
	if stream {
		if req := srv.Requests()[0].Body; req == nil || !req.Stream || req.StreamOptions == nil || !req.StreamOptions.IncludeUsage {
			t.Errorf("a streaming client sent %+v", req)
		}
	}
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if reply.Message.Role != "assistant" || reply.Model != "qwen2.5-coder" {
		t.Errorf("role %q model %q", reply.Message.Role, reply.Model)
	}
	if reply.Message.Content != tt.content {
		t.Errorf("content %q, want %q", reply.Message.Content, tt.content)
	}
	if reply.FinishReason != tt.finish {
		t.Errorf("finish %q, want %q", reply.FinishReason, tt.finish)
	}
	if len(reply.Message.ToolCalls) != len(tt.calls) {
		t.Fatalf("calls %+v, want %v", reply.Message.ToolCalls, tt.calls)
	}
	seen := map[string]bool{}
	for i, c := range reply.Message.ToolCalls {
		if c.Function.Name != tt.calls[i].name || c.Function.Arguments != tt.calls[i].args {
			t.Errorf("call %d: %s(%s), want %s(%s)", i, c.Function.Name, c.Function.Arguments, tt.calls[i].name, tt.calls[i].args)
		}
		if c.Type != openai.ToolTypeFunction || c.ID == "" || seen[c.ID] {
			t.Errorf("call %d: type %q id %q (seen %v)", i, c.Type, c.ID, seen)
		}
		seen[c.ID] = true
		if tt.ids != nil && c.ID != tt.ids[i] {
			t.Errorf("call %d id %q, want %q", i, c.ID, tt.ids[i])
		}
	}
	if tt.usageNil != (reply.Usage == nil) {
		t.Errorf("usage %+v, want nil=%v", reply.Usage, tt.usageNil)
	}
	if tt.wantUsage != nil && (reply.Usage == nil || *reply.Usage != *tt.wantUsage) {
		t.Errorf("usage %+v, want %+v", reply.Usage, tt.wantUsage)
	}
	for _, f := range tt.fixes {
		if !containsString(reply.Quirks, f) {
			t.Errorf("quirks %v lack %q", reply.Quirks, f)
		}
	}
	if tt.fixes == nil && len(reply.Quirks) > 0 && tt.name == "well formed" {
		t.Errorf("well-formed answer reported fixes %v", reply.Quirks)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestIDsUniqueAcrossConversation: a server that numbers ids per turn
// (call_0 every time) gets fresh ids when the id is already in the history.
func TestIDsUniqueAcrossConversation(t *testing.T) {
	srv := startFake(t, `[{"toolCalls":[{"id":"call_0","name":"read_file","arguments":{}}]}]`)
	c := newTestClient(t, testSpec(t, srv.URL()), nil)
	req := baseRequest()
	req.Messages = append(req.Messages,
		openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "call_0", Type: "function", Function: openai.FunctionCall{Name: "list_dir", Arguments: "{}"}}}},
		openai.ChatCompletionMessage{Role: "tool", ToolCallID: "call_0", Content: "a.go"},
	)
	reply, err := c.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if id := reply.Message.ToolCalls[0].ID; id == "call_0" || id == "" {
		t.Fatalf("id %q repeats the history", id)
	}
}

// TestRequestFixes: what the server receives. Ollama answers 400 when an
// assistant message omits content (go-openai omits an empty one); empty
// tool results are sent as a placeholder; temperature 0 is sent.
func TestRequestFixes(t *testing.T) {
	srv := startFake(t, `{"rejectMissingContent":true,"turns":[{"content":"ok"}]}`)
	spec := testSpec(t, srv.URL())
	zero := 0.0
	spec.Temperature = &zero
	spec.MaxTokens = 512
	c := newTestClient(t, spec, nil)
	req := baseRequest()
	req.Messages = append(req.Messages,
		openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "call_9", Type: "function", Function: openai.FunctionCall{Name: "read_file", Arguments: `{"path":"empty.txt"}`}}}},
		openai.ChatCompletionMessage{Role: "tool", ToolCallID: "call_9", Content: ""},
	)
	reply, err := c.Complete(context.Background(), req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if !containsString(reply.Quirks, FixContentAbsent) || !containsString(reply.Quirks, FixEmptyToolResult) {
		t.Errorf("quirks %v", reply.Quirks)
	}
	got := srv.ChatRequests()[0]
	if got.Model != "qwen-test" || got.MaxTokens != 512 || got.Temperature == nil || *got.Temperature != 0 {
		t.Errorf("model %q max_tokens %d temperature %v", got.Model, got.MaxTokens, got.Temperature)
	}
	if len(got.ToolNames()) != 2 {
		t.Errorf("tools %v", got.ToolNames())
	}
	asst, tool := got.Messages[2], got.Messages[3]
	if string(asst.Content) != `""` || len(asst.ToolCalls) != 1 || asst.ToolCalls[0].ID != "call_9" {
		t.Errorf("assistant message sent as %+v", asst)
	}
	if tool.Text() != EmptyToolResult || tool.ToolCallID != "call_9" {
		t.Errorf("tool message sent as %+v", tool)
	}
}

func TestRetries(t *testing.T) {
	tests := []struct {
		name     string
		turns    string
		attempts int
		wantErr  string // "" : success
		status   int
		requests int
		delays   []time.Duration // exact delays; nil: check count and bounds
		ndelays  int
	}{
		{name: "429 then success", turns: `{"error":{"status":429}},{"content":"ok"}`, attempts: 3, requests: 2, ndelays: 1},
		{name: "503 twice then success", turns: `{"error":{"status":503}},{"error":{"status":502}},{"content":"ok"}`, attempts: 3, requests: 3, ndelays: 2},
		{name: "500 every time gives up", turns: `{"error":{"status":500,"message":"boom"}},{"error":{"status":500,"message":"boom"}},{"error":{"status":500,"message":"boom"}},{"content":"never"}`,
			attempts: 3, wantErr: "HTTP 500 after 3 attempts: boom", status: 500, requests: 3, ndelays: 2},
		{name: "Retry-After honoured", turns: `{"error":{"status":429,"retryAfter":"1"}},{"content":"ok"}`, attempts: 3, requests: 2, delays: []time.Duration{time.Second}},
		{name: "Retry-After capped", turns: `{"error":{"status":429,"retryAfter":"3600"}},{"content":"ok"}`, attempts: 3, requests: 2, delays: []time.Duration{2 * time.Second}},
		{name: "400 not retried", turns: `{"error":{"status":400,"message":"bad tool schema"}},{"content":"never"}`,
			attempts: 3, wantErr: "HTTP 400: bad tool schema (invalid_request_error)", status: 400, requests: 1},
		{name: "404 not retried", turns: `{"error":{"status":404,"body":"<html>not found</html>"}},{"content":"never"}`,
			attempts: 3, wantErr: `HTTP 404: answer: "<html>not found</html>"`, status: 404, requests: 1},
		{name: "501 not retried", turns: `{"error":{"status":501}},{"content":"never"}`, attempts: 3, wantErr: "HTTP 501", status: 501, requests: 1},
		{name: "one attempt", turns: `{"error":{"status":429}},{"content":"never"}`, attempts: 1, wantErr: "HTTP 429", status: 429, requests: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startFake(t, `[`+tt.turns+`]`)
			spec := testSpec(t, srv.URL())
			spec.MaxAttempts = tt.attempts
			rec := &sleepRecorder{}
			c := newTestClient(t, spec, nil, withSleep(rec.sleep))
			reply, err := c.Complete(context.Background(), baseRequest())
			if tt.wantErr == "" {
				if err != nil || reply.Message.Content != "ok" {
					t.Fatalf("reply %+v err %v", reply, err)
				}
			} else {
				var me *ModelError
				if !errors.As(err, &me) || !strings.Contains(err.Error(), tt.wantErr) || me.Status != tt.status {
					t.Fatalf("err %v, want a ModelError containing %q with status %d", err, tt.wantErr, tt.status)
				}
				if !strings.Contains(err.Error(), srv.URL()) || !strings.Contains(err.Error(), spec.Alias) {
					t.Errorf("error does not name the server: %v", err)
				}
			}
			if n := len(srv.Requests()); n != tt.requests {
				t.Errorf("server saw %d requests, want %d", n, tt.requests)
			}
			if tt.delays != nil {
				if len(rec.delays) != len(tt.delays) {
					t.Fatalf("delays %v, want %v", rec.delays, tt.delays)
				}
				for i := range tt.delays {
					if rec.delays[i] != tt.delays[i] {
						t.Errorf("delay %d = %v, want %v", i, rec.delays[i], tt.delays[i])
					}
				}
			} else if len(rec.delays) != tt.ndelays {
				t.Errorf("delays %v, want %d", rec.delays, tt.ndelays)
			}
			// Exponential with equal jitter: attempt n waits in [b·2^(n-1)/2, b·2^(n-1)].
			if tt.delays == nil {
				for i, d := range rec.delays {
					hi := spec.RetryBase << i
					if d < hi/2 || d > hi {
						t.Errorf("delay %d = %v, want within [%v, %v]", i, d, hi/2, hi)
					}
				}
			}
		})
	}
}

func TestBackoffBounded(t *testing.T) {
	rt := &retryTransport{base: 500 * time.Millisecond, cap: 30 * time.Second}
	for n := 1; n < 40; n++ {
		d := rt.backoff(n)
		if d < 0 || d > 30*time.Second {
			t.Fatalf("backoff(%d) = %v", n, d)
		}
	}
	if d := rt.backoff(30); d < 15*time.Second {
		t.Fatalf("late backoff %v below half the cap", d)
	}
}

func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{http.Header{"Retry-After": {"7"}}, 7 * time.Second, true},
		{http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond, true},
		{http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second, true},
		{http.Header{"Retry-After": {now.Add(-time.Hour).Format(http.TimeFormat)}}, 0, true},
		{http.Header{"Retry-After-Ms": {"250"}}, 250 * time.Millisecond, true},
		{http.Header{"Retry-After": {"soon"}}, 0, false},
		{http.Header{"Retry-After": {"-3"}}, 0, false},
		{http.Header{}, 0, false},
	}
	for _, tt := range tests {
		got, ok := retryAfter(tt.h, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%v: got %v %v, want %v %v", tt.h, got, ok, tt.want, tt.ok)
		}
	}
}

func TestContextCancelsRetryWait(t *testing.T) {
	srv := startFake(t, `[{"error":{"status":429,"retryAfter":"3600"}},{"content":"never"}]`)
	spec := testSpec(t, srv.URL())
	spec.RetryMax = time.Hour
	c := newTestClient(t, spec, nil) // the real sleep
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for len(srv.Requests()) == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, err := c.Complete(ctx, baseRequest())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("%d requests after cancel", n)
	}
}

func TestAttemptTimeout(t *testing.T) {
	srv := startFake(t, `[{"latencyMs":2000,"content":"late"}]`)
	spec := testSpec(t, srv.URL())
	spec.Timeout = 50 * time.Millisecond
	c := newTestClient(t, spec, nil)
	_, err := c.Complete(context.Background(), baseRequest())
	var me *ModelError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "no answer within the timeout of 50ms") {
		t.Fatalf("err %v", err)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("a timed-out attempt was retried: %d requests", n)
	}
}

func TestGarbageAnswer(t *testing.T) {
	srv := startFake(t, `[{"content":"x","quirks":["garbage"]}]`)
	c := newTestClient(t, testSpec(t, srv.URL()), nil)
	_, err := c.Complete(context.Background(), baseRequest())
	var me *ModelError
	if !errors.As(err, &me) {
		t.Fatalf("err %v", err)
	}
	for _, want := range []string{srv.URL(), "HTTP 200: answer is not JSON (text/html", "text/html", "502 Bad Gateway"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("garbage was retried: %d requests", n)
	}
}

func TestNetworkErrorsRetriedThenReported(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: connection refused
	spec := testSpec(t, "http://"+addr+"/v1")
	rec := &sleepRecorder{}
	c := newTestClient(t, spec, nil, withSleep(rec.sleep))
	_, err = c.Complete(context.Background(), baseRequest())
	var me *ModelError
	if !errors.As(err, &me) || me.Status != 0 || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("err %v", err)
	}
	if len(rec.delays) != spec.MaxAttempts-1 || me.Attempts != spec.MaxAttempts {
		t.Fatalf("delays %v attempts %d", rec.delays, me.Attempts)
	}
}

func TestAPIKey(t *testing.T) {
	const key = "sk-test-4f9a1c0b7e2d44d1a5f0c3b2e1d0f9a8"
	getenv := func(name string) string {
		if name == "FAKE_MODEL_KEY" {
			return key
		}
		return ""
	}
	t.Run("unset variable", func(t *testing.T) {
		spec := testSpec(t, "http://127.0.0.1:1/v1")
		spec.APIKeyEnv = "MISSING_MODEL_KEY"
		_, err := NewClient(spec, getenv)
		if err == nil || !strings.Contains(err.Error(), "MISSING_MODEL_KEY is not set") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("sent, and never in errors or logs", func(t *testing.T) {
		// The server echoes the key in its error, as some proxies do.
		srv := startFake(t, `{"requireBearer":"`+key+`","turns":[
			{"forbid":["`+key+`"],"content":"hello"},
			{"error":{"status":401,"message":"Incorrect API key provided: `+key+`"}},
			{"error":{"status":500,"body":"upstream said `+key+`"}},
			{"error":{"status":500,"body":"upstream said `+key+`"}},
			{"error":{"status":500,"body":"upstream said `+key+`"}}
		]}`)
		spec := testSpec(t, srv.URL())
		spec.APIKeyEnv = "FAKE_MODEL_KEY"
		var logs bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		rec := &sleepRecorder{}
		c := newTestClient(t, spec, getenv, WithLogger(logger), withSleep(rec.sleep))
		if _, err := c.Complete(context.Background(), baseRequest()); err != nil {
			t.Fatalf("first call: %v", err)
		}
		reqs := srv.Requests()
		if got := reqs[0].Header.Get("Authorization"); got != "Bearer "+key {
			t.Fatalf("Authorization %q", got)
		}
		var errs []string
		for i := 0; i < 2; i++ {
			_, err := c.Complete(context.Background(), baseRequest())
			if err == nil {
				t.Fatalf("call %d: want an error", i+2)
			}
			errs = append(errs, err.Error())
		}
		if !strings.Contains(errs[0], "[REDACTED]") || !strings.Contains(errs[1], "[REDACTED]") {
			t.Errorf("errors not redacted as expected: %q", errs)
		}
		if len(srv.Mismatches()) != 0 {
			t.Errorf("mismatches: %v", srv.Mismatches())
		}
		if !strings.Contains(logs.String(), "model request") || !strings.Contains(logs.String(), "retrying") {
			t.Errorf("nothing logged: %s", logs.String())
		}
		all := logs.String() + strings.Join(errs, "\n") + fmtSpec(spec)
		if strings.Contains(all, key) || strings.Contains(all, key[8:20]) {
			t.Fatalf("the key leaked:\n%s", all)
		}
	})
}

func fmtSpec(s ModelSpec) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestLimiterBoundsConcurrentRequests(t *testing.T) {
	srv := startFake(t, `{"turns":[],"final":{"content":"done","latencyMs":30}}`)
	spec := testSpec(t, srv.URL())
	spec.MaxConcurrent = 2
	// Two clients of the same alias share the process-wide limiter.
	c1 := newTestClient(t, spec, nil)
	c2 := newTestClient(t, spec, nil)
	lim := Limiter(spec.Alias)
	if lim.Max() != 2 {
		t.Fatalf("max %d", lim.Max())
	}
	var mu sync.Mutex
	peak := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n := lim.InUse()
			mu.Lock()
			peak = max(peak, n)
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func(c ModelClient) {
			defer wg.Done()
			if _, err := c.Complete(context.Background(), baseRequest()); err != nil {
				t.Error(err)
			}
		}([]ModelClient{c1, c2}[i%2])
	}
	wg.Wait()
	close(stop)
	<-done
	if peak > 2 || peak == 0 {
		t.Fatalf("peak in use %d, want 1..2", peak)
	}
	if lim.InUse() != 0 {
		t.Fatalf("slots leaked: %d", lim.InUse())
	}
}

func TestLimiterAcquireHonoursContext(t *testing.T) {
	l := &AliasLimiter{changed: make(chan struct{})}
	l.SetMax(1)
	release, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := l.Acquire(context.Background())
		if err == nil {
			r()
		}
		got <- err
	}()
	release()
	release() // twice is harmless
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if l.InUse() != 0 {
		t.Fatalf("in use %d", l.InUse())
	}
	l.SetMax(0) // unlimited
	for i := 0; i < 5; i++ {
		if _, err := l.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestErrorObjectWithStatus200(t *testing.T) {
	// fakellm sends errors with error statuses only; a proxy that answers
	// 200 with an error object is served by hand, in memory.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"error":{"message":"model 'qwen' not found, try pulling it first"}}`))
	})
	c := newTestClient(t, testSpec(t, "http://proxy.test/v1"), nil, WithTransport(handlerTransport{h}))
	_, err := c.Complete(context.Background(), baseRequest())
	var me *ModelError
	if !errors.As(err, &me) || me.Status != 200 || !strings.Contains(err.Error(), "the server answered an error: model 'qwen' not found") {
		t.Fatalf("err %v", err)
	}
}

func TestProbeModel(t *testing.T) {
	srv := startFake(t, `{"model":"qwen-test","requireBearer":"k-1","turns":[]}`)
	spec := testSpec(t, srv.URL())
	spec.APIKeyEnv = "PROBE_KEY"
	p, err := ProbeModel(context.Background(), spec, envMap(map[string]string{"PROBE_KEY": "k-1"}))
	if err != nil || !p.Served || len(p.Models) != 1 || p.Models[0] != "qwen-test" {
		t.Fatalf("probe %+v %v", p, err)
	}
	spec.Model = "other"
	if p, err := ProbeModel(context.Background(), spec, envMap(map[string]string{"PROBE_KEY": "k-1"})); err != nil || p.Served {
		t.Fatalf("probe of an unserved model %+v %v", p, err)
	}
	if _, err := ProbeModel(context.Background(), spec, envMap(map[string]string{"PROBE_KEY": "wrong"})); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := ProbeModel(context.Background(), ModelSpec{Alias: "replay:x", ReplayFile: filepath.Join(t.TempDir(), "x.json")}, envMap(nil)); err == nil {
		t.Fatal("probe of a missing replay file succeeded")
	}
}

// BenchmarkCompleteFakellm is one model turn through go-openai, the quirk
// and retry layers and a zero-latency fakellm over loopback HTTP.
func BenchmarkCompleteFakellm(b *testing.B) {
	sc, err := fakellm.Parse([]byte(`{"turns":[],"final":{"toolCalls":[{"name":"read_file","arguments":{"path":"a.go"}}],"quirks":["arguments-object","missing-ids"]}}`))
	if err != nil {
		b.Fatal(err)
	}
	srv := fakellm.Start(*sc)
	defer srv.Close()
	c, err := NewClient(ModelSpec{Alias: "bench", BaseURL: srv.URL(), Model: "m", MaxAttempts: 1}, func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	req := baseRequest()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Complete(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

func TestMaxTokensField(t *testing.T) {
	for _, tt := range []struct{ model, field string }{
		{"qwen2.5-coder:14b", `"max_tokens":300`},
		{"gpt-5-mini", `"max_completion_tokens":300`},
		{"o3", `"max_completion_tokens":300`},
	} {
		srv := startFake(t, `[{"content":"ok"}]`)
		spec := testSpec(t, srv.URL())
		spec.Model, spec.MaxTokens = tt.model, 300
		if _, err := newTestClient(t, spec, nil).Complete(context.Background(), baseRequest()); err != nil {
			t.Fatalf("%s: %v", tt.model, err)
		}
		if raw := srv.Requests()[0].RawText; !strings.Contains(raw, tt.field) {
			t.Errorf("%s: request lacks %s: %s", tt.model, tt.field, raw)
		}
	}
}

// slowSlots is a one-slot semaphore whose store answers a release late.
type slowSlots struct {
	mu                sync.Mutex
	held, takes       int
	overlap, releases int
	releaseDelay      time.Duration
}

func (s *slowSlots) Acquire(ctx context.Context, alias string, max int) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takes++
	s.held++
	if s.held > 1 {
		s.overlap++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			time.Sleep(s.releaseDelay)
			s.mu.Lock()
			s.held--
			s.releases++
			s.mu.Unlock()
		})
	}, nil
}

// TestSlotKeptBetweenSteps: a reply's slot is kept for the next request
// (no give-back and take again between steps), the client never holds two
// at once, and a run returns only when the slot it kept is back.
func TestSlotKeptBetweenSteps(t *testing.T) {
	srv := startFake(t, `{"turns": [
		{"toolCalls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "a\n"}}]},
		{"toolCalls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
		{"toolCalls": [{"name": "write_file", "arguments": {"path": "b.txt", "content": "b\n"}}]}
	], "final": {"content": "done"}}`)
	spec := testSpec(t, srv.URL())
	spec.MaxConcurrent = 1
	slots := &slowSlots{releaseDelay: 30 * time.Millisecond}
	m := newTestClient(t, spec, nil, WithSlots(slots), withSlotKeep(time.Hour))
	f := newFixture(t)
	res, err := Run(context.Background(), f.opts(testTask("slots"), m))
	if err != nil || res.Status != runrec.StatusSucceeded {
		t.Fatalf("run: %v %+v", err, res)
	}
	slots.mu.Lock()
	defer slots.mu.Unlock()
	if slots.takes != 1 || slots.releases != 1 || slots.held != 0 {
		t.Fatalf("4 requests took %d slots and gave %d back, %d still held when the run returned; want 1, 1, 0", slots.takes, slots.releases, slots.held)
	}
	if slots.overlap != 0 {
		t.Fatalf("the client held two slots at once %d times", slots.overlap)
	}
}

// TestSlotGivenBackAfterTheKeep: a slot no request follows within the keep
// (a step that runs a command) goes back to the store by itself, and the
// next request takes one again; of two requests at once, only one slot is
// kept.
func TestSlotGivenBackAfterTheKeep(t *testing.T) {
	srv := startFake(t, `{"final": {"content": "done"}}`)
	spec := testSpec(t, srv.URL())
	spec.MaxConcurrent = 2
	held := func(s *slowSlots) (held, takes int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.held, s.takes
	}
	waitHeld := func(s *slowSlots, want int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
			if h, _ := held(s); h == want {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("%d slots held, want %d", h, want)
			}
		}
	}
	req := ModelRequest{Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}}

	slots := &slowSlots{}
	c := newTestClient(t, spec, nil, WithSlots(slots), withSlotKeep(20*time.Millisecond))
	if _, err := c.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	waitHeld(slots, 0) // no request followed: given back without a Drain
	if _, err := c.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if _, takes := held(slots); takes != 2 {
		t.Fatalf("%d slots taken for two requests a keep apart, want 2", takes)
	}
	c.(interface{ Drain() }).Drain()
	if h, _ := held(slots); h != 0 {
		t.Fatalf("%d slots held after Drain", h)
	}

	slots = &slowSlots{}
	c = newTestClient(t, spec, nil, WithSlots(slots), withSlotKeep(time.Hour))
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Complete(context.Background(), req); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	waitHeld(slots, 1) // the second reply's slot goes back; one is kept
	c.(interface{ Drain() }).Drain()
	if h, takes := held(slots); h != 0 || takes != 2 {
		t.Fatalf("after Drain: %d held, %d taken; want 0, 2", h, takes)
	}
}

// TestModelConnectionsReused: eight clients asking one server at once keep
// their connections between requests (Go's default transport keeps two
// idle ones per host and closes the rest, which the next requests dial
// again).
func TestModelConnectionsReused(t *testing.T) {
	var dials atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(20 * time.Millisecond) // the eight requests overlap
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	const clients, rounds = 8, 5
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, clients*rounds)
	for i := 0; i < clients; i++ {
		c := newTestClient(t, testSpec(t, srv.URL+"/v1"), nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for j := 0; j < rounds; j++ {
				if _, err := c.Complete(context.Background(), ModelRequest{Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}}); err != nil {
					errs <- err
				}
				time.Sleep(10 * time.Millisecond) // the step's tools: every answer is back before the next request

			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Each client needs one; a few more may be dialled while an answered
	// connection is still on its way back to the pool. Closing the answered
	// ones makes it six more every round.
	if n := dials.Load(); n >= 2*clients {
		t.Fatalf("%d connections for %d clients × %d requests: answers did not keep theirs", n, clients, rounds)
	}
}

// sseAnswer writes a streamed answer ending in "data: [DONE]", flushed.
func sseAnswer(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, chunk := range []string{
		`{"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"ok"},"finish_reason":null}]}`,
		`{"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{"id":"x","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`,
		`[DONE]`,
	} {
		io.WriteString(w, "data: "+chunk+"\n\n")
	}
	w.(http.Flusher).Flush()
}

// TestStreamReadToItsEnd: a streamed answer is read past its "data:
// [DONE]" to the end of the response: the request is over only when the
// server has finished it (a model slot given back at [DONE] let another
// worker's request reach a server still answering this one: 3 requests at
// once on an alias of 2), and its connection is reused. A server that
// never ends the response after [DONE] holds the answer back for at most
// a short grace.
func TestStreamReadToItsEnd(t *testing.T) {
	var dials atomic.Int32
	var handlerDone atomic.Int64 // unix nanos when the last handler returned
	hold := make(chan struct{})  // the "never ends" server waits for it
	var holding atomic.Bool
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		sseAnswer(w)
		if holding.Load() {
			select {
			case <-hold:
			case <-time.After(30 * time.Second):
			}
		} else {
			time.Sleep(100 * time.Millisecond) // the server's own end of the answer comes later
		}
		handlerDone.Store(time.Now().UnixNano())
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	spec := testSpec(t, srv.URL+"/v1")
	spec.Stream = true
	c := newTestClient(t, spec, nil)
	req := ModelRequest{Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}}
	for i := 0; i < 2; i++ {
		reply, err := c.Complete(context.Background(), req)
		if err != nil || reply.Message.Content != "ok" {
			t.Fatalf("answer %d: %+v %v", i, reply, err)
		}
		returned := time.Now().UnixNano()
		if done := handlerDone.Load(); done == 0 || done > returned {
			t.Fatalf("answer %d: the request returned before the server had finished it", i)
		}
		handlerDone.Store(0)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d connections for 2 answers read to their end, want 1", n)
	}

	holding.Store(true)
	reply, err := c.Complete(context.Background(), req)
	ended := handlerDone.Load()
	close(hold)
	if err != nil || reply.Message.Content != "ok" {
		t.Fatalf("answer of a server that keeps the response open: %+v %v", reply, err)
	}
	if ended != 0 {
		t.Fatal("the request waited for a response the server never ended")
	}
}
