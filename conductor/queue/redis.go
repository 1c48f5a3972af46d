package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conductor-dev/conductor/conductor/bus"
)

// RedisOptions configures a Redis queue consumer or producer.
type RedisOptions struct {
	URL          string        // REDIS_URL: redis://, rediss:// or unix://
	Key          string        // the job list (DefaultKey when empty)
	Consumer     string        // this consumer's unique name (host:pid:n)
	HeartbeatTTL time.Duration // a consumer silent this long is dead (default 30s)
	MaxAttempts  int           // default DefaultMaxAttempts
	Now          func() time.Time
}

// Redis is a reliable Redis queue.
//
// Keys, for a job list K and consumer C:
//
//	K                      the job list (producers LPUSH/RPUSH, seed tools BLPOP)
//	K:processing:C         jobs C has taken and not finished (BLMOVE target)
//	K:consumers            set of consumers that may hold jobs
//	K:alive:C              heartbeat, refreshed every TTL/3 while C lives
//	K:attempts             hash: payload id → deliveries so far
//	K:dead                 dead-letter list: JSON {payload, id, attempts, error, at}
type Redis struct {
	c        *redis.Client
	o        RedisOptions
	mu       sync.Mutex
	stop     chan struct{}
	done     chan struct{}
	lastReap time.Time
}

// DialRedis connects, checks the server answers and starts the heartbeat.
// An unreachable server is a clear error (without the URL's password).
func DialRedis(ctx context.Context, o RedisOptions) (*Redis, error) {
	if o.Key == "" {
		o.Key = DefaultKey
	}
	if o.HeartbeatTTL <= 0 {
		o.HeartbeatTTL = 30 * time.Second
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	opt, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("redis: REDIS_URL %s: %w", bus.RedactURL(o.URL), err)
	}
	opt.DialTimeout = 3 * time.Second
	opt.MaxRetries = 1
	c := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis: cannot reach %s: %w", bus.RedactURL(o.URL), err)
	}
	r := &Redis{c: c, o: o, stop: make(chan struct{}), done: make(chan struct{})}
	if o.Consumer != "" {
		if err := r.beat(ctx); err != nil {
			c.Close()
			return nil, err
		}
		go r.heartbeat()
	} else {
		close(r.done)
	}
	return r, nil
}

func (r *Redis) key(parts ...string) string {
	k := r.o.Key
	for _, p := range parts {
		k += ":" + p
	}
	return k
}

func (r *Redis) processing() string { return r.key("processing", r.o.Consumer) }

func (r *Redis) beat(ctx context.Context) error {
	pipe := r.c.TxPipeline()
	pipe.SAdd(ctx, r.key("consumers"), r.o.Consumer)
	pipe.Set(ctx, r.key("alive", r.o.Consumer), r.o.Now().UTC().Format(time.RFC3339), r.o.HeartbeatTTL)
	_, err := pipe.Exec(ctx)
	if err != nil {
		return fmt.Errorf("redis: heartbeat: %w", err)
	}
	return nil
}

func (r *Redis) heartbeat() {
	defer close(r.done)
	t := time.NewTicker(r.o.HeartbeatTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), r.o.HeartbeatTTL/3)
			r.beat(ctx) // a missed beat is retried at the next tick
			cancel()
		}
	}
}

// Name describes the queue.
func (r *Redis) Name() string { return "redis " + r.o.Key }

// Push appends a job at the tail (RPUSH), so BLPOP and BLMOVE LEFT take the
// oldest first.
func (r *Redis) Push(ctx context.Context, payload []byte) error {
	if err := r.c.RPush(ctx, r.o.Key, payload).Err(); err != nil {
		return fmt.Errorf("redis: push to %s: %w", r.o.Key, err)
	}
	return nil
}

// Take reaps dead consumers (at most every TTL/3), then waits for a job.
func (r *Redis) Take(ctx context.Context, wait time.Duration) (*Delivery, error) {
	if r.o.Consumer == "" {
		return nil, errors.New("redis: Take needs a consumer name")
	}
	if r.o.Now().Sub(r.lastReap) > r.o.HeartbeatTTL/3 {
		if _, err := r.Reap(ctx); err != nil {
			return nil, err
		}
		r.lastReap = r.o.Now()
	}
	if wait <= 0 {
		wait = 10 * time.Millisecond // BLMOVE 0 would block forever
	}
	raw, err := r.c.BLMove(ctx, r.o.Key, r.processing(), "LEFT", "RIGHT", wait).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("redis: take from %s: %w", r.o.Key, err)
	}
	d := &Delivery{Payload: []byte(raw), ID: PayloadID([]byte(raw))}
	n, err := r.c.HIncrBy(ctx, r.key("attempts"), d.ID, 1).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: count attempts: %w", err)
	}
	d.Attempt = int(n)
	if d.Attempt > r.o.MaxAttempts {
		// Its consumers kept dying while running it: a poison job.
		if err := r.bury(ctx, d, fmt.Errorf("delivered %d times without finishing (consumers died)", d.Attempt-1)); err != nil {
			return nil, err
		}
		return r.Take(ctx, wait)
	}
	return d, nil
}

// Ack removes a finished job.
func (r *Redis) Ack(ctx context.Context, d *Delivery) error {
	pipe := r.c.TxPipeline()
	pipe.LRem(ctx, r.processing(), 1, d.Payload)
	pipe.HDel(ctx, r.key("attempts"), d.ID)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redis: ack %s: %w", d.ID, err)
	}
	return nil
}

