package main

import (
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/queue"
)

// queueFlags are shared by enqueue and worker.
func queueFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "queue", Value: queue.DefaultKey, Usage: "queue key (Redis list or embedded queue name)", EnvVars: []string{"CONDUCTOR_QUEUE"}},
		&cli.StringFlag{Name: "redis-url", Usage: "Redis URL (env REDIS_URL); without it the embedded store's queue is used"},
		&cli.IntFlag{Name: "max-attempts", Value: queue.DefaultMaxAttempts, Usage: "attempts before a job goes to the dead-letter list"},
		&cli.DurationFlag{Name: "heartbeat-ttl", Value: 30 * time.Second, Usage: "a consumer (Redis or embedded queue) silent this long is dead and its jobs return to the queue"},
	}
}

var consumerSeq atomic.Int64

// consumerName is unique per process and consumer: host:pid:n.
func consumerName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), strconv.FormatInt(consumerSeq.Add(1), 10))
}

// openQueue opens Redis when a URL is set, else the embedded store's queue.
// consumer is empty for producers.
func (d *deps) openQueue(c *cli.Context, consumer string) (queue.Queue, error) {
	if url := d.config(c).RedisURL; url != "" {
		return queue.DialRedis(c.Context, queue.RedisOptions{
			URL: url, Key: c.String("queue"), Consumer: consumer,
			MaxAttempts: c.Int("max-attempts"), HeartbeatTTL: c.Duration("heartbeat-ttl"), Now: d.Now,
		})
	}
	st, err := d.openStore(c)
	if err != nil {
		return nil, err
	}
	return &queue.Embedded{Store: st, Key: c.String("queue"), Consumer: consumer, MaxAttempt: c.Int("max-attempts"),
		Lease: c.Duration("heartbeat-ttl")}, nil
}
