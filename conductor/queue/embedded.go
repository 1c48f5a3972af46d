package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
)

// DefaultLease is how long a job stays leased to a consumer that stopped
// renewing it (it died) before another consumer takes it back.
const DefaultLease = 30 * time.Second

// Embedded is the queue table of the embedded (or PostgreSQL) bus store: the
// queue for cron on one machine, with no Redis. Taking is atomic in the
// store, so several cron-started workers never take the same job. A taken
// job is leased: a heartbeat renews the leases of this consumer's jobs every
// Lease/3, and a job whose lease ran out (its consumer died) is taken back
// by the next consumer that looks.
type Embedded struct {
	Store      bus.Store
	Key        string
	Consumer   string
	MaxAttempt int           // default DefaultMaxAttempts
	Lease      time.Duration // default DefaultLease
	// Poll is how often Take looks again while waiting (default 200ms).
	Poll time.Duration

	once    sync.Once
	mu      sync.Mutex
	stop    chan struct{}
	done    chan struct{}
	lastErr time.Time // the store's last failure seen by Take
	// held counts the jobs this process was given and has not finished;
	// suspect is set when a take failed: it may have taken a job whose
	// answer was lost, which the heartbeat would renew for ever.
	held    map[int64]int
	suspect bool
}

// Name describes the queue.
func (e *Embedded) Name() string { return "embedded " + e.Key }

func (e *Embedded) lease() time.Duration {
	if e.Lease <= 0 {
		return DefaultLease
	}
	return e.Lease
}

// MaxAttempts is how many failed attempts bury a job.
func (e *Embedded) MaxAttempts() int {
	if e.MaxAttempt <= 0 {
		return DefaultMaxAttempts
	}
	return e.MaxAttempt
}

// Push appends a job.
func (e *Embedded) Push(ctx context.Context, payload []byte) error {
	if _, err := e.Store.Enqueue(ctx, e.Key, payload); err != nil {
		return fmt.Errorf("queue %s: push: %w", e.Key, err)
	}
	return nil
}

// heartbeat renews this consumer's leases until Close. A failed renewal is
// retried at the next tick; the lease is three ticks long.
func (e *Embedded) heartbeat() {
	e.once.Do(func() {
		e.stop, e.done = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(e.done)
			t := time.NewTicker(e.lease() / 3)
			defer t.Stop()
			for {
				select {
				case <-e.stop:
					return
				case <-t.C:
					ctx, cancel := context.WithTimeout(context.Background(), e.lease()/3)
					e.Store.RenewJobs(ctx, e.Key, e.Consumer)
					cancel()
				}
			}
		}()
	})
}