// Retry returns the job to the tail of the queue, or buries it.
func (r *Redis) Retry(ctx context.Context, d *Delivery, cause error) (bool, error) {
	if d.Attempt >= r.o.MaxAttempts {
		return true, r.bury(ctx, d, cause)
	}
	pipe := r.c.TxPipeline()
	pipe.LRem(ctx, r.processing(), 1, d.Payload)
	pipe.RPush(ctx, r.o.Key, d.Payload)
	if _, err := pipe.Exec(ctx); err != nil {
		return false, fmt.Errorf("redis: requeue %s: %w", d.ID, err)
	}
	return false, nil
}

// Release returns an interrupted job to the head of the queue.
func (r *Redis) Release(ctx context.Context, d *Delivery) error {
	pipe := r.c.TxPipeline()
	pipe.LRem(ctx, r.processing(), 1, d.Payload)
	pipe.LPush(ctx, r.o.Key, d.Payload)
	pipe.HIncrBy(ctx, r.key("attempts"), d.ID, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redis: release %s: %w", d.ID, err)
	}
	return nil
}

// DeadLetter is an entry of the dead-letter list.
type DeadLetter struct {
	ID       string          `json:"id"`
	Payload  json.RawMessage `json:"payload"`
	Attempts int             `json:"attempts"`
	Error    string          `json:"error"`
	At       time.Time       `json:"at"`
}

func (r *Redis) bury(ctx context.Context, d *Delivery, cause error) error {
	msg := "unknown error"
	if cause != nil {
		msg = cause.Error()
	}
	payload := json.RawMessage(d.Payload)
	if !json.Valid(d.Payload) {
		payload, _ = json.Marshal(string(d.Payload))
	}
	entry, err := json.Marshal(DeadLetter{ID: d.ID, Payload: payload, Attempts: d.Attempt, Error: msg, At: r.o.Now().UTC()})
	if err != nil {
		return err
	}
	pipe := r.c.TxPipeline()
	pipe.LRem(ctx, r.processing(), 1, d.Payload)
	pipe.RPush(ctx, r.key("dead"), entry)
	pipe.HDel(ctx, r.key("attempts"), d.ID)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redis: dead-letter %s: %w", d.ID, err)
	}
	return nil
}

// Reap returns the jobs of consumers whose heartbeat expired to the head of
// the queue (they were taken first, they run next) and forgets those
// consumers. Each job is moved by one atomic LMOVE, so concurrent reapers
// never duplicate a job.
func (r *Redis) Reap(ctx context.Context) (int, error) {
	consumers, err := r.c.SMembers(ctx, r.key("consumers")).Result()
	if err != nil {
		return 0, fmt.Errorf("redis: list consumers: %w", err)
	}
	moved := 0
	for _, c := range consumers {
		if c == r.o.Consumer {
			continue
		}
		alive, err := r.c.Exists(ctx, r.key("alive", c)).Result()
		if err != nil {
			return moved, fmt.Errorf("redis: heartbeat of %s: %w", c, err)
		}
		if alive == 1 {
			continue
		}
		proc := r.key("processing", c)
		for {
			_, err := r.c.LMove(ctx, proc, r.o.Key, "RIGHT", "LEFT").Result()
			if errors.Is(err, redis.Nil) {
				break
			}
			if err != nil {
				return moved, fmt.Errorf("redis: return jobs of %s: %w", c, err)
			}
			moved++
		}
		r.c.SRem(ctx, r.key("consumers"), c)
	}
	return moved, nil
}

// DeadLetters lists the dead-letter list.
func (r *Redis) DeadLetters(ctx context.Context) ([]DeadLetter, error) {
	raw, err := r.c.LRange(ctx, r.key("dead"), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: read dead letters: %w", err)
	}
	out := make([]DeadLetter, 0, len(raw))
	for _, s := range raw {
		var dl DeadLetter
		if err := json.Unmarshal([]byte(s), &dl); err != nil {
			return nil, fmt.Errorf("redis: dead letter %q: %w", s, err)
		}
		out = append(out, dl)
	}
	return out, nil
}

// Lengths reports the queue, this consumer's processing list and the
// dead-letter list lengths.
func (r *Redis) Lengths(ctx context.Context) (queued, processing, dead int64, err error) {
	pipe := r.c.Pipeline()
	q := pipe.LLen(ctx, r.o.Key)
	p := pipe.LLen(ctx, r.processing())
	d := pipe.LLen(ctx, r.key("dead"))
	if _, err = pipe.Exec(ctx); err != nil {
		return 0, 0, 0, fmt.Errorf("redis: lengths: %w", err)
	}
	return q.Val(), p.Val(), d.Val(), nil
}

// Lock takes a named lock for ttl (SET NX PX); the returned refresh extends
// it and release drops it if still ours. It keeps a redelivered job from
// running twice in parallel.
func (r *Redis) Lock(ctx context.Context, name string, ttl time.Duration) (ok bool, refresh func(context.Context) error, release func(context.Context), err error) {
	k := r.key("lock", name)
	ok, err = r.c.SetNX(ctx, k, r.o.Consumer, ttl).Result()
	if err != nil || !ok {
		return ok, nil, nil, err
	}
	refresh = func(ctx context.Context) error {
		return r.c.Expire(ctx, k, ttl).Err()
	}
	release = func(ctx context.Context) {
		releaseScript.Run(ctx, r.c, []string{k}, r.o.Consumer)
	}
	return true, refresh, release, nil
}

// releaseScript deletes a lock only if it still holds our value.
var releaseScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// Close stops the heartbeat and drops this consumer's liveness so that its
// unfinished jobs (if any) are reaped at once.
func (r *Redis) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.stop:
		return nil
	default:
	}
	close(r.stop)
	<-r.done
	if r.o.Consumer != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r.c.Del(ctx, r.key("alive", r.o.Consumer))
		cancel()
	}
	return r.c.Close()
}
