package modelscript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/conductor-dev/conductor/conductor/jsonstrict"
)

// Mode selects how a request is matched to a turn.
const (
	// ModeSequential answers requests with the turns in arrival order.
	ModeSequential = "sequential"
	// ModeHistory answers a request with the reply turn whose index equals
	// the number of assistant messages already in the request. Concurrent
	// sessions and resumed sessions then each get the right turn.
	ModeHistory = "history"
)

// Quirk names a deviation of a real server from the OpenAI JSON.
const (
	QuirkArgumentsObject    = "arguments-object"      // llama.cpp regression: arguments as a JSON object
	QuirkMissingIDs         = "missing-ids"           // llama.cpp: tool calls without "id"
	QuirkDuplicateIDs       = "duplicate-ids"         // every call of the turn has id "call_0"
	QuirkUUIDIDs            = "uuid-ids"              // mlx_lm.server: bare UUIDs, no "call_" prefix
	QuirkMissingType        = "missing-type"          // tool calls without "type": "function"
	QuirkCallsInContentTag  = "calls-in-content-tag"  // Ollama/Qwen: <tool_call>{...}</tool_call> in content
	QuirkCallsInContentJSON = "calls-in-content-json" // vLLM with a wrong parser: bare JSON in content
	QuirkLegacyFunctionCall = "legacy-function-call"  // message.function_call instead of tool_calls
	QuirkNoUsage            = "no-usage"              // no "usage" object at all
	QuirkGarbage            = "garbage"               // a 200 answer whose body is not JSON
)

var knownQuirks = map[string]bool{
	QuirkArgumentsObject: true, QuirkMissingIDs: true, QuirkDuplicateIDs: true,
	QuirkUUIDIDs: true, QuirkMissingType: true, QuirkCallsInContentTag: true,
	QuirkCallsInContentJSON: true, QuirkLegacyFunctionCall: true, QuirkNoUsage: true,
	QuirkGarbage: true,
}

// Quirks lists every quirk name, sorted.
func Quirks() []string {
	out := make([]string, 0, len(knownQuirks))
	for q := range knownQuirks {
		out = append(out, q)
	}
	sort.Strings(out)
	return out
}

// Script is a scripted conversation. On disk it is either a JSON array of
// turns or a JSON object with these fields.
type Script struct {
	// Model is the model name the server reports; default "fakellm".
	Model string `json:"model,omitempty"`
	// Mode is ModeSequential (default) or ModeHistory.
	Mode string `json:"mode,omitempty"`
	// RejectMissingContent answers 400 like Ollama when a message of the
	// request has no "content" (or a null one).
	RejectMissingContent bool `json:"rejectMissingContent,omitempty"`
	// RequireBearer answers 401 unless the request carries
	// "Authorization: Bearer <RequireBearer>".
	RequireBearer string `json:"requireBearer,omitempty"`
	// ForgetBodies records requests without their bodies and headers: a
	// long run (the bench's thousands of requests) keeps no conversation
	// in memory. Each request is still checked against its turn
	// (mismatches work as before); Requests then holds only its method,
	// path, turn, status and timing, and AtPeak lists nothing.
	ForgetBodies bool `json:"forgetBodies,omitempty"`
	// Turns are played in order.
	Turns []Turn `json:"turns"`
	// Final answers every request after the turns ran out; default a plain
	// "done" with finish_reason "stop", so tool loops end.
	Final *Turn `json:"final,omitempty"`
}

// Turn is one answer: a reply (content and/or tool calls) or an HTTP error.
type Turn struct {
	// Name labels the turn in mismatches and errors.
	Name string `json:"name,omitempty"`
	// Expect: substrings the request must contain (in its decoded text or
	// its raw JSON). A miss is recorded as a Mismatch; the turn is still played.
	Expect []string `json:"expect,omitempty"`
	// ExpectLast: substrings the last message of the request must contain.
	ExpectLast []string `json:"expectLast,omitempty"`
	// Forbid: substrings the request must not contain (secrets).
	Forbid []string `json:"forbid,omitempty"`
	// LatencyMs is how long after the request arrived its answer starts
	// (the fake's own work on the request counts inside it).
	LatencyMs int `json:"latencyMs,omitempty"`
	// StreamMs is how long the answer takes from its start to its end, as
	// a server generating tokens: a streamed answer's events are spread
	// evenly over it (the last at latencyMs + streamMs after the arrival);
	// a whole answer comes at the end. 0: all at once.
	StreamMs int `json:"streamMs,omitempty"`

	Content   string     `json:"content,omitempty"`
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// FinishReason defaults to "tool_calls" when there are tool calls and
	// "stop" otherwise; any string is sent as is ("tool_call", "stop",
	// "function_call", "length"); "null" sends a JSON null.
	FinishReason string `json:"finishReason,omitempty"`
	// Usage is reported as given; absent, it is estimated from the sizes.
	Usage  *Usage   `json:"usage,omitempty"`
	Quirks []string `json:"quirks,omitempty"`

	// Error makes the turn an HTTP error answer instead of a reply.
	Error *HTTPError `json:"error,omitempty"`
}

