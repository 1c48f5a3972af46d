package dispatch

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/queue"
)

// startWorkerBeat writes a worker process's heartbeat in the store
// (bus.Workers): host, pid, queue, concurrency and where its jobs are
// (occupancy: in flight is the lanes in use, so never more than the
// concurrency; finishing and waiting beside them), refreshed every third
// of ttl, until the returned stop, which records a clean stop. Mission
// control shows workers whose beat is older than ttl as gone. A store
// without heartbeats, or one that fails, costs the worker nothing (a
// warning per outage).
func startWorkerBeat(ctx context.Context, st bus.Store, log *slog.Logger, consumer, queueName string, concurrency int, occupancy func() queue.Occupancy, ttl time.Duration, now func() time.Time) func() {
	ws, ok := st.(bus.Workers)
	if !ok {
		return func() {}
	}
	host, _ := os.Hostname()
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	beat := bus.Heartbeat{
		Consumer: consumer, Host: host, PID: os.Getpid(), Queue: queueName,
		Concurrency: concurrency, StartedAt: now(), TTL: ttl,
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		failing := false
		for {
			h := beat
			o := occupancy()
			h.InFlight, h.Finishing, h.Waiting, h.SeenAt = o.Lanes, o.Finishing, o.Waiting, now()
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
	return func() {
		cancel()
		<-done
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		if err := ws.StopHeartbeat(sctx, consumer, now()); err != nil {
			log.Warn("worker heartbeat: record the stop", "err", err)
		}
	}
}
