package main

import (
	"context"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/queue"
)

// serveFleetSources are what the Queue page reads besides the store: the
// queue's dead letters and the model slots, on Redis when a Redis URL is
// set (as the workers use it), else in the store.
type serveFleetSources struct {
	dead      queue.DeadLetters
	queueName string
	slots     func(ctx context.Context) ([]bus.SlotUse, error)
	close     func()
}

// serveFleet opens them; one that cannot be reached is left out of the
// page with a warning, never the server's failure.
func serveFleet(c *cli.Context, d *deps, st bus.Store) serveFleetSources {
	f := serveFleetSources{close: func() {}}
	q, err := d.openQueue(c, "")
	if err != nil {
		d.Log.Warn("serve: the queue is unreachable; its dead letters are not shown", "err", err)
	} else if dl, ok := q.(queue.DeadLetters); ok {
		f.dead, f.queueName = dl, q.Name()
		f.close = func() { q.Close() }
	}
	if url := d.config(c).RedisURL; url != "" { // flag > REDIS_URL > file
		rs, err := queue.DialRedisSlots(c.Context, url)
		if err != nil {
			d.Log.Warn("serve: Redis is unreachable; the model slots are not shown", "err", err)
			return f
		}
		f.slots = rs.SlotsInUse
		prev := f.close
		f.close = func() { prev(); rs.Close() }
		return f
	}
	if ss, ok := st.(queue.SlotStore); ok {
		f.slots = ss.SlotsInUse
	}
	return f
}
