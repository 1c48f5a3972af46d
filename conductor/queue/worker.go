package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/conductor-dev/conductor/conductor/ctxwait"
)

// ErrInterrupted is returned by a Handler whose job stopped because the
// worker is shutting down: the job is released to the queue (not counted as
// a failure) and resumes elsewhere from its checkpoint.
var ErrInterrupted = errors.New("interrupted by shutdown")

// Handler runs one job. It must return promptly (at its next step boundary,
// after checkpointing) once stop is closed, with ErrInterrupted.
//
// What the error says decides the job's fate: nil acknowledges it;
// ErrInterrupted hands it back uncounted; an error marked Infra (store,
// queue or disk down) keeps the job leased and runs the handler again after
// a backoff, never counting an attempt; an error marked Permanent
// dead-letters it at once; any other error counts a failed attempt.
type Handler func(ctx context.Context, stop <-chan struct{}, d *Delivery) error

// DeadHook is told about a job before it is dead-lettered, so that what the
// job held (its backlog claim) is released with the reason. An error marked
// Infra is retried with backoff; any other error is logged.
type DeadHook func(ctx context.Context, d *Delivery, cause error) error

// Consumer takes jobs from a queue and runs up to Concurrency at once in
// their model conversation, and up to Finishing more past it.
type Consumer struct {
	Queue  Queue
	Handle Handler
	OnDead DeadHook // may be nil
	// Concurrency is how many jobs run at once (default 1): the lanes.
	Concurrency int
	// Finishing is how many jobs whose model conversation has ended
	// (Delivery.LoopDone) may finish beside the lanes: such a job hands its
	// lane to the next job and finishes on a finishing slot. 0 keeps every
	// job on its lane to the end. When every finishing slot is taken, a job
	// finishes on its lane, so a slow finish never piles up.
	Finishing int
	// Prefetch is how many jobs are taken ahead of a free lane (default 0):
	// one waits, leased to this consumer, for the next lane that frees, and
	// starts on it at once instead of after the queue's round trips. Other
	// consumers cannot take a prefetched job meanwhile: keep it small where
	// jobs are long and consumers many. Once takes none ahead.
	Prefetch int
	// StartAhead starts a prefetched job's handler at once, before a lane
	// is free: the handler must call Delivery.Lane before its model
	// conversation. What it does before that (the run's lookups, its lock,
	// its input checks) is then off the lane's path. Without StartAhead the
	// handler starts once the job holds a lane.
	StartAhead bool
	Wait       time.Duration // how long one take waits (WORKER_BLPOP_TIMEOUT_S)
	// Once takes at most Concurrency jobs (one round) and returns when they
	// finish: the mode for cron.
	Once bool
	// Grace is how long running jobs get after shutdown begins before their
	// context is cancelled (default 30s).
	Grace time.Duration
	// BackoffMin and BackoffMax bound the wait between tries while the
	// queue or the store is down (defaults 200ms and 30s).
	BackoffMin, BackoffMax time.Duration
	Log                    *slog.Logger

	running atomic.Pointer[occupied] // the running Run's slots (Occupancy)
}

// Occupancy is where a consumer's jobs are at one moment.
type Occupancy struct {
	// Lanes is the jobs on a lane: in their model conversation, or
	// finishing on their lane (Finishing 0, or every finishing slot
	// taken). Never more than Concurrency.
	Lanes int
	// Finishing is the jobs finishing beside the lanes (LoopDone moved
	// them to a finishing slot).
	Finishing int
	// Waiting is the jobs taken ahead of a lane (Prefetch), waiting for
	// one (with StartAhead, doing their work before Delivery.Lane).
	Waiting int
}

// occupied is what Occupancy reads of a running Run: its lanes' and
// finishing slots' channels, and the count of jobs waiting for a lane.
type occupied struct {
	lanes, finishing chan struct{}
	waiting          *atomic.Int64
}

// Occupancy reports where the jobs of the running Run are (zero while Run
// is not running): what a worker's heartbeat shows against its
// concurrency. The three counts are read one after another, not at once.
func (c *Consumer) Occupancy() Occupancy {
	o := c.running.Load()
	if o == nil {
		return Occupancy{}
	}
	return Occupancy{Lanes: len(o.lanes), Finishing: len(o.finishing), Waiting: int(o.waiting.Load())}
}

// Stats counts what a consumer did.
type Stats struct {
	Done, Failed, Dead, Released, Lost int
}

// outage logs one line when a dependency starts failing and one when it
// answers again, not one per try.
type outage struct {
	mu   sync.Mutex
	down map[string]bool
	log  *slog.Logger
}

func (o *outage) fail(what string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down[what] {
		o.down[what] = true
		o.log.Warn(what+" unavailable; retrying with backoff", "err", err)
	}
}

func (o *outage) ok(what string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down[what] {
		delete(o.down, what)
		o.log.Info(what + " reachable again")
	}
}

