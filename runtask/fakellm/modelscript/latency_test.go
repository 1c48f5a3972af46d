package modelscript

import (
	"testing"
	"time"
)

// TestAnswerDelayRunsFromArrival: a turn's latency is counted from the
// request's arrival, so the time the fake spent reading and checking the
// request is not added on top of it (the bench's "model 50 ms per call"
// is the model's whole time).
func TestAnswerDelayRunsFromArrival(t *testing.T) {
	arrived := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		spent time.Duration // the fake's own work before it waits
		want  time.Duration
	}{
		{0, 50 * time.Millisecond},
		{3 * time.Millisecond, 47 * time.Millisecond},
		{50 * time.Millisecond, 0},
		{80 * time.Millisecond, 0}, // already late: answer at once
	} {
		if got := answerDelay(arrived, 50, arrived.Add(c.spent)); got != c.want {
			t.Errorf("latency 50 ms, %s spent on the request: waits %s, want %s", c.spent, got, c.want)
		}
	}
}
