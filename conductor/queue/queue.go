// Package queue is the job queue workers consume: Redis for many hosts
// (reliable delivery: BLMOVE into a per-consumer processing list, a heartbeat
// key per consumer, a reaper returning the jobs of dead consumers, a
// dead-letter list), or the embedded store's queue table for cron on one
// machine (leases renewed by a heartbeat, expired ones taken back). On both,
// only the lease holder can finish a job.
//
// The Consumer decides a job's fate from its handler's error: infrastructure
// failures (Infra: store, queue, disk) are waited out with backoff and never
// counted as attempts; Permanent failures (bad input) are dead-lettered at
// once; other failures count until MaxAttempts.
//
// Producers may keep LPUSH/RPUSH-ing to the same list seed tools BLPOP from:
// the payload format on the list is the job itself, unchanged.
//
// queue carries job payloads only; it never carries a credential.
package queue

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"
)

// DefaultKey is the Redis list seed orchestrators push jobs to.
const DefaultKey = "echodo:orchestrator:jobs"

// DefaultMaxAttempts is how many times a job is tried before it goes to the
// dead-letter list.
const DefaultMaxAttempts = 3

// Delivery is one job taken from a queue, to be acknowledged or retried.
type Delivery struct {
	Payload []byte
	// ID is stable for a payload: the first 16 hex digits of its SHA-256.
	ID string
	// Attempt counts deliveries of this payload, starting at 1. A delivery
	// past the queue's MaxAttempts is one whose consumers kept dying: the
	// consumer dead-letters it without running it.
	Attempt int

	jobID int64 // embedded store row

	loopDone func()                      // set by the Consumer running it (LoopDone)
	lane     func(context.Context) error // set by a Consumer that starts it ahead (Lane)
}

// Lane waits until the consumer running d gives the job one of its lanes
// (Consumer.Concurrency). A consumer with StartAhead starts a job's handler
// as soon as the job is taken, and the handler does what needs no lane
// first (reads, locks, input checks) and calls Lane before its model
// conversation. Lane returns nil at once when the job holds its lane
// already, or when the consumer gave it one before the handler started; it
// returns ErrInterrupted when the consumer shuts down first (the job goes
// back uncounted).
func (d *Delivery) Lane(ctx context.Context) error {
	if d.lane == nil {
		return nil
	}
	return d.lane(ctx)
}

// LoopDone tells the consumer running d that the job's model conversation
// has ended: what is left of it (extracting the patch, writing the records,
// completing the job) goes on beside the consumer's next job, on one of its
// finishing slots (Consumer.Finishing), when one is free. Calling it again,
// or on a delivery no consumer runs, does nothing.
func (d *Delivery) LoopDone() {
	if d.loopDone != nil {
		d.loopDone()
	}
}

// Queue is what a worker consumes. A taken job is leased to this consumer
// while its heartbeat lives; a consumer that stops beating loses its jobs to
// the others. Ack, Requeue, Bury and Release act only on a job this consumer
// still holds: ErrLeaseLost otherwise.
type Queue interface {
	// Push appends a job at the tail.
	Push(ctx context.Context, payload []byte) error
	// Take waits up to wait for a job; (nil, nil) when none came.
	Take(ctx context.Context, wait time.Duration) (*Delivery, error)
	// Ack removes a finished job for good.
	Ack(ctx context.Context, d *Delivery) error
	// Requeue returns a failed job to the tail of the queue; the attempt
	// counts.
	Requeue(ctx context.Context, d *Delivery, cause error) error
	// Bury moves the job to the dead-letter list with cause.
	Bury(ctx context.Context, d *Delivery, cause error) error
	// Release returns a job that was interrupted (not failed) to the head of
	// the queue without counting the attempt.
	Release(ctx context.Context, d *Delivery) error
	// MaxAttempts is how many failed attempts bury a job.
	MaxAttempts() int
	// Name describes the backend for banners: "redis <key>" or "embedded <key>".
	Name() string
	Close() error
}

// RunLocker is a queue that can hold a named lock shared by every consumer
// of the queue (Redis: SET NX PX). A dispatcher takes one per run id so that
// a redelivery racing a slow heartbeat never runs the same run twice at
// once. Queues without one (the embedded store's, whose leases are rows of
// the same store the claims are in) rely on the backlog claim alone.
type RunLocker interface {
	// Lock takes name for ttl; ok is false when another consumer holds it.
	// refresh extends a held lock; release drops it if it is still ours.
	Lock(ctx context.Context, name string, ttl time.Duration) (ok bool, refresh func(context.Context) error, release func(context.Context), err error)
}

var _ RunLocker = (*Redis)(nil)

// DeadLetter is a dead-lettered job.
type DeadLetter struct {
	ID       string          `json:"id"`
	Payload  json.RawMessage `json:"payload"`
	Attempts int             `json:"attempts"`
	Error    string          `json:"error"`
	At       time.Time       `json:"at"`
	// Body is the payload exactly as it was pushed, when Payload (compacted
	// JSON, or a JSON string for a payload that is not JSON) differs.
	Body string `json:"body,omitempty"`
}

// Raw is the payload exactly as it was pushed.
func (dl DeadLetter) Raw() []byte {
	if dl.Body != "" {
		return []byte(dl.Body)
	}
	var s string
	if json.Unmarshal(dl.Payload, &s) == nil {
		return []byte(s)
	}
	return dl.Payload
}

func newDeadLetter(d *Delivery, cause error, at time.Time) DeadLetter {
	msg := "unknown error"
	if cause != nil {
		msg = cause.Error()
	}
	dl := DeadLetter{ID: d.ID, Attempts: d.Attempt, Error: msg, At: at.UTC()}
	var buf bytes.Buffer
	if json.Compact(&buf, d.Payload) == nil {
		dl.Payload = buf.Bytes()
	} else {
		dl.Payload, _ = json.Marshal(string(d.Payload))
	}
	if !bytes.Equal(dl.Raw(), d.Payload) {
		dl.Body = string(d.Payload)
	}
	return dl
}

// Matches reports whether id names the dead letter: its payload id, or
// the run id of its job.
func (dl DeadLetter) Matches(id string) bool {
	if id == "" {
		return false
	}
	if dl.ID == id {
		return true
	}
	j, err := ParseJob(dl.Raw())
	return err == nil && j.RunID == id
}

// DeadLetters is the dead-letter list of a queue, for the operator: list,
// retry (back to the queue, attempts reset) and drop, by payload id or run
// id.
type DeadLetters interface {
	DeadLetters(ctx context.Context) ([]DeadLetter, error)
	RetryDead(ctx context.Context, id string) error
	DropDead(ctx context.Context, id string) error
}

// ErrNoDeadLetter is returned when no dead letter has the id.
var ErrNoDeadLetter = errors.New("no such dead letter")

// PayloadID is the stable id of a payload.
func PayloadID(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:8])
}
