package runtask

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Streaming: with ModelSpec.Stream the client asks for server-sent events
// (stream: true, stream_options.include_usage) and reassembles the chunks
// into one chat completion before the quirk normalisation sees it, so every
// repair of normalizeChatResponse (calls in content, <think> blocks,
// missing ids, finish-reason variants) applies to streamed answers alike.
// The per-attempt timeout becomes an idle timeout: an attempt fails only
// when no byte arrives for that long, however long the whole answer takes.

// StreamProgress is what has arrived of a streamed answer so far.
type StreamProgress struct {
	Bytes     int // bytes of the event stream
	Content   int // characters of content (and reasoning) text
	ToolCalls int // tool calls begun
}

type progressKey struct{}

// WithStreamProgress returns a context whose model requests report the
// progress of a streamed answer to fn (from the reading goroutine; fn must
// be quick). Requests that do not stream never call it.
func WithStreamProgress(ctx context.Context, fn func(StreamProgress)) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

func streamProgressFrom(ctx context.Context) func(StreamProgress) {
	fn, _ := ctx.Value(progressKey{}).(func(StreamProgress))
	return fn
}

// isEventStream reports whether a response carries server-sent events.
func isEventStream(contentType string) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(contentType)), "text/event-stream")
}

// streamCall is one tool call being reassembled from deltas.
type streamCall struct {
	ID        string
	Type      string
	Name      string
	Arguments strings.Builder
	// ArgumentsRaw holds arguments sent as a JSON object (a server quirk):
	// kept as they came, for the normalisation to convert.
	ArgumentsRaw json.RawMessage
}

// streamChunk is one "data:" event of a chat completion stream.
type streamChunk struct {
	ID      string          `json:"id"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Usage   json.RawMessage `json:"usage"`
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		Index        int             `json:"index"`
		FinishReason json.RawMessage `json:"finish_reason"`
		Delta        struct {
			Role             string          `json:"role"`
			Content          *string         `json:"content"`
			ReasoningContent *string         `json:"reasoning_content"`
			FunctionCall     json.RawMessage `json:"function_call"`
			ToolCalls        []struct {
				Index    *int   `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
}

