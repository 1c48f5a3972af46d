package modelscript

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/ctxwait"
)

// TestAnswerAtRunsFromArrival: a turn's latency is counted from the
// request's arrival, so the time the fake spent reading and checking the
// request is not added on top of it (the bench's "model 50 ms per call"
// is the model's whole time), and the answer's generation follows it.
func TestAnswerAtRunsFromArrival(t *testing.T) {
	arrived := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		turn Turn
		frac float64
		want time.Duration
	}{
		{Turn{LatencyMs: 50}, 0, 50 * time.Millisecond},
		{Turn{LatencyMs: 50}, 1, 50 * time.Millisecond}, // no generation time: all at once
		{Turn{LatencyMs: 40, StreamMs: 10}, 0, 40 * time.Millisecond},
		{Turn{LatencyMs: 40, StreamMs: 10}, 0.5, 45 * time.Millisecond},
		{Turn{LatencyMs: 40, StreamMs: 10}, 1, 50 * time.Millisecond},
		{Turn{StreamMs: 8}, 0.25, 2 * time.Millisecond},
	} {
		if got := answerAt(arrived, c.turn, c.frac).Sub(arrived); got != c.want {
			t.Errorf("latency %d ms, stream %d ms, part %.2f: due %s after arrival, want %s", c.turn.LatencyMs, c.turn.StreamMs, c.frac, got, c.want)
		}
	}
	// Already late: no wait at all, whatever the context.
	if !ctxwait.Until(t.Context(), time.Now().Add(-time.Second)) {
		t.Error("waiting until a past time reported the client gone")
	}
}

// TestStreamPacedOverStreamMs: with streamMs the answer's events are
// spread over that time (each one asked for in order, the last due at
// latencyMs + streamMs after the arrival), and a client that goes away
// mid-stream stops it; without it they are written at once.
func TestStreamPacedOverStreamMs(t *testing.T) {
	resp := map[string]any{
		"id": "c1", "created": 1, "model": "m", "system_fingerprint": "fp",
		"choices": []map[string]any{{"index": 0, "finish_reason": "tool_calls", "message": map[string]any{
			"role": "assistant", "content": "",
			"tool_calls": []map[string]any{{"id": "call_1", "type": "function", "function": map[string]any{"name": "read_file", "arguments": `{"path": "README.md"}`}}},
		}}},
		"usage": map[string]any{"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
	}
	want := streamEvents(resp, true)
	if len(want) < 5 || string(want[len(want)-1]) != "data: [DONE]\n\n" {
		t.Fatalf("events: %q", want)
	}
	var asked []int
	rec := httptest.NewRecorder()
	done := writeStream(rec, resp, true, func(k, n int) bool {
		if n != len(want) {
			t.Errorf("wait(%d, %d): n is not the %d events", k, n, len(want))
		}
		asked = append(asked, k)
		return true
	})
	for i, k := range asked {
		if k != i {
			t.Fatalf("waits asked for events %v, want 0..%d in order", asked, len(want)-1)
		}
	}
	if !done || len(asked) != len(want) || rec.Body.String() != string(joinEvents(want)) {
		t.Fatalf("paced stream wrote %q after %d waits (done %v), want every event", rec.Body.String(), len(asked), done)
	}
	// The client gone before the third event: two events, no [DONE], and
	// the stream says it was cut.
	rec = httptest.NewRecorder()
	done = writeStream(rec, resp, true, func(k, n int) bool { return k < 2 })
	if got := rec.Body.String(); done || got != string(joinEvents(want[:2])) {
		t.Errorf("stream after the client left: %q (done %v), want the first two events only", got, done)
	}
	rec = httptest.NewRecorder()
	if !writeStream(rec, resp, true, nil) || rec.Body.String() != string(joinEvents(want)) {
		t.Errorf("unpaced stream differs from its events")
	}
}

// TestStreamMsThroughTheServer: a real request to a turn of latencyMs 20
// and streamMs 30 gets its [DONE] no sooner than 50 ms after it was sent,
// and a whole (unstreamed) answer no sooner either. Only lower bounds: a
// loaded machine makes it later, never earlier.
func TestStreamMsThroughTheServer(t *testing.T) {
	script, err := Parse([]byte(`{"mode": "sequential", "turns": [{"latencyMs": 20, "streamMs": 30, "content": "a streamed answer in pieces"}, {"latencyMs": 20, "streamMs": 30, "content": "whole"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(script))
	defer srv.Close()
	for _, stream := range []bool{true, false} {
		body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		if stream {
			body = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		}
		t0 := time.Now()
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var last string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() != "" {
				last = sc.Text()
			}
		}
		took := time.Since(t0)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %v: status %d", stream, resp.StatusCode)
		}
		if stream && last != "data: [DONE]" {
			t.Errorf("stream ended with %q, want data: [DONE]", last)
		}
		if took < 50*time.Millisecond {
			t.Errorf("stream %v: the answer ended %s after the request, before its latency and generation time (50 ms)", stream, took)
		}
	}
}

func joinEvents(evs [][]byte) []byte {
	var out []byte
	for _, e := range evs {
		out = append(out, e...)
	}
	return out
}
