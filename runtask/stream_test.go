package runtask

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sseServer answers every chat completion with the events of next(n), n
// counting requests from 1; an event "STALL" stops writing until the
// client goes away, "CUT" ends the response there.
func sseServer(t *testing.T, next func(n int) []string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var count atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(count.Add(1))
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, ev := range next(n) {
			switch ev {
			case "STALL":
				<-r.Context().Done()
				return
			case "CUT":
				return
			}
			if d, ok := strings.CutPrefix(ev, "SLEEP "); ok {
				ms := 0
				fmt.Sscan(d, &ms)
				time.Sleep(time.Duration(ms) * time.Millisecond)
				continue
			}
			fmt.Fprintf(w, "%s\n\n", ev)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &count
}

func chunk(delta, finish string) string {
	if finish == "" {
		finish = "null"
	} else {
		finish = `"` + finish + `"`
	}
	return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + finish + `}]}`
}

func streamSpec(t *testing.T, url string, timeout time.Duration) ModelSpec {
	spec := testSpec(t, url)
	spec.Stream, spec.Timeout = true, timeout
	return spec
}

func TestStreamIdleTimeoutNotWholeAnswer(t *testing.T) {
	// 20 chunks 60 ms apart: the whole answer takes longer than the
	// timeout, but no silence does.
	srv, _ := sseServer(t, func(int) []string {
		evs := []string{chunk(`{"role":"assistant","content":""}`, "")}
		for i := 0; i < 20; i++ {
			evs = append(evs, "SLEEP 60", chunk(`{"content":"ab"}`, ""))
		}
		return append(evs, chunk(`{}`, "stop"), "data: [DONE]")
	})
	c := newTestClient(t, streamSpec(t, srv.URL, 1*time.Second), nil)
	var mu sync.Mutex
	var seen []StreamProgress
	ctx := WithStreamProgress(context.Background(), func(p StreamProgress) {
		mu.Lock()
		seen = append(seen, p)
		mu.Unlock()
	})
	reply, err := c.Complete(ctx, baseRequest())
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if reply.Message.Content != strings.Repeat("ab", 20) || reply.FinishReason != "stop" {
		t.Fatalf("reply %q finish %q", reply.Message.Content, reply.FinishReason)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 20 || seen[len(seen)-1].Content != 40 {
		t.Fatalf("progress %+v", seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].Content < seen[i-1].Content || seen[i].Bytes < seen[i-1].Bytes {
			t.Fatalf("progress went back: %+v", seen)
		}
	}
}

func TestStreamStallIsIdleTimeout(t *testing.T) {
	srv, count := sseServer(t, func(int) []string {
		return []string{chunk(`{"role":"assistant","content":"thinking"}`, ""), "STALL"}
	})
	c := newTestClient(t, streamSpec(t, srv.URL, 200*time.Millisecond), nil)
	_, err := c.Complete(context.Background(), baseRequest())
	if err == nil || !strings.Contains(err.Error(), "no byte of the answer for 200ms") {
		t.Fatalf("err %v", err)
	}
	if n := count.Load(); n != 1 {
		t.Fatalf("a timed-out attempt was retried: %d requests", n)
	}
}

func TestStreamCutShortIsRetried(t *testing.T) {
	srv, count := sseServer(t, func(n int) []string {
		if n == 1 {
			return []string{chunk(`{"role":"assistant","content":"par"}`, ""), "CUT"}
		}
		return []string{chunk(`{"role":"assistant","content":"whole"}`, ""), chunk(`{}`, "stop"), `data: {"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`, "data: [DONE]"}
	})
	rec := &sleepRecorder{}
	c := newTestClient(t, streamSpec(t, srv.URL, 10*time.Second), nil, withSleep(rec.sleep))
	reply, err := c.Complete(context.Background(), baseRequest())
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if reply.Message.Content != "whole" || count.Load() != 2 {
		t.Fatalf("reply %q after %d requests", reply.Message.Content, count.Load())
	}
	if reply.Usage == nil || *reply.Usage != (Usage{3, 2, 5}) {
		t.Fatalf("usage %+v", reply.Usage)
	}
}

func TestStreamErrorEvent(t *testing.T) {
	srv, _ := sseServer(t, func(int) []string {
		return []string{chunk(`{"role":"assistant","content":""}`, ""), `data: {"error":{"message":"model overloaded mid-answer","type":"server_error"}}`}
	})
	c := newTestClient(t, streamSpec(t, srv.URL, 10*time.Second), nil)
	_, err := c.Complete(context.Background(), baseRequest())
	if err == nil || !strings.Contains(err.Error(), "model overloaded mid-answer") {
		t.Fatalf("err %v", err)
	}
}

func TestStreamGarbageEvent(t *testing.T) {
	srv, _ := sseServer(t, func(int) []string {
		return []string{chunk(`{"role":"assistant","content":""}`, ""), `data: <html>502</html>`}
	})
	c := newTestClient(t, streamSpec(t, srv.URL, 10*time.Second), nil)
	_, err := c.Complete(context.Background(), baseRequest())
	var me *ModelError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "502") {
		t.Fatalf("err %v", err)
	}
}

func TestAssembleStreamToolCalls(t *testing.T) {
	// Split arguments by index, a second call without an id, keep-alive
	// comments, multi-line data and a server that numbers nothing.
	in := strings.Join([]string{
		": keep-alive",
		chunk(`{"role":"assistant","tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"read_file","arguments":""}}]}`, ""),
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":1,"function":{"name":"list_dir","arguments":"{}"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"x\"}"}}]}`, ""),
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\n" + "data: \"finish_reason\":\"tool_calls\"}]}",
		"data: [DONE]",
	}, "\n\n") + "\n\n"
	got, err := assembleStream(strings.NewReader(in), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"choices":[{"finish_reason":"tool_calls","index":0,"message":{"content":"","role":"assistant","tool_calls":[{"function":{"arguments":"{\"path\":\"x\"}","name":"read_file"},"id":"a","type":"function"},{"function":{"arguments":"{}","name":"list_dir"}}]}}],"created":1,"id":"c1","model":"m","object":"chat.completion"}`
	if string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	unnumbered := chunk(`{"tool_calls":[{"id":"p","function":{"name":"f","arguments":"{}"}}]}`, "") + "\n\n" +
		chunk(`{"tool_calls":[{"id":"q","function":{"name":"g","arguments":"{}"}}]}`, "tool_calls") + "\n\n"
	got, err = assembleStream(strings.NewReader(unnumbered), nil)
	if err != nil || !strings.Contains(string(got), `"id":"p"`) || !strings.Contains(string(got), `"id":"q"`) {
		t.Fatalf("unnumbered calls: %s %v", got, err)
	}
}