// Run consumes until ctx is cancelled (graceful: stop taking, signal running
// jobs, wait up to Grace) or, with Once, until one round is done. Queue and
// store outages are waited out with backoff: Run returns an error only for
// a programming or configuration error, never for an outage.
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
	out := &outage{down: map[string]bool{}, log: log}
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

	ahead := c.Prefetch
	if c.Once || ahead < 0 {
		ahead = 0
	}
	var (
		mu    sync.Mutex
		stats Stats
		wg    sync.WaitGroup
		// held counts the jobs taken and not yet off their lane: the lanes'
		// and the prefetched. A job is taken when one more may be held and
		// started when a lane is free.
		held  = make(chan struct{}, n+ahead)
		slots = make(chan struct{}, n)
		// finishing holds the jobs that gave their lane back (nil: none).
		finishing chan struct{}
		taken     int
		lastTurn  <-chan struct{} // the last taken job's turn (lane.turn)
		bo        = Backoff{Min: c.BackoffMin, Max: c.BackoffMax}
	)
	if c.Finishing > 0 {
		finishing = make(chan struct{}, c.Finishing)
	}
	var waiting atomic.Int64 // jobs taken and not yet on a lane (Occupancy)
	c.running.Store(&occupied{lanes: slots, finishing: finishing, waiting: &waiting})
	defer c.running.Store(nil)
	count := func(f func(*Stats)) {
		mu.Lock()
		f(&stats)
		mu.Unlock()
	}
	for {
		if ctx.Err() != nil || (c.Once && taken >= n) {
			break
		}
		select {
		case held <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		w := wait
		if c.Once {
			w = 0
		}
		d, err := c.Queue.Take(ctx, w)
		if err != nil {
			<-held
			if ctx.Err() != nil {
				break
			}
			out.fail("queue", err)
			if !ctxwait.Sleep(ctx, bo.Next()) {
				break
			}
			continue
		}
		out.ok("queue")
		bo.Reset()
		if d == nil {
			<-held
			if c.Once {
				break
			}
			continue
		}
		taken++
		hand := &lane{lanes: slots, held: held, finishing: finishing, stop: stop, after: lastTurn, turn: make(chan struct{}), waiting: &waiting}
		lastTurn = hand.turn
		waiting.Add(1)
		if c.StartAhead {
			d.lane = hand.take
		} else {
			select {
			case slots <- struct{}{}:
				hand.laned.Store(true)
				hand.unwait()
				hand.passTurn()
			case <-ctx.Done():
				// Prefetched, and shutting down before a lane freed: handed
				// back uncounted, as an interrupted job is.
				hand.unwait()
				hand.passTurn()
				c.handBack(jobCtx, d, out, count, log)
				<-held
				continue
			}
		}
		wg.Add(1)
		d.loopDone = hand.loopDone
		go func() {
			defer wg.Done()
			defer hand.done()
			c.runJob(jobCtx, stop, d, out, count, log)
		}()
	}
	wg.Wait()
	return stats, nil
}

// lane is the slot a running job holds: its lane, until it moves to a
// finishing slot. A job started ahead (StartAhead) holds only its place in
// held until it takes its lane.
type lane struct {
	lanes, held, finishing chan struct{}
	stop                   <-chan struct{}
	laned                  atomic.Bool // holds its lane
	// Lanes go to jobs in the order they were taken: after is closed once
	// the job taken before this one has its lane or has ended (nil: none),
	// turn once this one has (passTurn).
	after    <-chan struct{}
	turn     chan struct{}
	turnOnce sync.Once
	once     sync.Once
	moved    bool // on a finishing slot (set under once)
	// waiting counts the consumer's jobs not yet on a lane; this one leaves
	// it once (unwait), when it takes its lane or ends.
	waiting  *atomic.Int64
	waitOnce sync.Once
}

// take waits for a lane (Delivery.Lane). Once shutdown has begun it hands
// out none: the job goes back uncounted.
func (l *lane) take(ctx context.Context) error {
	if l.laned.Load() {
		return nil
	}
	if isClosed(l.stop) {
		return ErrInterrupted
	}
	if l.after != nil {
		select {
		case <-l.after:
		case <-l.stop:
			return ErrInterrupted
		case <-ctx.Done():
			return ErrInterrupted
		}
	}
	select {
	case l.lanes <- struct{}{}:
		l.laned.Store(true)
		l.unwait()
		l.passTurn()
		return nil
	case <-l.stop:
		return ErrInterrupted
	case <-ctx.Done():
		return ErrInterrupted
	}
}

// unwait takes the job out of the consumer's waiting count (once).
func (l *lane) unwait() {
	l.waitOnce.Do(func() {
		if l.waiting != nil {
			l.waiting.Add(-1)
		}
	})
}

// passTurn lets the job taken after this one take a lane.
func (l *lane) passTurn() {
	l.turnOnce.Do(func() {
		if l.turn != nil {
			close(l.turn)
		}
	})
}

