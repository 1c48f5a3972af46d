// Package queue is the job queue workers consume: Redis for many hosts
// (reliable delivery: BLMOVE into a per-consumer processing list, a heartbeat
// key per consumer, a reaper returning the jobs of dead consumers, a
// dead-letter list after N failed attempts), or the embedded store's queue
// table for cron on one machine.
//
// Producers may keep LPUSH/RPUSH-ing to the same list seed tools BLPOP from:
// the payload format on the list is the job itself, unchanged.
//
// queue carries job payloads only; it never carries a credential.
package queue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	// Attempt counts deliveries of this payload, starting at 1.
	Attempt int

	jobID int64 // embedded store row
}

// Queue is what a worker consumes.
type Queue interface {
	// Push appends a job at the tail.
	Push(ctx context.Context, payload []byte) error
	// Take waits up to wait for a job; (nil, nil) when none came.
	Take(ctx context.Context, wait time.Duration) (*Delivery, error)
	// Ack removes a finished job for good.
	Ack(ctx context.Context, d *Delivery) error
	// Retry returns a failed job to the queue, or moves it to the
	// dead-letter list once it has failed MaxAttempts times (dead=true).
	Retry(ctx context.Context, d *Delivery, cause error) (dead bool, err error)
	// Release returns a job that was interrupted (not failed) to the head of
	// the queue without counting the attempt.
	Release(ctx context.Context, d *Delivery) error
	// Name describes the backend for banners: "redis <key>" or "embedded <key>".
	Name() string
	Close() error
}

// PayloadID is the stable id of a payload.
func PayloadID(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:8])
}
