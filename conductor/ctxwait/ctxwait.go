// Package ctxwait waits for a time or a context, whichever comes first:
// the one timer-and-select every backoff, poll and scripted delay uses.
package ctxwait

import (
	"context"
	"time"
)

// Sleep waits d; it returns false when ctx ended first (or had ended: a d
// of zero or less only reports whether ctx is still live).
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Until waits until t, as Sleep does.
func Until(ctx context.Context, t time.Time) bool { return Sleep(ctx, time.Until(t)) }