// loopDone moves the job to a finishing slot, freeing its lane, when one
// is free; else the job keeps its lane. Only its first call acts.
func (l *lane) loopDone() {
	l.once.Do(func() {
		if l.finishing == nil || !l.laned.Load() {
			return
		}
		select {
		case l.finishing <- struct{}{}:
			l.moved = true
			<-l.lanes
			<-l.held
		default:
		}
	})
}

// done gives back the slot the job holds once it has ended; a LoopDone
// after that does nothing.
func (l *lane) done() {
	l.unwait()   // a job that ends without a lane waits no more
	l.passTurn() // and passes its turn on
	l.once.Do(func() {})
	if l.moved {
		<-l.finishing
		return
	}
	if l.laned.Load() {
		<-l.lanes
	}
	<-l.held
}

// runJob runs one delivery to its end: done, handed back, requeued or
// dead-lettered. Infrastructure failures are retried with the job leased.
func (c *Consumer) runJob(jobCtx context.Context, stop <-chan struct{}, d *Delivery, out *outage,
	count func(func(*Stats)), log *slog.Logger) {
	bo := Backoff{Min: c.BackoffMin, Max: c.BackoffMax}
	max := c.Queue.MaxAttempts()
	var herr error
	if d.Attempt > max {
		// Its consumers kept dying while running it: a poison job.
		herr = Permanent(fmt.Errorf("delivered %d times without finishing (consumers died)", d.Attempt-1))
	} else {
		for {
			herr = c.Handle(jobCtx, stop, d)
			if !IsInfra(herr) {
				out.ok("store")
				break
			}
			out.fail("store", herr)
			if isClosed(stop) {
				// Shutting down: hand the job back, uncounted.
				herr = ErrInterrupted
				break
			}
			if !ctxwait.Sleep(jobCtx, bo.Next()) {
				herr = ErrInterrupted
				break
			}
		}
	}
	settle := func(what string, op func(context.Context) error) bool {
		return c.settle(jobCtx, d, out, count, log, what, op)
	}
	switch {
	case herr == nil:
		if settle("ack", func(ctx context.Context) error { return c.Queue.Ack(ctx, d) }) {
			count(func(s *Stats) { s.Done++ })
		}
	case errors.Is(herr, ErrInterrupted):
		c.handBack(jobCtx, d, out, count, log)
	case IsPermanent(herr) || d.Attempt >= max:
		if c.OnDead != nil {
			hbo := Backoff{Min: c.BackoffMin, Max: c.BackoffMax}
			for {
				err := c.OnDead(jobCtx, d, herr)
				if err == nil || !IsInfra(err) {
					if err != nil {
						log.Error("releasing a dead job's claim failed", "job", d.ID, "err", err)
					}
					break
				}
				out.fail("store", err)
				if !ctxwait.Sleep(jobCtx, hbo.Next()) {
					// The job stays leased and comes back to finish dying.
					return
				}
			}
			out.ok("store")
		}
		if settle("dead-letter", func(ctx context.Context) error { return c.Queue.Bury(ctx, d, herr) }) {
			count(func(s *Stats) { s.Dead++ })
			log.Warn("job dead-lettered", "job", d.ID, "attempts", d.Attempt, "err", herr)
		}
	default:
		if settle("requeue", func(ctx context.Context) error { return c.Queue.Requeue(ctx, d, herr) }) {
			count(func(s *Stats) { s.Failed++ })
			log.Warn("job failed; requeued", "job", d.ID, "attempt", d.Attempt, "err", herr)
		}
	}
}

// handBack returns a job that was interrupted (or never started) to the
// queue, uncounted.
func (c *Consumer) handBack(jobCtx context.Context, d *Delivery, out *outage, count func(func(*Stats)), log *slog.Logger) {
	if c.settle(jobCtx, d, out, count, log, "release", func(ctx context.Context) error { return c.Queue.Release(ctx, d) }) {
		count(func(s *Stats) { s.Released++ })
	}
}

// settle retries a queue operation on a job until it is done, the lease is
// lost, or the grace period after a shutdown is over (the job's lease then
// runs out and another consumer takes it back).
func (c *Consumer) settle(jobCtx context.Context, d *Delivery, out *outage, count func(func(*Stats)), log *slog.Logger,
	what string, op func(context.Context) error) bool {
	bo := Backoff{Min: c.BackoffMin, Max: c.BackoffMax}
	for {
		err := op(jobCtx)
		if err == nil {
			out.ok("queue")
			return true
		}
		if errors.Is(err, ErrLeaseLost) {
			count(func(s *Stats) { s.Lost++ })
			log.Warn("job lease lost before "+what+"; another consumer holds it now", "job", d.ID, "err", err)
			return false
		}
		out.fail("queue", err)
		if !ctxwait.Sleep(jobCtx, bo.Next()) {
			log.Error(what+" abandoned at shutdown; the job returns to the queue when its lease runs out", "job", d.ID, "err", err)
			return false
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
