package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
)

// Embedded is the queue table of the embedded (or PostgreSQL) bus store: the
// queue for cron on one machine, with no Redis. Taking is atomic in the
// store, so several cron-started workers never take the same job.
type Embedded struct {
	Store       bus.Store
	Key         string
	Consumer    string
	MaxAttempts int
	// Poll is how often Take looks again while waiting (default 200ms).
	Poll time.Duration
}

// Name describes the queue.
func (e *Embedded) Name() string { return "embedded " + e.Key }

// Push appends a job.
func (e *Embedded) Push(ctx context.Context, payload []byte) error {
	if _, err := e.Store.Enqueue(ctx, e.Key, payload); err != nil {
		return fmt.Errorf("queue %s: push: %w", e.Key, err)
	}
	return nil
}

// Take takes the oldest job, waiting up to wait for one.
func (e *Embedded) Take(ctx context.Context, wait time.Duration) (*Delivery, error) {
	poll := e.Poll
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	deadline := time.Now().Add(wait)
	for {
		job, ok, err := e.Store.TakeJob(ctx, e.Key, e.Consumer)
		if err != nil {
			return nil, fmt.Errorf("queue %s: take: %w", e.Key, err)
		}
		if ok {
			return &Delivery{Payload: job.Payload, ID: PayloadID(job.Payload), Attempt: job.Attempts + 1, jobID: job.ID}, nil
		}
		if time.Now().Add(poll).After(deadline) {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// Ack removes a finished job.
func (e *Embedded) Ack(ctx context.Context, d *Delivery) error {
	return e.Store.FinishJob(ctx, d.jobID, false, "")
}

// Retry requeues the job, or finishes it as dead after MaxAttempts.
func (e *Embedded) Retry(ctx context.Context, d *Delivery, cause error) (bool, error) {
	max := e.MaxAttempts
	if max <= 0 {
		max = DefaultMaxAttempts
	}
	msg := "unknown error"
	if cause != nil {
		msg = cause.Error()
	}
	if d.Attempt >= max {
		return true, e.Store.FinishJob(ctx, d.jobID, false, msg)
	}
	return false, e.Store.FinishJob(ctx, d.jobID, true, msg)
}

// Release returns an interrupted job to the queue. The store counts it as
// an attempt; MaxAttempts leaves room for that.
func (e *Embedded) Release(ctx context.Context, d *Delivery) error {
	return e.Store.FinishJob(ctx, d.jobID, true, "interrupted")
}

// Close does nothing: the store belongs to the caller.
func (e *Embedded) Close() error { return nil }

var (
	_ Queue = (*Redis)(nil)
	_ Queue = (*Embedded)(nil)
)

// ErrNoQueue is returned when neither Redis nor a store is configured.
var ErrNoQueue = errors.New("no queue: set REDIS_URL or use the embedded store")
