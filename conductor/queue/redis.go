package queue

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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

	// inFlight counts the payloads this process holds; after a failed take
	// (a BLMOVE whose reply was lost may have moved a job nobody runs) the
	// processing list is checked against it and orphans go back.
	inFlight map[string]int
	suspect  bool
}

// ErrUnreachable is matched by the error of dialling a Redis server that
// does not answer: an outage to wait out, not a configuration error.
var ErrUnreachable = errors.New("unreachable")

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
	c, err := dialRedis(ctx, o.URL)
	if err != nil {
		return nil, err
	}
	r := &Redis{c: c, o: o, stop: make(chan struct{}), done: make(chan struct{}), inFlight: map[string]int{}}
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
// A job delivered more than MaxAttempts times is returned as it is: its
// consumers kept dying, and the caller buries it.
func (r *Redis) Take(ctx context.Context, wait time.Duration) (*Delivery, error) {
	if r.o.Consumer == "" {
		return nil, errors.New("redis: Take needs a consumer name")
	}
	if r.o.Now().Sub(r.lastReap) > r.o.HeartbeatTTL/3 {
		if _, err := r.Reap(ctx); err != nil {
			r.afterOutage()
			return nil, err
		}
		r.lastReap = r.o.Now()
	}
	if wait <= 0 {
		wait = 10 * time.Millisecond // BLMOVE 0 would block forever
	}
	r.mu.Lock()
	suspect := r.suspect
	r.mu.Unlock()
	if suspect {
		if err := r.returnOrphans(ctx); err != nil {
			return nil, err
		}
	}
	raw, err := r.c.BLMove(ctx, r.o.Key, r.processing(), "LEFT", "RIGHT", wait).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.mu.Lock()
		r.suspect = true
		r.mu.Unlock()
		r.afterOutage()
		return nil, fmt.Errorf("redis: take from %s: %w", r.o.Key, err)
	}
	d := &Delivery{Payload: []byte(raw), ID: PayloadID([]byte(raw))}
	r.mu.Lock()
	r.inFlight[raw]++
	r.mu.Unlock()
	// The delivery's own mark: a count whose answer was lost is not
	// counted again when it is tried again.
	var nonce [8]byte
	crand.Read(nonce[:])
	mark := r.key("counted", hex.EncodeToString(nonce[:]))
	for {
		// The job is in our processing list: failing to count its attempt
		// must not lose it. Keep trying; the heartbeat keeps the lease.
		n, err := countAttemptScript.Run(ctx, r.c, []string{r.key("attempts"), mark}, d.ID, max(2*r.o.HeartbeatTTL, time.Minute).Milliseconds()).Int()
		if err == nil {
			d.Attempt = int(n)
			return d, nil
		}
		select {
		case <-ctx.Done():
			d.Attempt = 1
			return d, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// MaxAttempts is how many failed attempts bury a job.
func (r *Redis) MaxAttempts() int { return r.o.MaxAttempts }

// afterOutage holds the reaper back for one heartbeat TTL after Redis
// failed us: heartbeats may have expired while Redis was down (or
// restarting), and living consumers need a beat to say so before their jobs
// are taken from them.
func (r *Redis) afterOutage() {
	r.lastReap = r.o.Now().Add(r.o.HeartbeatTTL)
}

// countAttemptScript counts one delivery of a job once, however often it
// is sent. KEYS: attempts, the delivery's mark. ARGV: id, the mark's life
// in ms (it only has to outlive the tries).
var countAttemptScript = redis.NewScript(`if redis.call("SET", KEYS[2], "1", "NX", "PX", ARGV[2]) then
	return redis.call("HINCRBY", KEYS[1], ARGV[1], 1) end
	return tonumber(redis.call("HGET", KEYS[1], ARGV[1]) or "1")`)

// The scripts below act on a job only while it is in this consumer's
// processing list: the lease holder's identity is checked atomically, so a
// consumer whose jobs were reaped (a zombie finishing late) cannot ack,
// requeue or bury them a second time.
var (
	// KEYS: processing, attempts. ARGV: payload, id.
	ackScript = redis.NewScript(`if redis.call("LREM", KEYS[1], 1, ARGV[1]) == 1 then
	redis.call("HDEL", KEYS[2], ARGV[2]) return 1 end return 0`)
	// KEYS: processing, queue. ARGV: payload.
	requeueScript = redis.NewScript(`if redis.call("LREM", KEYS[1], 1, ARGV[1]) == 1 then
	redis.call("RPUSH", KEYS[2], ARGV[1]) return 1 end return 0`)
	// KEYS: processing, queue, attempts. ARGV: payload, id.
	releaseJobScript = redis.NewScript(`if redis.call("LREM", KEYS[1], 1, ARGV[1]) == 1 then
	redis.call("LPUSH", KEYS[2], ARGV[1]) redis.call("HINCRBY", KEYS[3], ARGV[2], -1) return 1 end return 0`)
	// KEYS: processing, dead, attempts. ARGV: payload, entry, id.
	buryScript = redis.NewScript(`if redis.call("LREM", KEYS[1], 1, ARGV[1]) == 1 then
	redis.call("RPUSH", KEYS[2], ARGV[2]) redis.call("HDEL", KEYS[3], ARGV[3]) return 1 end return 0`)
	// KEYS: dead, queue, attempts. ARGV: entry, payload, id.
	retryDeadScript = redis.NewScript(`if redis.call("LREM", KEYS[1], 1, ARGV[1]) == 1 then
	redis.call("RPUSH", KEYS[2], ARGV[2]) redis.call("HDEL", KEYS[3], ARGV[3]) return 1 end return 0`)
	// KEYS: processing, consumers, alive. ARGV: consumer.
	leaveScript = redis.NewScript(`redis.call("DEL", KEYS[3])
	if redis.call("LLEN", KEYS[1]) == 0 then redis.call("SREM", KEYS[2], ARGV[1]) return 1 end return 0`)
)

// returnOrphans returns the jobs of this consumer's processing list that
// no delivery of this process holds to the head of the queue.
func (r *Redis) returnOrphans(ctx context.Context) error {
	items, err := r.c.LRange(ctx, r.processing(), 0, -1).Result()
	if err != nil {
		return fmt.Errorf("redis: check %s: %w", r.processing(), err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]int{}
	for _, it := range items {
		seen[it]++
		if seen[it] <= r.inFlight[it] {
			continue
		}
		if err := orphanScript.Run(ctx, r.c, []string{r.processing(), r.o.Key}, it).Err(); err != nil {
			return fmt.Errorf("redis: return an orphaned job: %w", err)
		}
	}
	r.suspect = false
	return nil
}

// orphanScript moves one job from the tail end of processing back to the
// head of the queue. KEYS: processing, queue. ARGV: payload.
var orphanScript = redis.NewScript(`if redis.call("LREM", KEYS[1], -1, ARGV[1]) == 1 then
	redis.call("LPUSH", KEYS[2], ARGV[1]) return 1 end return 0`)

func (r *Redis) held(ctx context.Context, what string, d *Delivery, s *redis.Script, keys []string, args ...any) error {
	n, err := s.Run(ctx, r.c, keys, args...).Int()
	if err != nil {
		return fmt.Errorf("redis: %s %s: %w", what, d.ID, err)
	}
	r.mu.Lock()
	if r.inFlight[string(d.Payload)] > 1 {
		r.inFlight[string(d.Payload)]--
	} else {
		delete(r.inFlight, string(d.Payload))
	}
	r.mu.Unlock()
	if n != 1 {
		return fmt.Errorf("redis: %s %s: %w", what, d.ID, ErrLeaseLost)
	}
	return nil
}

// Ack removes a finished job.
func (r *Redis) Ack(ctx context.Context, d *Delivery) error {
	return r.held(ctx, "ack", d, ackScript, []string{r.processing(), r.key("attempts")}, d.Payload, d.ID)
}

// Requeue returns the job to the tail of the queue.
func (r *Redis) Requeue(ctx context.Context, d *Delivery, cause error) error {
	return r.held(ctx, "requeue", d, requeueScript, []string{r.processing(), r.o.Key}, d.Payload)
}

// Release returns an interrupted job to the head of the queue.
func (r *Redis) Release(ctx context.Context, d *Delivery) error {
	return r.held(ctx, "release", d, releaseJobScript, []string{r.processing(), r.o.Key, r.key("attempts")}, d.Payload, d.ID)
}

// Bury moves the job to the dead-letter list.
func (r *Redis) Bury(ctx context.Context, d *Delivery, cause error) error {
	entry, err := json.Marshal(newDeadLetter(d, cause, r.o.Now()))
	if err != nil {
		return err
	}
	return r.held(ctx, "dead-letter", d, buryScript, []string{r.processing(), r.key("dead"), r.key("attempts")}, d.Payload, entry, d.ID)
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

// DeadLetters lists the dead-letter list, oldest first.
func (r *Redis) DeadLetters(ctx context.Context) ([]DeadLetter, error) {
	_, out, err := r.deadLetters(ctx)
	return out, err
}

func (r *Redis) deadLetters(ctx context.Context) ([]string, []DeadLetter, error) {
	raw, err := r.c.LRange(ctx, r.key("dead"), 0, -1).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("redis: read dead letters: %w", err)
	}
	out := make([]DeadLetter, 0, len(raw))
	for _, s := range raw {
		var dl DeadLetter
		if err := json.Unmarshal([]byte(s), &dl); err != nil {
			return nil, nil, fmt.Errorf("redis: dead letter %q: %w", s, err)
		}
		out = append(out, dl)
	}
	return raw, out, nil
}

// RetryDead returns every dead letter with the id (payload id or run id)
// to the tail of the queue, its attempts reset.
func (r *Redis) RetryDead(ctx context.Context, id string) error {
	return r.eachDead(ctx, id, func(entry string, dl DeadLetter) error {
		return retryDeadScript.Run(ctx, r.c, []string{r.key("dead"), r.o.Key, r.key("attempts")}, entry, dl.Raw(), dl.ID).Err()
	})
}

// DropDead deletes every dead letter with the id (payload id or run id).
func (r *Redis) DropDead(ctx context.Context, id string) error {
	return r.eachDead(ctx, id, func(entry string, _ DeadLetter) error {
		return r.c.LRem(ctx, r.key("dead"), 1, entry).Err()
	})
}

func (r *Redis) eachDead(ctx context.Context, id string, fn func(entry string, dl DeadLetter) error) error {
	raw, dls, err := r.deadLetters(ctx)
	if err != nil {
		return err
	}
	found := false
	for i, dl := range dls {
		if !dl.Matches(id) {
			continue
		}
		found = true
		if err := fn(raw[i], dl); err != nil {
			return fmt.Errorf("redis: dead letter %s: %w", id, err)
		}
	}
	if !found {
		return fmt.Errorf("dead letter %s on %s: %w", id, r.o.Key, ErrNoDeadLetter)
	}
	return nil
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
// unfinished jobs (if any) are reaped at once; a consumer that holds no job
// leaves the consumer set.
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
		leaveScript.Run(ctx, r.c, []string{r.processing(), r.key("consumers"), r.key("alive", r.o.Consumer)}, r.o.Consumer)
		cancel()
	}
	return r.c.Close()
}
