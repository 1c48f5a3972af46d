package modelscript

import (
	"context"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// waitTimerfd waits until t or ctx's end on a timerfd read through Go's
// poller, and reports whether t came first; waited is false when no
// timerfd could be made (the caller waits another way).
func waitTimerfd(ctx context.Context, t time.Time) (ok, waited bool) {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil, true
	}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return false, false
	}
	f := os.NewFile(uintptr(fd), "timerfd") // non-blocking: read through the poller
	defer f.Close()
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(fd, 0, &spec, nil); err != nil {
		return false, false
	}
	fired := make(chan error, 1)
	go func() {
		var n [8]byte // the expiry count
		_, err := f.Read(n[:])
		fired <- err
	}()
	select {
	case err := <-fired:
		if err != nil { // the timerfd failed: wait the rest on a Go timer
			return false, false
		}
		return ctx.Err() == nil, true
	case <-ctx.Done():
		return false, true // f.Close (deferred) ends the read
	}
}
