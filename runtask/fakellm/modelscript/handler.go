package modelscript

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/conductor-dev/conductor/conductor/ctxwait"
)

// Created is the fixed "created" timestamp of every answer (2026-01-01),
// so recorded answers are reproducible.
const Created = 1767225600

// DefaultModel is the model name reported when the script names none.
const DefaultModel = "fakellm"

// RecordedRequest is one request the handler received.
type RecordedRequest struct {
	Index  int         `json:"index"` // 0-based arrival order
	Method string      `json:"method"`
	Path   string      `json:"path"`
	Header http.Header `json:"header"`
	// Raw is the body exactly as received.
	Raw json.RawMessage `json:"-"`
	// RawText is Raw as a string (for files written by `fakellm requests`).
	RawText string `json:"raw"`
	// Body is the decoded chat request; nil for other endpoints or bodies
	// that are not JSON.
	Body *ChatRequest `json:"body,omitempty"`
	// Turn is the index of the script turn that answered; -1 for the final
	// answer, -2 when no turn was consumed (other endpoints, bad requests).
	Turn int `json:"turn"`
	// Status is the HTTP status answered (499: the client went away).
	Status int `json:"status"`
	// Size is the body's length in bytes (kept with forgetBodies too).
	Size int `json:"size"`
	// Remote is the client's address; Start (the request's arrival) and
	// End bound the answer.
	Remote     string    `json:"remote,omitempty"`
	Start, End time.Time `json:"-"`
}

// ChatRequest is the part of a chat completion request tests look at.
type ChatRequest struct {
	Model      string            `json:"model"`
	Messages   []Message         `json:"messages"`
	Tools      []json.RawMessage `json:"tools,omitempty"`
	ToolChoice json.RawMessage   `json:"tool_choice,omitempty"`
	Stream     bool              `json:"stream,omitempty"`
	// StreamOptions is OpenAI's stream_options: include_usage asks for a
	// last chunk with the usage and no choices.
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
}

// Message is one request message. Content is kept raw so tests can tell an
// absent content from an empty one.
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []WireToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

// HasContent reports whether the message carried a non-null "content".
func (m Message) HasContent() bool {
	c := bytes.TrimSpace(m.Content)
	return len(c) > 0 && !bytes.Equal(c, []byte("null"))
}

// Text is the message content as text: the string, or the text parts of a
// multi-part content joined by newlines.
func (m Message) Text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(m.Content, &parts) == nil {
		texts := make([]string, 0, len(parts))
		for _, p := range parts {
			texts = append(texts, p.Text)
		}
		return strings.Join(texts, "\n")
	}
	return string(m.Content)
}

// WireToolCall is a tool call as it appears on the wire.
type WireToolCall struct {
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
	} `json:"function"`
}

// ToolNames lists the names of the tools offered in the request.
func (r *ChatRequest) ToolNames() []string {
	var out []string
	for _, t := range r.Tools {
		var tool struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(t, &tool) == nil && tool.Function.Name != "" {
			out = append(out, tool.Function.Name)
		}
	}
	return out
}

// Text is the request's messages as text, one block per message:
// "role: content", tool calls as "call name(arguments)", tool results with
// their call id. Expect and Forbid match against it (and the raw body).
func (r *ChatRequest) Text() string {
	var b strings.Builder
	for _, m := range r.Messages {
		fmt.Fprintf(&b, "%s: %s\n", m.Role, m.Text())
		for _, c := range m.ToolCalls {
			fmt.Fprintf(&b, "call %s %s(%s)\n", c.ID, c.Function.Name, argumentsText(c.Function.Arguments))
		}
		if m.ToolCallID != "" {
			fmt.Fprintf(&b, "tool_call_id: %s\n", m.ToolCallID)
		}
	}
	return b.String()
}

func argumentsText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// Mismatch is a scripted expectation a request did not meet.
type Mismatch struct {
	Request int    `json:"request"` // RecordedRequest.Index
	Turn    int    `json:"turn"`
	Label   string `json:"label"`
	Kind    string `json:"kind"` // expect, expectLast, forbid
	Want    string `json:"want"`
}

