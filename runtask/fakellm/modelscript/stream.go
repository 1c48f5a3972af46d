package modelscript

import (
	"encoding/json"
	"fmt"
	"net/http"
	"unicode/utf8"
)

// streamPiece is how many bytes of content or arguments one chunk carries:
// small enough that every answer of a script arrives in several chunks, so
// a client's reassembly is always exercised.
const streamPiece = 7

// writeStream answers a stream=true request as server-sent events, the way
// OpenAI-compatible servers do: a first chunk with the role, content and
// tool-call arguments in pieces (a call's id, type and name in its first
// delta, by index), a chunk with the finish reason, the usage in a last
// chunk without choices when the request asked for it (include_usage), then
// "data: [DONE]". resp is the answer render made, quirks included: what a
// quirk leaves out (ids, type, usage) is left out of the chunks too.
//
// Each event is flushed on its own. wait, when not nil, is called before
// event k of n is written and paces the stream as a server generating
// tokens does; it returns false when the client has gone, and the stream
// stops there (writeStream then returns false).
func writeStream(w http.ResponseWriter, resp map[string]any, includeUsage bool, wait func(k, n int) bool) bool {
	events := streamEvents(resp, includeUsage)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	for k, ev := range events {
		if wait != nil && !wait(k, len(events)) {
			return false
		}
		w.Write(ev)
		if flusher != nil {
			flusher.Flush()
		}
	}
	return true
}

// streamEvents is the answer's server-sent events, in order, each a whole
// "data: ...\n\n" line.
func streamEvents(resp map[string]any, includeUsage bool) [][]byte {
	var events [][]byte
	add := func(chunk any) {
		b, _ := json.Marshal(chunk)
		events = append(events, fmt.Appendf(nil, "data: %s\n\n", b))
	}
	choice := resp["choices"].([]map[string]any)[0]
	msg := choice["message"].(map[string]any)
	send := func(delta map[string]any, finish any) {
		add(map[string]any{
			"id": resp["id"], "object": "chat.completion.chunk", "created": resp["created"],
			"model": resp["model"], "system_fingerprint": resp["system_fingerprint"],
			"choices": []map[string]any{{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
		})
	}
	send(map[string]any{"role": "assistant", "content": ""}, nil)
	if content, _ := msg["content"].(string); content != "" {
		for _, piece := range pieces(content) {
			send(map[string]any{"content": piece}, nil)
		}
	}
	if fc, ok := msg["function_call"]; ok {
		send(map[string]any{"function_call": fc}, nil)
	}
	calls, _ := msg["tool_calls"].([]map[string]any)
	for j, call := range calls {
		fn := call["function"].(map[string]any)
		first := map[string]any{"index": j, "function": map[string]any{"name": fn["name"], "arguments": ""}}
		for _, k := range []string{"id", "type"} {
			if v, ok := call[k]; ok {
				first[k] = v
			}
		}
		args, isText := fn["arguments"].(string)
		if !isText {
			// Arguments as an object (a server quirk) come whole.
			first["function"] = map[string]any{"name": fn["name"], "arguments": fn["arguments"]}
			args = ""
		}
		send(map[string]any{"tool_calls": []map[string]any{first}}, nil)
		for _, piece := range pieces(args) {
			send(map[string]any{"tool_calls": []map[string]any{{"index": j, "function": map[string]any{"arguments": piece}}}}, nil)
		}
	}
	send(map[string]any{}, choice["finish_reason"])
	if usage, ok := resp["usage"]; ok && includeUsage {
		add(map[string]any{
			"id": resp["id"], "object": "chat.completion.chunk", "created": resp["created"],
			"model": resp["model"], "choices": []any{}, "usage": usage,
		})
	}
	return append(events, []byte("data: [DONE]\n\n"))
}

// pieces cuts s into chunks of about streamPiece bytes on rune boundaries.
func pieces(s string) []string {
	var out []string
	for len(s) > 0 {
		n := min(streamPiece, len(s))
		for n < len(s) && !utf8.RuneStart(s[n]) {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}