// assembleStream reads a chat completion event stream and returns the one
// non-streamed answer it adds up to (OpenAI's chat.completion shape). A
// stream that ends without "[DONE]" and without a finish reason is cut
// short (io.ErrUnexpectedEOF: retryable); an error event is returned as an
// error object, which normalizeChatResponse reports.
func assembleStream(r io.Reader, progress func(StreamProgress)) ([]byte, error) {
	var (
		p            StreamProgress
		id, model    string
		created      int64
		content      strings.Builder
		reasoning    strings.Builder
		sawReasoning bool
		functionCall json.RawMessage
		calls        []*streamCall
		byIndex      = map[int]*streamCall{}
		finish       json.RawMessage
		usage        json.RawMessage
		done         bool
		total        int
	)
	sc := bufio.NewScanner(r)
	// A small first buffer: an event is rarely larger, and the scanner grows
	// it for one that is (a buffer per call is most of what a worker allocates).
	sc.Buffer(make([]byte, 0, 4<<10), maxAnswerBytes)
	var data bytes.Buffer
	flush := func() error {
		if data.Len() == 0 {
			return nil
		}
		payload := bytes.TrimSpace(data.Bytes())
		defer data.Reset()
		if bytes.Equal(payload, []byte("[DONE]")) {
			done = true
			return nil
		}
		var ch streamChunk
		if err := json.Unmarshal(payload, &ch); err != nil {
			return &notJSONError{status: 200, contentType: "text/event-stream", snippet: snippet(payload, 200)}
		}
		if len(ch.Error) > 0 && !isJSONNull(ch.Error) {
			return &streamErrorEvent{body: append([]byte(nil), payload...)}
		}
		id, model, created = cmp.Or(ch.ID, id), cmp.Or(ch.Model, model), max(ch.Created, created)
		if len(ch.Usage) > 0 && !isJSONNull(ch.Usage) {
			usage = append(json.RawMessage(nil), ch.Usage...)
		}
		for _, c := range ch.Choices {
			if c.Index != 0 {
				continue // n > 1 is never asked for
			}
			d := c.Delta
			if d.Content != nil {
				content.WriteString(*d.Content)
				p.Content += len(*d.Content)
			}
			if d.ReasoningContent != nil {
				reasoning.WriteString(*d.ReasoningContent)
				sawReasoning = true
				p.Content += len(*d.ReasoningContent)
			}
			if len(d.FunctionCall) > 0 && !isJSONNull(d.FunctionCall) {
				functionCall = append(json.RawMessage(nil), d.FunctionCall...)
			}
			for _, tc := range d.ToolCalls {
				var call *streamCall
				switch {
				case tc.Index != nil:
					call = byIndex[*tc.Index]
					if call == nil {
						call = &streamCall{}
						byIndex[*tc.Index] = call
						calls = append(calls, call)
					}
				case len(calls) > 0 && tc.ID == "" && tc.Function.Name == "":
					call = calls[len(calls)-1] // a continuation without an index
				default:
					call = &streamCall{} // a server that numbers nothing: one delta, one call
					calls = append(calls, call)
				}
				call.ID = cmp.Or(call.ID, tc.ID)
				call.Type = cmp.Or(call.Type, tc.Type)
				call.Name += tc.Function.Name
				if a := bytes.TrimSpace(tc.Function.Arguments); len(a) > 0 && !isJSONNull(a) {
					var s string
					if a[0] == '"' && json.Unmarshal(a, &s) == nil {
						call.Arguments.WriteString(s)
					} else {
						call.ArgumentsRaw = append(json.RawMessage(nil), a...)
					}
				}
			}
			if len(c.FinishReason) > 0 && !isJSONNull(c.FinishReason) {
				finish = append(json.RawMessage(nil), c.FinishReason...)
			}
		}
		p.ToolCalls = len(calls)
		if progress != nil {
			progress(p)
		}
		return nil
	}
	for !done && sc.Scan() {
		line := sc.Bytes()
		total += len(line) + 1
		p.Bytes = total
		switch {
		case len(line) == 0:
			if err := flush(); err != nil {
				return nil, err
			}
		case line[0] == ':':
			// A comment (keep-alive).
		default:
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			if string(field) == "data" {
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.Write(value)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if !done && finish == nil {
		return nil, fmt.Errorf("reading the answer: the event stream ended before its last chunk: %w", io.ErrUnexpectedEOF)
	}
	msg := map[string]any{"role": "assistant", "content": content.String()}
	if sawReasoning {
		msg["reasoning_content"] = reasoning.String()
	}
	if functionCall != nil {
		msg["function_call"] = functionCall
	}
	if len(calls) > 0 {
		out := make([]map[string]any, 0, len(calls))
		for _, c := range calls {
			fn := map[string]any{"name": c.Name}
			if c.ArgumentsRaw != nil {
				fn["arguments"] = c.ArgumentsRaw
			} else {
				fn["arguments"] = c.Arguments.String()
			}
			call := map[string]any{"function": fn}
			if c.ID != "" {
				call["id"] = c.ID
			}
			if c.Type != "" {
				call["type"] = c.Type
			}
			out = append(out, call)
		}
		msg["tool_calls"] = out
	}
	answer := map[string]any{
		"id": id, "object": "chat.completion", "created": created, "model": model,
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": finish}},
	}
	if usage != nil {
		answer["usage"] = usage
	}
	return json.Marshal(answer)
}

// streamErrorEvent is an error sent inside a stream that began with 200.
type streamErrorEvent struct{ body []byte }

func (e *streamErrorEvent) Error() string { return "the server sent an error event" }

// readStreamed reads an event-stream answer into one chat completion,
// turning a streamed error event back into the error object it carried.
func readStreamed(body io.Reader, progress func(StreamProgress)) ([]byte, error) {
	b, err := assembleStream(body, progress)
	var ev *streamErrorEvent
	if errors.As(err, &ev) {
		return ev.body, nil
	}
	return b, err
}

// streamInterval is the least time between two "stream" progress events
// of one answer.
const streamInterval = 2 * time.Second

// streamProgress returns the progress callback of the model call that will
// be step: a "stream" event (what has arrived so far) at most every
// streamInterval, so a slow local server shows it is working.
func (r *runner) streamProgress(step int) func(StreamProgress) {
	var last time.Time
	return func(p StreamProgress) {
		now := r.now()
		if now.Sub(last) < streamInterval {
			return
		}
		if last.IsZero() {
			last = now // the first chunk starts the clock
			return
		}
		last = now
		text := fmt.Sprintf("%d chars", p.Content)
		if p.ToolCalls > 0 {
			text += fmt.Sprintf(", %d tool calls", p.ToolCalls)
		}
		r.ev.emit(Event{Event: "stream", Time: now, RunID: r.state.RunID, Step: step, Text: text})
	}
}