// TestAssembleStreamLargeEvent: an event far larger than the scanner's
// first buffer (one tool call's whole file in one chunk) comes through
// whole.
func TestAssembleStreamLargeEvent(t *testing.T) {
	content := strings.Repeat("0123456789abcdef", 20<<10) // 320 KiB
	args, _ := json.Marshal(map[string]string{"path": "big.txt", "content": content})
	argsJSON, _ := json.Marshal(string(args))
	in := chunk(`{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"write_file","arguments":`+string(argsJSON)+`}}]}`, "tool_calls") + "\n\ndata: [DONE]\n\n"
	got, err := assembleStream(strings.NewReader(in), nil)
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					Function struct{ Arguments string } `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(got, &answer); err != nil || len(answer.Choices) != 1 || len(answer.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("assembled %d bytes: %v", len(got), err)
	}
	if a := answer.Choices[0].Message.ToolCalls[0].Function.Arguments; a != string(args) {
		t.Fatalf("arguments of %d bytes came back as %d bytes", len(args), len(a))
	}
}

func FuzzAssembleStream(f *testing.F) {
	f.Add("data: " + `{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
	f.Add(chunk(`{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":{"x":1}}}]}`, "tool_calls") + "\n\n")
	f.Add(": x\n\ndata: {\"error\":\"boom\"}\n\n")
	f.Fuzz(func(t *testing.T, in string) {
		out, err := readStreamed(strings.NewReader(in), func(StreamProgress) {})
		if err != nil {
			return
		}
		// Whatever a stream says, the reassembled answer is one JSON
		// object the normalisation can read (or refuse with a message).
		if !json.Valid(out) {
			t.Fatalf("assembled answer is not JSON: %q", out)
		}
		if _, _, err := normalizeChatResponse(out, chatRequestInfo{priorIDs: map[string]bool{}, tools: map[string]bool{}}); err != nil && err.Error() == "" {
			t.Fatal("an error without a message")
		}
	})
}
