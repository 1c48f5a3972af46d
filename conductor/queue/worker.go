package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ErrInterrupted is returned by a Handler whose job stopped because the
// worker is shutting down: the job is released to the queue (not counted as
// a failure) and resumes elsewhere from its checkpoint.
var ErrInterrupted = errors.New("interrupted by shutdown")

// Handler runs one job. It must return promptly (at its next step boundary,
// after checkpointing) once stop is closed, with ErrInterrupted.
type Handler func(ctx context.Context, stop <-chan struct{}, d *Delivery) error

// Consumer takes jobs from a queue and runs up to Concurrency at once.
type Consumer struct {
	Queue       Queue
	Handle      Handler
	Concurrency int           // default 1
	Wait        time.Duration // how long one take waits (WORKER_BLPOP_TIMEOUT_S)
	// Once takes at most Concurrency jobs (one round) and returns when they
	// finish: the mode for cron.
	Once bool
	// Grace is how long running jobs get after shutdown begins before their
	// context is cancelled (default 30s).
	Grace time.Duration
	Log   *slog.Logger
}

// Stats counts what a consumer did.
type Stats struct {
	Done, Failed, Dead, Released int
}

// Run consumes until ctx is cancelled (graceful: stop taking, signal running
// jobs, wait up to Grace) or, with Once, until one round is done.
func (c *Consumer) Run(ctx context.Context) (Stats, error) {
	n := c.Concurrency
	if n <= 0 {
		n = 1
	}
	wait := c.Wait
	if wait <= 0 {
		wait = 5 * time.Second
	}
	grace := c.Grace
	if grace <= 0 {
		grace = 30 * time.Second
	}
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Jobs run on a context that outlives ctx by Grace, so that they can
	// checkpoint and report after a SIGTERM.
	jobCtx, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelJobs()
	stop := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			close(stop)
			t := time.NewTimer(grace)
			defer t.Stop()
			select {
			case <-t.C:
				cancelJobs()
			case <-jobCtx.Done():
			}
		case <-jobCtx.Done():
		}
	}()

	var (
		mu    sync.Mutex
		stats Stats
		wg    sync.WaitGroup
		slots = make(chan struct{}, n)
		taken int
	)
	var firstErr error
	for {
		if ctx.Err() != nil || (c.Once && taken >= n) {
			break
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		w := wait
		if c.Once {
			w = 0
		}
		d, err := c.Queue.Take(ctx, w)
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				break
			}
			firstErr = err
			break
		}
		if d == nil {
			<-slots
			if c.Once {
				break
			}
			continue
		}
		taken++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			herr := c.Handle(jobCtx, stop, d)
			// Finishing bookkeeping must happen even during shutdown.
			bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case herr == nil:
				stats.Done++
				if err := c.Queue.Ack(bctx, d); err != nil {
					log.Error("ack failed", "job", d.ID, "err", err)
				}
			case errors.Is(herr, ErrInterrupted):
				stats.Released++
				if err := c.Queue.Release(bctx, d); err != nil {
					log.Error("release failed", "job", d.ID, "err", err)
				}
			default:
				dead, err := c.Queue.Retry(bctx, d, herr)
				if err != nil {
					log.Error("retry failed", "job", d.ID, "err", err)
				}
				if dead {
					stats.Dead++
					log.Warn("job dead-lettered", "job", d.ID, "attempts", d.Attempt, "err", herr)
				} else {
					stats.Failed++
					log.Warn("job failed; requeued", "job", d.ID, "attempt", d.Attempt, "err", herr)
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return stats, fmt.Errorf("worker: %w", firstErr)
	}
	return stats, nil
}
