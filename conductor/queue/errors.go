package queue

import (
	"errors"
	"math/rand/v2"
	"syscall"
	"time"
)

// ErrLeaseLost is returned by Ack, Requeue, Bury and Release when this
// consumer no longer holds the job: its lease expired and another consumer
// took it back. The late finisher must not act on the job again.
var ErrLeaseLost = errors.New("job lease lost: another consumer holds the job now")

// infraError marks a failure of the infrastructure around a job (store,
// queue, disk): not the job's fault, never counted as an attempt.
type infraError struct{ err error }

func (e *infraError) Error() string { return e.err.Error() }
func (e *infraError) Unwrap() error { return e.err }

// Infra marks err as an infrastructure failure (nil stays nil): the worker
// keeps the job leased, backs off and runs it again.
func Infra(err error) error {
	if err == nil || IsInfra(err) {
		return err
	}
	return &infraError{err}
}

// IsInfra reports an error marked with Infra, or a disk error (no space,
// quota, I/O), which no retry of the job itself can be blamed for.
func IsInfra(err error) bool {
	var ie *infraError
	if errors.As(err, &ie) {
		return true
	}
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EIO) ||
		errors.Is(err, syscall.EROFS)
}

// permanentError marks a job that can never succeed as it is (a payload
// that is not JSON, an unknown role or model, a missing repository).
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as a failure no retry can fix: the job is
// dead-lettered on its first attempt, with err as the reason.
func Permanent(err error) error {
	if err == nil || IsPermanent(err) {
		return err
	}
	return &permanentError{err}
}

// IsPermanent reports an error marked with Permanent.
func IsPermanent(err error) bool {
	var pe *permanentError
	return errors.As(err, &pe)
}

// Backoff is a capped exponential backoff with full jitter.
type Backoff struct {
	Min, Max time.Duration // defaults 200ms and 30s
	n        int
}

// Next is the wait before the next try.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = 200 * time.Millisecond
	}
	if hi <= 0 {
		hi = 30 * time.Second
	}
	d := lo << min(b.n, 30)
	if d <= 0 || d > hi {
		d = hi
	}
	b.n++
	// Full jitter in [d/2, d]: many workers coming back from one outage
	// do not retry in step.
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Reset starts the backoff over after a success.
func (b *Backoff) Reset() { b.n = 0 }
