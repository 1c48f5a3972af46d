package fakellm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/runtask/fakellm"
)

func post(t *testing.T, url, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

const userReq = `{"model":"m","messages":[{"role":"system","content":"you are a worker"},{"role":"user","content":"fix the bug"}],"tools":[{"type":"function","function":{"name":"read_file","parameters":{}}}]}`

func mustParse(t *testing.T, s string) fakellm.Script {
	t.Helper()
	sc, err := fakellm.Parse([]byte(s))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return *sc
}

// wire is the response shape of real servers, decoded loosely.
type wire struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role         string            `json:"role"`
			Content      *string           `json:"content"`
			ToolCalls    []json.RawMessage `json:"tool_calls"`
			FunctionCall json.RawMessage   `json:"function_call"`
		} `json:"message"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		Prompt     int `json:"prompt_tokens"`
		Completion int `json:"completion_tokens"`
		Total      int `json:"total_tokens"`
	} `json:"usage"`
}

func TestReplyShapesAndQuirks(t *testing.T) {
	call := `"toolCalls":[{"name":"read_file","arguments":{"path":"a.go"}},{"name":"list_dir","arguments":{"path":"."}}]`
	tests := []struct {
		name  string
		turn  string
		check func(t *testing.T, w wire, raw string)
	}{
		{"plain tool calls", `{` + call + `}`, func(t *testing.T, w wire, raw string) {
			m := w.Choices[0].Message
			if len(m.ToolCalls) != 2 || m.Content != nil || *w.Choices[0].FinishReason != "tool_calls" {
				t.Fatalf("got %s", raw)
			}
			if !strings.Contains(raw, `"arguments":"{\"path\":\"a.go\"}"`) || !strings.Contains(raw, `"id":"call_1_0"`) || !strings.Contains(raw, `"type":"function"`) {
				t.Fatalf("arguments not a string or id/type missing: %s", raw)
			}
		}},
		{"arguments object", `{` + call + `,"quirks":["arguments-object"]}`, func(t *testing.T, w wire, raw string) {
			if !strings.Contains(raw, `"arguments":{"path":"a.go"}`) {
				t.Fatalf("want object arguments: %s", raw)
			}
		}},
		{"missing ids and type", `{` + call + `,"quirks":["missing-ids","missing-type"]}`, func(t *testing.T, w wire, raw string) {
			if strings.Contains(raw, `"id":"call`) || strings.Contains(raw, `"type":"function"`) {
				t.Fatalf("want no ids/type: %s", raw)
			}
		}},
		{"duplicate ids", `{` + call + `,"quirks":["duplicate-ids"]}`, func(t *testing.T, w wire, raw string) {
			if strings.Count(raw, `"id":"call_0"`) != 2 {
				t.Fatalf("want two call_0: %s", raw)
			}
		}},
		{"uuid ids", `{` + call + `,"quirks":["uuid-ids"]}`, func(t *testing.T, w wire, raw string) {
			var c struct{ ID string }
			json.Unmarshal(w.Choices[0].Message.ToolCalls[0], &c)
			if len(c.ID) != 36 || strings.HasPrefix(c.ID, "call_") || strings.Count(c.ID, "-") != 4 {
				t.Fatalf("want a UUID id, got %q", c.ID)
			}
		}},
		{"calls in content tag", `{"content":"Let me look.",` + call + `,"quirks":["calls-in-content-tag"]}`, func(t *testing.T, w wire, raw string) {
			m := w.Choices[0].Message
			if len(m.ToolCalls) != 0 || *w.Choices[0].FinishReason != "stop" {
				t.Fatalf("want no tool_calls and stop: %s", raw)
			}
			want := "Let me look.\n<tool_call>\n{\"name\":\"read_file\",\"arguments\":{\"path\":\"a.go\"}}\n</tool_call>"
			if !strings.HasPrefix(*m.Content, want) || !strings.Contains(raw, "<tool_call>") {
				t.Fatalf("content %q", *m.Content)
			}
		}},
		{"calls in content json", `{"toolCalls":[{"name":"read_file","arguments":{"path":"a.go"}}],"quirks":["calls-in-content-json"]}`, func(t *testing.T, w wire, raw string) {
			if got := *w.Choices[0].Message.Content; got != `{"name":"read_file","arguments":{"path":"a.go"}}` {
				t.Fatalf("content %q", got)
			}
		}},
		{"legacy function call", `{` + call + `,"quirks":["legacy-function-call"]}`, func(t *testing.T, w wire, raw string) {
			if len(w.Choices[0].Message.FunctionCall) == 0 || *w.Choices[0].FinishReason != "function_call" {
				t.Fatalf("got %s", raw)
			}
		}},
		{"finish reason tool_call", `{` + call + `,"finishReason":"tool_call"}`, func(t *testing.T, w wire, raw string) {
			if *w.Choices[0].FinishReason != "tool_call" {
				t.Fatalf("got %s", raw)
			}
		}},
		{"finish reason null", `{"content":"x","finishReason":"null"}`, func(t *testing.T, w wire, raw string) {
			if w.Choices[0].FinishReason != nil {
				t.Fatalf("got %s", raw)
			}
		}},
		{"no usage", `{"content":"hi","quirks":["no-usage"]}`, func(t *testing.T, w wire, raw string) {
			if w.Usage != nil || strings.Contains(raw, "usage") {
				t.Fatalf("want no usage: %s", raw)
			}
		}},
		{"scripted usage", `{"content":"hi","usage":{"promptTokens":7,"completionTokens":3}}`, func(t *testing.T, w wire, raw string) {
			if w.Usage == nil || w.Usage.Prompt != 7 || w.Usage.Completion != 3 || w.Usage.Total != 10 {
				t.Fatalf("usage: %s", raw)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fakellm.Start(mustParse(t, `{"model":"qwen","turns":[`+tt.turn+`]}`))
			defer srv.Close()
			status, hdr, body := post(t, srv.URL(), userReq)
			if status != 200 || hdr.Get("Content-Type") != "application/json" {
				t.Fatalf("status %d %s: %s", status, hdr.Get("Content-Type"), body)
			}
			var w wire
			if err := json.Unmarshal(body, &w); err != nil {
				t.Fatalf("%v: %s", err, body)
			}
			if w.Object != "chat.completion" || w.Model != "qwen" || w.ID == "" || w.Created == 0 || len(w.Choices) != 1 || w.Choices[0].Message.Role != "assistant" {
				t.Fatalf("envelope: %s", body)
			}
			tt.check(t, w, string(body))
		})
	}
}

