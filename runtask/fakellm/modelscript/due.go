package modelscript

import (
	"context"
	"time"

	"github.com/conductor-dev/conductor/conductor/ctxwait"
)

// untilDue waits until t, when an answer must end, or until ctx ends, and
// reports whether t came first.
//
// The bench's queue row compares conductor with a model that takes exactly
// its scripted time, so the answer's end must leave when it is due. Go's
// timers wake a quiet process up to about a millisecond late (its poller
// sleeps in whole milliseconds). Where the kernel has timerfd the wait is
// on one instead, which wakes the poller when it fires. Measured on the
// bench's machine (BenchmarkStreamedAnswerEnd): answers ended 0.58–0.61 ms
// late on Go's timers, 0.24–0.29 ms on a timerfd, for the same CPU per
// call. The answer's other events keep Go's timers: a timerfd for each
// would double the fake's CPU per call, which the row's machine shares
// with conductor.
func untilDue(ctx context.Context, t time.Time) bool {
	if ok, waited := waitTimerfd(ctx, t); waited {
		return ok
	}
	return ctxwait.Until(ctx, t)
}