// ToolCall is one scripted call. Arguments is a JSON object (sent as a
// string, or as the object itself with the arguments-object quirk) or a JSON
// string sent verbatim (to script invalid arguments).
type ToolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// ArgumentsText is the arguments as the JSON string OpenAI sends.
func (c ToolCall) ArgumentsText() string {
	a := bytes.TrimSpace(c.Arguments)
	if len(a) == 0 {
		return "{}"
	}
	if a[0] == '"' {
		var s string
		if json.Unmarshal(a, &s) == nil {
			return s
		}
	}
	var buf bytes.Buffer
	if json.Compact(&buf, a) == nil {
		return buf.String()
	}
	return string(a)
}

// Usage is the token usage a turn reports.
type Usage struct {
	PromptTokens     int `json:"promptTokens"`
	CompletionTokens int `json:"completionTokens"`
	TotalTokens      int `json:"totalTokens,omitempty"`
}

// HTTPError is an error answer.
type HTTPError struct {
	Status int `json:"status"`
	// Body is sent verbatim; default an OpenAI error object with Message.
	Body    string `json:"body,omitempty"`
	Message string `json:"message,omitempty"`
	// RetryAfter is the Retry-After header value (seconds or an HTTP date).
	RetryAfter string `json:"retryAfter,omitempty"`
}

// IsError reports whether the turn is an HTTP error answer.
func (t Turn) IsError() bool { return t.Error != nil }

// HasQuirk reports whether the turn asks for quirk q.
func (t Turn) HasQuirk(q string) bool {
	for _, x := range t.Quirks {
		if x == q {
			return true
		}
	}
	return false
}

func (t Turn) label(i int) string {
	if t.Name != "" {
		return fmt.Sprintf("turn %d (%s)", i, t.Name)
	}
	return fmt.Sprintf("turn %d", i)
}

// Load reads and validates a script file.
func Load(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model script: %w", err)
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("model script %s: %w", path, err)
	}
	return s, nil
}

// Parse decodes a script strictly (unknown fields and wrong types are errors
// naming the field path) and validates it.
func Parse(data []byte) (*Script, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("empty script")
	}
	var s Script
	if trimmed[0] == '[' {
		if err := jsonstrict.Decode(trimmed, &s.Turns, "turns"); err != nil {
			return nil, err
		}
	} else if err := jsonstrict.Decode(trimmed, &s, ""); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks the script for values the handler cannot play.
func (s *Script) Validate() error {
	switch s.Mode {
	case "", ModeSequential, ModeHistory:
	default:
		return fmt.Errorf("mode: %q is not %q or %q", s.Mode, ModeSequential, ModeHistory)
	}
	for i, t := range s.Turns {
		if err := t.validate(fmt.Sprintf("turns[%d]", i)); err != nil {
			return err
		}
	}
	if s.Final != nil {
		if err := s.Final.validate("final"); err != nil {
			return err
		}
	}
	return nil
}

func (t Turn) validate(path string) error {
	if t.LatencyMs < 0 {
		return fmt.Errorf("%s.latencyMs: must not be negative", path)
	}
	if t.StreamMs < 0 {
		return fmt.Errorf("%s.streamMs: must not be negative", path)
	}
	for _, q := range t.Quirks {
		if !knownQuirks[q] {
			return fmt.Errorf("%s.quirks: unknown quirk %q (known: %s)", path, q, strings.Join(Quirks(), ", "))
		}
	}
	if t.Error != nil {
		if t.Error.Status < 400 || t.Error.Status > 599 {
			return fmt.Errorf("%s.error.status: %d is not an HTTP error status (400-599)", path, t.Error.Status)
		}
		if t.Content != "" || len(t.ToolCalls) > 0 || len(t.Quirks) > 0 || t.Usage != nil || t.FinishReason != "" {
			return fmt.Errorf("%s: an error turn has no content, toolCalls, quirks, usage or finishReason", path)
		}
	}
	if t.HasQuirk(QuirkCallsInContentTag) && t.HasQuirk(QuirkCallsInContentJSON) {
		return fmt.Errorf("%s.quirks: %s and %s exclude each other", path, QuirkCallsInContentTag, QuirkCallsInContentJSON)
	}
	for j, c := range t.ToolCalls {
		p := fmt.Sprintf("%s.toolCalls[%d]", path, j)
		if c.Name == "" {
			return fmt.Errorf("%s.name: required", p)
		}
		a := bytes.TrimSpace(c.Arguments)
		if len(a) > 0 && a[0] != '{' && a[0] != '"' {
			return fmt.Errorf("%s.arguments: must be a JSON object or a JSON string", p)
		}
	}
	if t.Usage != nil && (t.Usage.PromptTokens < 0 || t.Usage.CompletionTokens < 0 || t.Usage.TotalTokens < 0) {
		return fmt.Errorf("%s.usage: token counts must not be negative", path)
	}
	return nil
}