func TestErrorsGarbageAndFinal(t *testing.T) {
	srv := fakellm.Start(mustParse(t, `[
		{"error":{"status":429,"message":"slow down","retryAfter":"2"}},
		{"error":{"status":500,"body":"<html>oops</html>"}},
		{"content":"ok"},
		{"content":"x","quirks":["garbage"]}
	]`))
	defer srv.Close()
	status, hdr, body := post(t, srv.URL(), userReq)
	if status != 429 || hdr.Get("Retry-After") != "2" || !strings.Contains(string(body), `"type":"rate_limit_error"`) || !strings.Contains(string(body), `"message":"slow down"`) {
		t.Fatalf("429: %d %v %s", status, hdr, body)
	}
	status, _, body = post(t, srv.URL(), userReq)
	if status != 500 || string(body) != "<html>oops</html>" {
		t.Fatalf("500: %d %s", status, body)
	}
	if status, _, body = post(t, srv.URL(), userReq); status != 200 || !strings.Contains(string(body), `"content":"ok"`) {
		t.Fatalf("ok: %d %s", status, body)
	}
	status, hdr, body = post(t, srv.URL(), userReq)
	if status != 200 || json.Valid(body) || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
		t.Fatalf("garbage: %d %s", status, body)
	}
	// Out of turns: the final plain answer, again and again.
	for i := 0; i < 2; i++ {
		status, _, body = post(t, srv.URL(), userReq)
		if status != 200 || !strings.Contains(string(body), `"content":"done"`) || !strings.Contains(string(body), `"finish_reason":"stop"`) {
			t.Fatalf("final: %d %s", status, body)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != 6 || reqs[0].Turn != 0 || reqs[3].Turn != 3 || reqs[4].Turn != -1 || reqs[0].Status != 429 {
		t.Fatalf("requests: %+v", reqs)
	}
	if got := reqs[2].Body.Messages[0].Text(); got != "you are a worker" {
		t.Fatalf("system prompt recorded as %q", got)
	}
	if len(srv.Unplayed()) != 0 {
		t.Fatalf("unplayed %v", srv.Unplayed())
	}
}

func TestExpectationsAreRecorded(t *testing.T) {
	srv := fakellm.Start(mustParse(t, `{"turns":[
		{"expect":["you are a worker","not there"],"expectLast":["fix the"],"forbid":["sk-live"],"content":"a"},
		{"expectLast":["nope"],"forbid":["worker"],"content":"b"}
	]}`))
	defer srv.Close()
	post(t, srv.URL(), userReq, "X-Leak", "sk-live-123")
	post(t, srv.URL(), userReq)
	var got []string
	for _, m := range srv.Mismatches() {
		got = append(got, m.Kind+":"+m.Want)
	}
	want := []string{"expect:not there", "forbid:sk-live", "expectLast:nope", "forbid:worker"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("mismatches %v, want %v", got, want)
	}
}

func TestHistoryMode(t *testing.T) {
	srv := fakellm.Start(mustParse(t, `{"mode":"history","turns":[
		{"error":{"status":503}},
		{"content":"first"},
		{"content":"second"}
	]}`))
	defer srv.Close()
	second := `{"model":"m","messages":[{"role":"user","content":"go"},{"role":"assistant","content":"first"},{"role":"user","content":"more"}]}`
	first := `{"model":"m","messages":[{"role":"user","content":"go"}]}`
	// Two sessions interleaved: each gets its own turn by history.
	if s, _, b := post(t, srv.URL(), second); s != 200 || !strings.Contains(string(b), "second") {
		t.Fatalf("%d %s", s, b)
	}
	if s, _, _ := post(t, srv.URL(), first); s != 503 {
		t.Fatalf("want the scripted 503 first, got %d", s)
	}
	if s, _, b := post(t, srv.URL(), first); s != 200 || !strings.Contains(string(b), "first") {
		t.Fatalf("retry: %d %s", s, b)
	}
	other := `{"model":"m","messages":[{"role":"user","content":"another task"}]}`
	if s, _, _ := post(t, srv.URL(), other); s != 503 {
		t.Fatalf("another conversation gets its own error first, got %d", s)
	}
}

func TestServerChecks(t *testing.T) {
	srv := fakellm.Start(mustParse(t, `{"rejectMissingContent":true,"requireBearer":"k-123","turns":[{"content":"a"}]}`))
	defer srv.Close()
	if s, _, _ := post(t, srv.URL(), userReq); s != 401 {
		t.Fatalf("no key: %d", s)
	}
	noContent := `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[]}]}`
	if s, _, b := post(t, srv.URL(), noContent, "Authorization", "Bearer k-123"); s != 400 || !strings.Contains(string(b), "invalid message content type") {
		t.Fatalf("missing content: %d %s", s, b)
	}
	if s, _, _ := post(t, srv.URL(), userReq, "Authorization", "Bearer k-123"); s != 200 {
		t.Fatalf("good request: %d", s)
	}
	models, err := http.NewRequest(http.MethodGet, srv.URL()+"/models", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(models)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("models without the key: %d", resp.StatusCode)
	}
	models.Header.Set("Authorization", "Bearer k-123")
	resp, err = http.DefaultClient.Do(models)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"object":"list"`)) || !bytes.Contains(b, []byte(`"id":"fakellm"`)) {
		t.Fatalf("models: %d %s", resp.StatusCode, b)
	}
	if s, _, _ := post(t, srv.URL(), "not json", "Authorization", "Bearer k-123"); s != 400 {
		t.Fatalf("bad body: %d", s)
	}
}

func TestParseErrorsNameThePath(t *testing.T) {
	tests := []struct{ in, want string }{
		{`[{"content":"a","toolCalls":[{"nmae":"x"}]}]`, `turns[0].toolCalls[0]: unknown field "nmae"`},
		{`{"turns":[{"latencyMs":"5"}]}`, `turns[0].latencyMs: want an integer, got a JSON string`},
		{`{"turns":[{"content":"a"},{"streamMs":-1}]}`, `turns[1].streamMs: must not be negative`},
		{`{"turns":[{"quirks":["bogus"]}]}`, `turns[0].quirks: unknown quirk "bogus"`},
		{`{"turns":[{"error":{"status":200}}]}`, `turns[0].error.status: 200 is not an HTTP error status`},
		{`{"turns":[{"error":{"status":429},"content":"x"}]}`, `turns[0]: an error turn has no content`},
		{`{"mode":"random","turns":[]}`, `mode: "random"`},
		{`{"turns":[{"toolCalls":[{"name":"a","arguments":[1]}]}]}`, `turns[0].toolCalls[0].arguments: must be a JSON object or a JSON string`},
		{"{\"turns\": [\n  {\"content\": \"a\",}\n]}", `line 2, column`},
		{`{"turns":[]} {}`, `trailing data`},
		{``, `empty script`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			_, err := fakellm.Parse([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
}

// TestPeakConcurrency: the server counts the chat completions it answers
// at once (a client gone mid-answer no longer counts); the peak is what a
// concurrency bound is checked by.
func TestPeakConcurrency(t *testing.T) {
	srv := fakellm.Start(mustParse(t, `{"mode": "history", "turns": [], "final": {"latencyMs": 600000, "content": "done"}}`))
	defer srv.Close()
	if srv.Peak() != 0 || srv.InFlight() != 0 {
		t.Fatalf("fresh server: peak %d, in flight %d", srv.Peak(), srv.InFlight())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	for i := 0; i < 3; i++ {
		go func() {
			defer func() { done <- struct{}{} }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/chat/completions", strings.NewReader(userReq))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	for srv.InFlight() < 3 {
		time.Sleep(time.Millisecond)
	}
	if srv.Peak() != 3 {
		t.Errorf("three in flight: peak %d", srv.Peak())
	}
	if at := srv.AtPeak(); len(at) != 3 || at[0].Remote == "" || !at[0].End.IsZero() {
		t.Errorf("at the peak: %d requests (%+v), want the 3 open ones with their clients", len(at), at)
	}
	cancel()
	for i := 0; i < 3; i++ {
		<-done
	}
	for srv.InFlight() != 0 {
		time.Sleep(time.Millisecond)
	}
	if srv.Peak() != 3 {
		t.Errorf("after the clients left: peak %d, want 3", srv.Peak())
	}
	if at := srv.AtPeak(); len(at) != 3 || at[0].End.IsZero() || at[0].Status != 499 {
		t.Errorf("at the peak, after the clients left: %+v, want 3 ended with 499", at)
	}
	srv.ResetPeak()
	if srv.Peak() != 0 {
		t.Errorf("after a reset with nothing in flight: peak %d, want 0", srv.Peak())
	}
}

// TestForgetBodies: a script with forgetBodies still checks every request
// against its turn, but the requests it records keep no body or header.
func TestForgetBodies(t *testing.T) {
	srv := fakellm.Start(mustParse(t, `{"forgetBodies": true, "turns": [{"expect": ["fix the bug"], "forbid": ["you are a worker"], "content": "ok"}]}`))
	defer srv.Close()
	if status, _, body := post(t, srv.URL(), userReq, "Authorization", "Bearer sk-kept-nowhere"); status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests recorded, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Body != nil || r.Raw != nil || r.RawText != "" || r.Header != nil {
		t.Errorf("forgetBodies kept the request: body %v, raw %q, header %v", r.Body, r.RawText, r.Header)
	}
	if r.Status != http.StatusOK || r.Turn != 0 || r.Path != "/v1/chat/completions" || r.Start.IsZero() || r.End.IsZero() || r.Size != len(userReq) {
		t.Errorf("forgetBodies lost the request's facts: %+v", r)
	}
	// The turn's checks still read the body: the forbidden system prompt
	// is a mismatch, the expected text is not.
	ms := srv.Mismatches()
	if len(ms) != 1 || ms[0].Kind != "forbid" || ms[0].Want != "you are a worker" {
		t.Errorf("mismatches %+v, want the one forbid", ms)
	}
}
