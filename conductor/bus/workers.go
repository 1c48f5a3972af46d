package bus

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Heartbeat is a live worker process as it last reported itself: written
// by `conductor worker` every few seconds, read by mission control. A
// worker whose last beat is older than its TTL is gone (killed, or its host
// lost the store); one that stopped cleanly says so.
type Heartbeat struct {
	Consumer    string        `json:"consumer"` // host:pid:n, the queue consumer name
	Host        string        `json:"host"`
	PID         int           `json:"pid"`
	Queue       string        `json:"queue"` // the queue it consumes ("redis KEY" or "embedded KEY")
	Concurrency int           `json:"concurrency"`
	InFlight    int           `json:"inFlight"`  // jobs on a lane now (never more than Concurrency)
	Finishing   int           `json:"finishing"` // jobs finishing beside the lanes
	Waiting     int           `json:"waiting"`   // jobs taken ahead of a lane, waiting for one
	StartedAt   time.Time     `json:"startedAt"`
	SeenAt      time.Time     `json:"seenAt"`
	TTL         time.Duration `json:"ttl"`
	StoppedAt   time.Time     `json:"stoppedAt,omitzero"`
}

// Gone reports whether the worker is no longer running at now: it
// stopped, or its last beat is older than its TTL.
func (h Heartbeat) Gone(now time.Time) bool {
	return !h.StoppedAt.IsZero() || now.Sub(h.SeenAt) > h.TTL
}

// Workers is implemented by the store: the workers' heartbeats.
type Workers interface {
	// PutHeartbeat records (or refreshes) a worker's heartbeat.
	PutHeartbeat(ctx context.Context, h Heartbeat) error
	// StopHeartbeat marks a worker as stopped cleanly.
	StopHeartbeat(ctx context.Context, consumer string, at time.Time) error
	// ListHeartbeats lists the workers seen since since, newest first.
	ListHeartbeats(ctx context.Context, since time.Time) ([]Heartbeat, error)
}

var _ Workers = (*sqlStore)(nil)

func (s *sqlStore) PutHeartbeat(ctx context.Context, h Heartbeat) error {
	if h.Consumer == "" {
		return errors.New("put heartbeat: empty consumer")
	}
	if h.SeenAt.IsZero() {
		h.SeenAt = s.timeNow()
	}
	if h.StartedAt.IsZero() {
		h.StartedAt = h.SeenAt
	}
	err := s.write(ctx, func(q querier) error {
		_, err := q.exec(ctx, `INSERT INTO worker_heartbeats (consumer, host, pid, queue, concurrency, in_flight, finishing, waiting, started_at, seen_at, ttl, stopped_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)
			ON CONFLICT (consumer) DO UPDATE SET host = excluded.host, pid = excluded.pid, queue = excluded.queue,
				concurrency = excluded.concurrency, in_flight = excluded.in_flight, finishing = excluded.finishing,
				waiting = excluded.waiting, seen_at = excluded.seen_at, ttl = excluded.ttl, stopped_at = 0`,
			h.Consumer, h.Host, int64(h.PID), h.Queue, int64(h.Concurrency), int64(h.InFlight), int64(h.Finishing), int64(h.Waiting),
			ts(h.StartedAt), ts(h.SeenAt), int64(h.TTL))
		return err
	})
	if err != nil {
		return fmt.Errorf("heartbeat of worker %s: %w", h.Consumer, err)
	}
	return nil
}

func (s *sqlStore) StopHeartbeat(ctx context.Context, consumer string, at time.Time) error {
	if at.IsZero() {
		at = s.timeNow()
	}
	err := s.write(ctx, func(q querier) error {
		_, err := q.exec(ctx, `UPDATE worker_heartbeats SET stopped_at = ?, in_flight = 0, finishing = 0, waiting = 0 WHERE consumer = ?`, ts(at), consumer)
		return err
	})
	if err != nil {
		return fmt.Errorf("stop heartbeat of worker %s: %w", consumer, err)
	}
	return nil
}

func (s *sqlStore) ListHeartbeats(ctx context.Context, since time.Time) ([]Heartbeat, error) {
	var out []Heartbeat
	err := s.read(ctx, func(q querier) (err error) {
		out, err = all(ctx, q, func(r scanner) (Heartbeat, error) {
			var (
				h                                            Heartbeat
				pid, conc, inFlight, finishing, waiting, ttl int64
				started, seen, stopped                       int64
			)
			err := r.Scan(&h.Consumer, &h.Host, &pid, &h.Queue, &conc, &inFlight, &finishing, &waiting, &started, &seen, &ttl, &stopped)
			h.PID, h.Concurrency, h.TTL = int(pid), int(conc), time.Duration(ttl)
			h.InFlight, h.Finishing, h.Waiting = int(inFlight), int(finishing), int(waiting)
			h.StartedAt, h.SeenAt, h.StoppedAt = fromTS(started), fromTS(seen), fromTS(stopped)
			return h, err
		}, `SELECT consumer, host, pid, queue, concurrency, in_flight, finishing, waiting, started_at, seen_at, ttl, stopped_at
			FROM worker_heartbeats WHERE seen_at >= ? ORDER BY seen_at DESC, consumer`, ts(since))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list worker heartbeats: %w", err)
	}
	return out, nil
}