func (m Mismatch) String() string {
	switch m.Kind {
	case "forbid":
		return fmt.Sprintf("request %d (%s): contains forbidden %q", m.Request, m.Label, m.Want)
	case "expectLast":
		return fmt.Sprintf("request %d (%s): last message does not contain %q", m.Request, m.Label, m.Want)
	default:
		return fmt.Sprintf("request %d (%s): does not contain %q", m.Request, m.Label, m.Want)
	}
}

// step is a reply turn with the error turns scripted before it.
type step struct {
	errs     []int // turn indexes
	reply    int   // turn index, -1 when the script ends with errors
	errsSeen map[string]int
}

// Handler answers OpenAI-compatible requests from a script. It is safe for
// concurrent use.
type Handler struct {
	script *Script
	final  Turn
	steps  []step

	mu         sync.Mutex
	next       int // sequential mode: next turn index
	requests   []RecordedRequest
	mismatches []Mismatch
	served     map[int]int // turn index → times served
	inFlight   int         // chat completions being answered now
	peak       int         // the most answered at once since NewHandler or ResetPeak
	peakAt     time.Time   // when peak was reached
}

// NewHandler returns a handler playing s. The script must be valid.
func NewHandler(s *Script) *Handler {
	h := &Handler{script: s, served: map[int]int{}}
	h.final = Turn{Content: "done", FinishReason: "stop", Name: "final"}
	if s.Final != nil {
		h.final = *s.Final
	}
	var errs []int
	for i, t := range s.Turns {
		if t.IsError() {
			errs = append(errs, i)
			continue
		}
		h.steps = append(h.steps, step{errs: errs, reply: i, errsSeen: map[string]int{}})
		errs = nil
	}
	if len(errs) > 0 {
		h.steps = append(h.steps, step{errs: errs, reply: -1, errsSeen: map[string]int{}})
	}
	return h
}

// Script returns the script being played.
func (h *Handler) Script() *Script { return h.script }

// Requests returns a copy of every request received so far.
func (h *Handler) Requests() []RecordedRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]RecordedRequest(nil), h.requests...)
}

// Mismatches returns every unmet expectation so far.
func (h *Handler) Mismatches() []Mismatch {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Mismatch(nil), h.mismatches...)
}

// Unplayed lists the indexes of scripted turns never served.
func (h *Handler) Unplayed() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int
	for i := range h.script.Turns {
		if h.served[i] == 0 {
			out = append(out, i)
		}
	}
	return out
}

func (h *Handler) model() string {
	if h.script.Model != "" {
		return h.script.Model
	}
	return DefaultModel
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "", "cannot read request body: "+err.Error(), "invalid_request_error")
		return
	}
	rec := RecordedRequest{
		Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(),
		Raw: json.RawMessage(body), RawText: string(body), Size: len(body), Turn: -2,
		Remote: r.RemoteAddr, Start: arrived,
	}
	chat := strings.TrimSuffix(r.URL.Path, "/") == "/v1/chat/completions" && r.Method == http.MethodPost
	if chat {
		h.mu.Lock()
		h.inFlight++
		if h.inFlight > h.peak {
			h.peak, h.peakAt = h.inFlight, rec.Start
		}
		h.mu.Unlock()
	}
	status := h.serve(w, r, body, &rec)
	h.mu.Lock()
	if chat {
		h.inFlight--
	}
	h.requests[rec.Index].Status = status
	h.requests[rec.Index].Turn = rec.Turn
	h.requests[rec.Index].End = time.Now()
	h.mu.Unlock()
}

// InFlight is the number of chat completions being answered now (a
// client that went away mid-answer is no longer counted).
func (h *Handler) InFlight() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inFlight
}

// Peak is the most chat completions answered at once since NewHandler or
// the last ResetPeak.
func (h *Handler) Peak() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peak
}

// ResetPeak starts a new peak from the requests in flight now.
func (h *Handler) ResetPeak() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.peak, h.peakAt = h.inFlight, time.Now()
}

// AtPeak lists the chat completions that were being answered when the
// peak was reached: what a test shows when a bound was passed.
func (h *Handler) AtPeak() []RecordedRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []RecordedRequest
	for _, r := range h.requests {
		if r.Body != nil && !r.Start.After(h.peakAt) && (r.End.IsZero() || r.End.After(h.peakAt)) {
			out = append(out, r)
		}
	}
	return out
}

