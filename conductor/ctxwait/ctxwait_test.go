package ctxwait

import (
	"context"
	"testing"
	"time"
)

// TestSleep: a live context lets the wait run to its end, an ended one
// stops it at once (a wait of an hour returns), and a wait of zero or
// less only says whether the context is live. No upper bound on time: a
// loaded machine is only slower.
func TestSleep(t *testing.T) {
	live := context.Background()
	start := time.Now()
	if !Sleep(live, 20*time.Millisecond) || time.Since(start) < 20*time.Millisecond {
		t.Error("a live context's wait did not run to its end")
	}
	if !Sleep(live, 0) || !Until(live, time.Now().Add(-time.Second)) {
		t.Error("a wait already over reported the context ended")
	}
	ended, cancel := context.WithCancel(live)
	cancel()
	if Sleep(ended, time.Hour) || Sleep(ended, 0) || Until(ended, time.Now().Add(time.Hour)) {
		t.Error("an ended context's wait reported it ran to its end")
	}
	late, cancelLate := context.WithCancel(live)
	time.AfterFunc(10*time.Millisecond, cancelLate)
	if Sleep(late, time.Hour) {
		t.Error("a context ended mid-wait was not reported")
	}
}
