package modelscript

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
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

// TestUntilDue: an answer's end never leaves before it is due; a past due
// time does not wait; a client gone before or during the wait is reported.
func TestUntilDue(t *testing.T) {
	live := t.Context()
	for _, ahead := range []time.Duration{300 * time.Microsecond, 2 * time.Millisecond, 20 * time.Millisecond} {
		due := time.Now().Add(ahead)
		if !untilDue(live, due) {
			t.Fatalf("%s ahead: a live wait reported the client gone", ahead)
		}
		if now := time.Now(); now.Before(due) {
			t.Errorf("%s ahead: returned %s before the due time", ahead, due.Sub(now))
		}
	}
	if !untilDue(live, time.Now().Add(-time.Second)) {
		t.Error("a past due time reported the client gone")
	}
	gone, cancel := context.WithCancel(live)
	cancel()
	if untilDue(gone, time.Now().Add(time.Hour)) || untilDue(gone, time.Now().Add(-time.Second)) {
		t.Error("a client gone before the wait was not reported")
	}
	mid, cancelMid := context.WithCancel(live)
	time.AfterFunc(time.Millisecond, cancelMid)
	if untilDue(mid, time.Now().Add(time.Hour)) {
		t.Error("a client gone mid-wait was not reported")
	}
}

// BenchmarkStreamedAnswerEnd: eight clients at once, each call scripted at
// 40 ms to the first event and 10 ms of streaming (the bench's queue row).
// It reports how late the answers end against their script (arrival to
// the end, beyond 50 ms) and the process's CPU per call (the fake and its
// clients): untilDue's precision and what it costs.
func BenchmarkStreamedAnswerEnd(b *testing.B) {
	s, err := Parse([]byte(`{"turns":[],"final":{"latencyMs":40,"streamMs":10,"content":"done done done done done done done done"}}`))
	if err != nil {
		b.Fatal(err)
	}
	h := NewHandler(s)
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.SetParallelism(4) // 8 clients on this machine's 2 cores
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	reqs := h.Requests()
	var late time.Duration
	for _, r := range reqs {
		late += r.End.Sub(r.Start) - 50*time.Millisecond
	}
	cpu := time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano() + ru1.Stime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(late.Microseconds())/float64(len(reqs))/1000, "ms-late/call")
	b.ReportMetric(float64(cpu.Microseconds())/float64(len(reqs))/1000, "ms-cpu/call")
}