// answerAt is when the part frac (0: the start, 1: the end) of the answer
// to a request that arrived at arrived is due, for turn t: the latency runs
// from the arrival, so the fake's own reading, decoding and checking of the
// request count inside it, as a real server's work does; the answer's
// generation (streamMs) follows it.
func answerAt(arrived time.Time, t Turn, frac float64) time.Time {
	return arrived.Add(time.Duration(t.LatencyMs)*time.Millisecond + time.Duration(frac*float64(t.StreamMs)*float64(time.Millisecond)))
}

// record stores rec and gives it its index; with ForgetBodies the stored
// copy keeps no body or header.
func (h *Handler) record(rec *RecordedRequest) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rec.Index = len(h.requests)
	kept := *rec
	if h.script.ForgetBodies {
		kept.Header, kept.Raw, kept.RawText, kept.Body = nil, nil, "", nil
	}
	h.requests = append(h.requests, kept)
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, body []byte, rec *RecordedRequest) int {
	path := strings.TrimSuffix(r.URL.Path, "/")
	if want := h.script.RequireBearer; want != "" && r.Header.Get("Authorization") != "Bearer "+want {
		if path == "/v1/chat/completions" {
			var req ChatRequest
			if json.Unmarshal(body, &req) == nil {
				rec.Body = &req
			}
		}
		h.record(rec)
		writeError(w, http.StatusUnauthorized, "", "Incorrect API key provided.", "invalid_request_error")
		return http.StatusUnauthorized
	}
	switch {
	case path == "/v1/models" && r.Method == http.MethodGet:
		h.record(rec)
		writeJSON(w, http.StatusOK, map[string]any{
			"object": "list",
			"data": []map[string]any{{
				"id": h.model(), "object": "model", "created": Created, "owned_by": "fakellm",
			}},
		})
		return http.StatusOK
	case path == "/v1/chat/completions" && r.Method == http.MethodPost:
	default:
		h.record(rec)
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("no route %s %s (fakellm serves GET /v1/models and POST /v1/chat/completions)", r.Method, r.URL.Path), "invalid_request_error")
		return http.StatusNotFound
	}

	var req ChatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		h.record(rec)
		writeError(w, http.StatusBadRequest, "", "request body is not a chat completion request: "+err.Error(), "invalid_request_error")
		return http.StatusBadRequest
	}
	rec.Body = &req
	h.record(rec)

	if h.script.RejectMissingContent {
		for _, m := range req.Messages {
			if !m.HasContent() {
				// Ollama's answer to a message without content.
				writeError(w, http.StatusBadRequest, "", "invalid message content type: <nil>", "invalid_request_error")
				return http.StatusBadRequest
			}
		}
	}
	idx, turn := h.pick(&req, body)
	rec.Turn = idx
	h.check(rec, idx, turn, &req, body)

	// Only the answer's end waits with untilDue: the call's time is set by
	// it alone.
	wait := func(at time.Time, end bool) bool {
		if end {
			return untilDue(r.Context(), at)
		}
		return ctxwait.Until(r.Context(), at)
	}
	if !wait(answerAt(rec.Start, turn, 0), turn.StreamMs == 0) {
		return 499 // client gone; nothing to write
	}
	if turn.IsError() {
		e := turn.Error
		if e.RetryAfter != "" {
			w.Header().Set("Retry-After", e.RetryAfter)
		}
		writeError(w, e.Status, e.Body, e.Message, errorType(e.Status))
		return e.Status
	}
	if turn.HasQuirk(QuirkGarbage) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "<html><head><title>502 Bad Gateway</title></head><body>upstream model crashed</body></html>\n")
		return http.StatusOK
	}
	resp := h.render(rec.Index, idx, turn, len(body))
	// The answer is generated over streamMs after its start: streamed, its
	// events are spread evenly over that time; whole, it comes at the end.
	if req.Stream {
		var waitEvent func(k, n int) bool
		if turn.StreamMs > 0 {
			waitEvent = func(k, n int) bool {
				return wait(answerAt(rec.Start, turn, float64(k)/float64(max(1, n-1))), k == n-1)
			}
		}
		if !writeStream(w, resp, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, waitEvent) {
			return 499 // client gone mid-answer
		}
		return http.StatusOK
	}
	if !wait(answerAt(rec.Start, turn, 1), true) {
		return 499 // client gone
	}
	writeJSON(w, http.StatusOK, resp)
	return http.StatusOK
}