// Take takes the oldest free (or expired) job, waiting up to wait for one.
func (e *Embedded) Take(ctx context.Context, wait time.Duration) (*Delivery, error) {
	if e.Consumer == "" {
		return nil, errors.New("queue: Take needs a consumer name")
	}
	e.heartbeat()
	poll := e.Poll
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	deadline := time.Now().Add(wait)
	for {
		if err := e.returnOrphans(ctx); err != nil {
			return nil, err
		}
		// After the store failed us, expired leases are not taken back for
		// one lease: the holders could not renew while it was down.
		lease := e.lease()
		e.mu.Lock()
		if time.Since(e.lastErr) < lease {
			lease = 0
		}
		e.mu.Unlock()
		job, ok, err := e.Store.TakeJob(ctx, e.Key, e.Consumer, lease)
		if err != nil {
			e.mu.Lock()
			e.lastErr = time.Now()
			e.suspect = true
			e.mu.Unlock()
			return nil, fmt.Errorf("queue %s: take: %w", e.Key, err)
		}
		if ok {
			e.mu.Lock()
			if e.held == nil {
				e.held = map[int64]int{}
			}
			e.held[job.ID]++
			e.mu.Unlock()
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

// returnOrphans gives back, after a failed take, the jobs the store says
// this consumer holds and no delivery of this process does: a take whose
// answer was lost (a connection cut after the commit). Without it the
// heartbeat would renew such a job's lease while the consumer lives, and it
// would never run. A store without listings cannot be asked; the job then
// waits for this consumer to end.
func (e *Embedded) returnOrphans(ctx context.Context) error {
	e.mu.Lock()
	suspect := e.suspect
	e.mu.Unlock()
	if !suspect {
		return nil
	}
	views, err := bus.ViewsOf(e.Store)
	if err != nil {
		e.mu.Lock()
		e.suspect = false
		e.mu.Unlock()
		return nil
	}
	jobs, err := views.ListJobs(ctx)
	if err != nil {
		return fmt.Errorf("queue %s: check for jobs a failed take left: %w", e.Key, err)
	}
	for _, j := range jobs {
		e.mu.Lock()
		mine := j.Queue == e.Key && j.TakenBy == e.Consumer && j.DeadAt.IsZero() && e.held[j.ID] == 0
		e.mu.Unlock()
		if !mine {
			continue
		}
		// Finished meanwhile (no longer this consumer's): nothing to give.
		err := e.Store.FinishJob(ctx, j.ID, e.Consumer, bus.JobRelease, "")
		if err != nil && !errors.Is(err, bus.ErrConflict) && !errors.Is(err, bus.ErrNotFound) {
			return fmt.Errorf("queue %s: give back job %d a failed take left: %w", e.Key, j.ID, err)
		}
	}
	e.mu.Lock()
	e.suspect = false
	e.mu.Unlock()
	return nil
}

func (e *Embedded) finish(ctx context.Context, what string, d *Delivery, end bus.JobEnd, msg string) error {
	err := e.Store.FinishJob(ctx, d.jobID, e.Consumer, end, msg)
	if err == nil || errors.Is(err, bus.ErrConflict) || errors.Is(err, bus.ErrNotFound) {
		e.mu.Lock()
		if e.held[d.jobID] > 1 {
			e.held[d.jobID]--
		} else {
			delete(e.held, d.jobID)
		}
		e.mu.Unlock()
	}
	if errors.Is(err, bus.ErrConflict) || errors.Is(err, bus.ErrNotFound) {
		return fmt.Errorf("queue %s: %s job %d: %v: %w", e.Key, what, d.jobID, err, ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("queue %s: %s job %d: %w", e.Key, what, d.jobID, err)
	}
	return nil
}

// Ack removes a finished job.
func (e *Embedded) Ack(ctx context.Context, d *Delivery) error {
	return e.finish(ctx, "ack", d, bus.JobDone, "")
}

// Requeue returns a failed job to the queue, counting the attempt.
func (e *Embedded) Requeue(ctx context.Context, d *Delivery, cause error) error {
	return e.finish(ctx, "requeue", d, bus.JobRetry, errText(cause))
}

// Bury keeps the job as a dead letter.
func (e *Embedded) Bury(ctx context.Context, d *Delivery, cause error) error {
	return e.finish(ctx, "dead-letter", d, bus.JobDead, errText(cause))
}

// Release returns an interrupted job to the queue without counting it.
func (e *Embedded) Release(ctx context.Context, d *Delivery) error {
	return e.finish(ctx, "release", d, bus.JobRelease, "")
}

func errText(err error) string {
	if err == nil {
		return "unknown error"
	}
	return err.Error()
}

// DeadLetters lists the dead jobs, oldest first.
func (e *Embedded) DeadLetters(ctx context.Context) ([]DeadLetter, error) {
	jobs, err := e.Store.DeadJobs(ctx, e.Key)
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, 0, len(jobs))
	for _, j := range jobs {
		d := &Delivery{Payload: j.Payload, ID: PayloadID(j.Payload), Attempt: j.Attempts}
		out = append(out, newDeadLetter(d, errors.New(j.LastError), j.DeadAt))
	}
	return out, nil
}

// RetryDead returns every dead job with the id (payload id, run id, or row
// id) to the queue, its attempts reset.
func (e *Embedded) RetryDead(ctx context.Context, id string) error {
	return e.eachDead(ctx, id, e.Store.ReviveJob)
}

// DropDead deletes every dead job with the id (payload id, run id, or row
// id).
func (e *Embedded) DropDead(ctx context.Context, id string) error {
	return e.eachDead(ctx, id, e.Store.DropJob)
}

func (e *Embedded) eachDead(ctx context.Context, id string, fn func(context.Context, int64) error) error {
	jobs, err := e.Store.DeadJobs(ctx, e.Key)
	if err != nil {
		return err
	}
	found := false
	for _, j := range jobs {
		dl := newDeadLetter(&Delivery{Payload: j.Payload, ID: PayloadID(j.Payload)}, nil, j.DeadAt)
		if !dl.Matches(id) && strconv.FormatInt(j.ID, 10) != id {
			continue
		}
		found = true
		if err := fn(ctx, j.ID); err != nil && !errors.Is(err, bus.ErrNotFound) {
			return err
		}
	}
	if !found {
		return fmt.Errorf("dead letter %s on %s: %w", id, e.Key, ErrNoDeadLetter)
	}
	return nil
}

// Close stops the lease heartbeat. The store belongs to the caller.
func (e *Embedded) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stop != nil {
		select {
		case <-e.stop:
		default:
			close(e.stop)
			<-e.done
		}
	}
	return nil
}

var (
	_ Queue       = (*Redis)(nil)
	_ Queue       = (*Embedded)(nil)
	_ DeadLetters = (*Redis)(nil)
	_ DeadLetters = (*Embedded)(nil)
)

// ErrNoQueue is returned when neither Redis nor a store is configured.
var ErrNoQueue = errors.New("no queue: set REDIS_URL or use the embedded store")
