//go:build !linux

package modelscript

import (
	"context"
	"time"
)

// waitTimerfd makes no wait where there is no timerfd.
func waitTimerfd(context.Context, time.Time) (ok, waited bool) { return false, false }