// pick chooses the turn answering req and marks it served.
func (h *Handler) pick(req *ChatRequest, body []byte) (int, Turn) {
	// The history step, and the conversation's key only where the step has
	// error turns, are worked out before the lock (the steps' turns never
	// change): concurrent requests are not queued behind one another's
	// hashing of their whole conversation.
	n, key := -1, ""
	if h.script.Mode == ModeHistory {
		n = 0
		for _, m := range req.Messages {
			if m.Role == "assistant" {
				n++
			}
		}
		if n < len(h.steps) && len(h.steps[n].errs) > 0 {
			key = conversationKey(req)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	serve := func(i int) (int, Turn) {
		if i < 0 {
			return -1, h.final
		}
		h.served[i]++
		return i, h.script.Turns[i]
	}
	if h.script.Mode != ModeHistory {
		if h.next >= len(h.script.Turns) {
			return serve(-1)
		}
		h.next++
		return serve(h.next - 1)
	}
	if n >= len(h.steps) {
		return serve(-1)
	}
	st := &h.steps[n]
	// Error turns before a reply are served once per distinct conversation
	// state, so a retried request moves on to the reply.
	if seen := st.errsSeen[key]; seen < len(st.errs) {
		st.errsSeen[key] = seen + 1
		return serve(st.errs[seen])
	}
	return serve(st.reply)
}

func conversationKey(req *ChatRequest) string {
	b, _ := json.Marshal(req.Messages)
	sum := sha256.Sum256(b)
	return string(sum[:])
}

func (h *Handler) check(rec *RecordedRequest, idx int, turn Turn, req *ChatRequest, body []byte) {
	text := sync.OnceValue(req.Text) // only a turn that expects or forbids reads it
	has := func(s string) bool { return strings.Contains(text(), s) || bytes.Contains(body, []byte(s)) }
	label := turn.label(idx)
	if idx < 0 {
		label = "final"
	}
	var miss []Mismatch
	for _, s := range turn.Expect {
		if !has(s) {
			miss = append(miss, Mismatch{Request: rec.Index, Turn: idx, Label: label, Kind: "expect", Want: s})
		}
	}
	if len(turn.ExpectLast) > 0 {
		last := ""
		if n := len(req.Messages); n > 0 {
			m := req.Messages[n-1]
			last = m.Text() + "\n" + m.ToolCallID
		}
		for _, s := range turn.ExpectLast {
			if !strings.Contains(last, s) {
				miss = append(miss, Mismatch{Request: rec.Index, Turn: idx, Label: label, Kind: "expectLast", Want: s})
			}
		}
	}
	for _, s := range turn.Forbid {
		if has(s) {
			miss = append(miss, Mismatch{Request: rec.Index, Turn: idx, Label: label, Kind: "forbid", Want: s})
		}
	}
	// A forbidden string must not hide in a header either (a key leaking
	// into a custom header, say); Authorization is where keys belong.
	for _, s := range turn.Forbid {
		for name, vals := range rec.Header {
			if name == "Authorization" {
				continue
			}
			for _, v := range vals {
				if strings.Contains(v, s) {
					miss = append(miss, Mismatch{Request: rec.Index, Turn: idx, Label: label, Kind: "forbid", Want: s})
				}
			}
		}
	}
	if len(miss) > 0 {
		h.mu.Lock()
		h.mismatches = append(h.mismatches, miss...)
		h.mu.Unlock()
	}
}

// render builds the chat completion answer for a reply turn, applying its
// quirks.
func (h *Handler) render(reqIndex, turnIndex int, t Turn, reqSize int) map[string]any {
	msg := map[string]any{"role": "assistant"}
	content := t.Content
	var calls []map[string]any
	for j, c := range t.ToolCalls {
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", turnIndex+1, j)
		}
		switch {
		case t.HasQuirk(QuirkUUIDIDs):
			id = fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", 0x5eed0000+turnIndex+1, j, reqIndex&0xfff, j, uint64(turnIndex+1)<<16|uint64(j))
		case t.HasQuirk(QuirkDuplicateIDs):
			id = "call_0"
		}
		var args any = c.ArgumentsText()
		if t.HasQuirk(QuirkArgumentsObject) {
			var obj any
			if json.Unmarshal([]byte(c.ArgumentsText()), &obj) == nil {
				args = obj
			}
		}
		call := map[string]any{
			"id":   id,
			"type": "function",
			"function": map[string]any{
				"name":      c.Name,
				"arguments": args,
			},
		}
		if t.HasQuirk(QuirkMissingIDs) {
			delete(call, "id")
		}
		if t.HasQuirk(QuirkMissingType) {
			delete(call, "type")
		}
		calls = append(calls, call)
	}
	switch {
	case len(calls) > 0 && t.HasQuirk(QuirkCallsInContentTag):
		var b strings.Builder
		b.WriteString(content)
		for _, c := range t.ToolCalls {
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "<tool_call>\n%s\n</tool_call>", inlineCall(c))
		}
		content, calls = b.String(), nil
	case len(calls) > 0 && t.HasQuirk(QuirkCallsInContentJSON):
		if len(t.ToolCalls) == 1 {
			content = inlineCall(t.ToolCalls[0])
		} else {
			parts := make([]string, len(t.ToolCalls))
			for j, c := range t.ToolCalls {
				parts[j] = inlineCall(c)
			}
			content = "[" + strings.Join(parts, ", ") + "]"
		}
		calls = nil
	case len(calls) > 0 && t.HasQuirk(QuirkLegacyFunctionCall):
		msg["function_call"] = calls[0]["function"]
		calls = nil
	}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
		if content == "" {
			msg["content"] = nil // what OpenAI sends alongside tool calls
		} else {
			msg["content"] = content
		}
	} else {
		msg["content"] = content
	}

	finish := any(t.FinishReason)
	switch t.FinishReason {
	case "":
		switch {
		case len(t.ToolCalls) > 0 && t.HasQuirk(QuirkLegacyFunctionCall):
			finish = "function_call"
		case len(t.ToolCalls) > 0 && (t.HasQuirk(QuirkCallsInContentTag) || t.HasQuirk(QuirkCallsInContentJSON)):
			finish = "stop" // the server did not see the calls
		case len(t.ToolCalls) > 0:
			finish = "tool_calls"
		default:
			finish = "stop"
		}
	case "null":
		finish = nil
	}

	resp := map[string]any{
		"id":                 fmt.Sprintf("chatcmpl-fake-%d", reqIndex),
		"object":             "chat.completion",
		"created":            Created,
		"model":              h.model(),
		"system_fingerprint": "fp_fakellm",
		"choices": []map[string]any{{
			"index":         0,
			"message":       msg,
			"logprobs":      nil,
			"finish_reason": finish,
		}},
	}
	if !t.HasQuirk(QuirkNoUsage) {
		u := Usage{}
		if t.Usage != nil {
			u = *t.Usage
		} else {
			size := len(t.Content)
			for _, c := range t.ToolCalls {
				size += len(c.Name) + len(c.ArgumentsText())
			}
			u = Usage{PromptTokens: reqSize/4 + 1, CompletionTokens: size/4 + 1}
		}
		if u.TotalTokens == 0 {
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
		}
		resp["usage"] = map[string]any{
			"prompt_tokens":     u.PromptTokens,
			"completion_tokens": u.CompletionTokens,
			"total_tokens":      u.TotalTokens,
		}
	}
	return resp
}

// inlineCall is a call as models write it in content:
// {"name": "...", "arguments": {...}}.
func inlineCall(c ToolCall) string {
	var args any
	if err := json.Unmarshal([]byte(c.ArgumentsText()), &args); err != nil {
		args = c.ArgumentsText()
	}
	b, _ := json.Marshal(struct {
		Name      string `json:"name"`
		Arguments any    `json:"arguments"`
	}{c.Name, args})
	return string(b)
}

func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// writeError writes body verbatim when given, else an OpenAI error object.
func writeError(w http.ResponseWriter, status int, body, message, typ string) {
	if body != "" {
		if json.Valid([]byte(body)) {
			w.Header().Set("Content-Type", "application/json")
		} else {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
		return
	}
	if message == "" {
		message = http.StatusText(status)
	}
	writeJSON(w, status, map[string]any{
		"error": map[string]any{"message": message, "type": typ, "param": nil, "code": nil},
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	// Real servers (Python, C++) do not escape <, > and & as \u003c.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}
