package dispatch

import (
	"context"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/queue"
)

// workerBeat is a worker process's heartbeat in the store (bus.Workers):
// host, pid, queue, concurrency and jobs in flight, refreshed every
// third of ttl; mission control shows workers whose beat is older than ttl
// as gone.
type workerBeat struct {
	store    bus.Workers
	log      *slog.Logger
	beat     bus.Heartbeat
	inFlight atomic.Int64
}

// startWorkerBeat writes the first heartbeat and keeps it fresh until the
// returned stop, which records a clean stop. A store without heartbeats,
// or one that fails, costs the worker nothing (a warning per outage).
func startWorkerBeat(ctx context.Context, st bus.Store, log *slog.Logger, consumer, queueName string, concurrency int, ttl time.Duration, now func() time.Time) (*workerBeat, func()) {
	ws, ok := st.(bus.Workers)
	if !ok {
		return &workerBeat{}, func() {}
	}
	host, _ := os.Hostname()
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	b := &workerBeat{store: ws, log: log, beat: bus.Heartbeat{
		Consumer: consumer, Host: host, PID: os.Getpid(), Queue: queueName,
		Concurrency: concurrency, StartedAt: now(), TTL: ttl,
	}}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		failing := false
		for {
			h := b.beat
			h.InFlight, h.SeenAt = int(b.inFlight.Load()), now()
			err := ws.PutHeartbeat(bctx, h)
			switch {
			case err != nil && !failing && bctx.Err() == nil:
				failing = true
				log.Warn("worker heartbeat not recorded (mission control will show this worker as gone)", "err", err)
			case err == nil && failing:
				failing = false
				log.Info("worker heartbeat recorded again")
			}
			select {
			case <-bctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return b, func() {
		cancel()
		<-done
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		if err := ws.StopHeartbeat(sctx, consumer, now()); err != nil {
			log.Warn("worker heartbeat: record the stop", "err", err)
		}
	}
}

// track counts the jobs h is running, for the heartbeat.
func (b *workerBeat) track(h queue.Handler) queue.Handler {
	return func(ctx context.Context, stop <-chan struct{}, dl *queue.Delivery) error {
		b.inFlight.Add(1)
		defer b.inFlight.Add(-1)
		return h(ctx, stop, dl)
	}
}
