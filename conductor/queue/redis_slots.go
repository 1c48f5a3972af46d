package queue

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conductor-dev/conductor/conductor/bus"
)

// SlotsPrefix is the Redis key prefix of the model semaphores: one sorted
// set per alias (member: holder, score: lease expiry in Redis server
// milliseconds) and one hash of the aliases' bounds. It is the same for
// every queue key: the inference host is shared, whatever queue its
// workers consume.
const SlotsPrefix = "conductor:model-slots"

// RedisSlots is the model semaphore in Redis (SlotStore). Lease times are
// the Redis server's clock, so the hosts' clocks need not agree.
type RedisSlots struct {
	c *redis.Client
	// waitLease is how long a waiter keeps its place without asking again
	// (bus.SlotWaitLease; tests shorten it).
	waitLease time.Duration
}

var _ SlotStore = (*RedisSlots)(nil)

// DialRedisSlots connects to the Redis at url for the model semaphore.
func DialRedisSlots(ctx context.Context, url string) (*RedisSlots, error) {
	c, err := dialRedis(ctx, url)
	if err != nil {
		return nil, err
	}
	return &RedisSlots{c: c, waitLease: bus.SlotWaitLease}, nil
}

// dialRedis connects to the Redis at url (REDIS_URL) and checks it
// answers: the queue and the model slots connect the same way.
func dialRedis(ctx context.Context, url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis: REDIS_URL %s: %w", bus.RedactURL(url), err)
	}
	opt.DialTimeout = 3 * time.Second
	// The client never sends a command again by itself: a take (BLMOVE)
	// whose answer was lost has moved a job into this consumer's
	// processing list, and sending it again delivered the next job and
	// left that one there for good (TestRedisTakeWhoseReplyIsLost). The
	// callers retry with what they know: a failed take marks the list for
	// its orphans, a settle checks the lease, a slot take is idempotent.
	opt.MaxRetries = -1
	c := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis: cannot reach %s: %w (%w)", bus.RedactURL(url), err, ErrUnreachable)
	}
	return c, nil
}

// Close closes the connection.
func (s *RedisSlots) Close() error { return s.c.Close() }

func slotKey(name string) string { return SlotsPrefix + ":" + name }

// waitKeys are an alias's queue of waiters: their order, when each place
// lapses, and the arrival counter (a prefix of their own: no alias's
// slotKey is one of them).
func waitKeys(name string) []string {
	k := SlotsPrefix + "-wait:" + name
	return []string{k, k + ":seen", k + ":seq"}
}

// KEYS[1] the alias's set, KEYS[2] the bounds hash, KEYS[3] the alias's
// queue (member: waiter, score: arrival number), KEYS[4] when each waiter's
// place lapses, KEYS[5] the arrival counter; ARGV: holder, max, alias, ttl
// ms, wait lease ms. Expired leases and lapsed places are dropped first; a
// free slot is the holder's when fewer waiters than free slots stand
// before it (the SQL store's rule, conductor/bus/slots.go).
var acquireSlotScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[4])
local wl = tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('HSET', KEYS[2], ARGV[3], ARGV[2])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl * 2)
  return 1
end
for _, w in ipairs(redis.call('ZRANGE', KEYS[4], '-inf', '(' .. now, 'BYSCORE')) do
  redis.call('ZREM', KEYS[3], w)
  redis.call('ZREM', KEYS[4], w)
end
local free = tonumber(ARGV[2]) - redis.call('ZCARD', KEYS[1])
local place = redis.call('ZRANK', KEYS[3], ARGV[1])
local ahead = place or redis.call('ZCARD', KEYS[3])
if ahead < free then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl * 2)
  if place then
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.call('ZREM', KEYS[4], ARGV[1])
  end
  return 1
end
if not place then
  redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[5]), ARGV[1])
end
redis.call('ZADD', KEYS[4], now + wl, ARGV[1])
for i = 3, 5 do redis.call('PEXPIRE', KEYS[i], wl * 2) end
return 0`)

var renewSlotScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp or tonumber(exp) < now then return 0 end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl * 2 then redis.call('PEXPIRE', KEYS[1], ttl * 2) end
return 1`)

// KEYS[1] the alias's set (or its waiters' lapse times): the members whose
// score is still ahead of the server's clock.
var liveSlotsScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGE', KEYS[1], '(' .. now, '+inf', 'BYSCORE')`)

// TryAcquireSlot implements SlotStore.
func (s *RedisSlots) TryAcquireSlot(ctx context.Context, name, holder string, max int, ttl time.Duration) (bool, error) {
	keys := append([]string{slotKey(name), SlotsPrefix}, waitKeys(name)...)
	n, err := acquireSlotScript.Run(ctx, s.c, keys, holder, max, name, ttl.Milliseconds(), s.waitLease.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("redis: model slot %s: %w", name, err)
	}
	return n == 1, nil
}

// RenewSlot implements SlotStore.
func (s *RedisSlots) RenewSlot(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	n, err := renewSlotScript.Run(ctx, s.c, []string{slotKey(name)}, holder, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("redis: renew model slot %s: %w", name, err)
	}
	return n == 1, nil
}

// ReleaseSlot implements SlotStore: the slot, or the place in the queue.
func (s *RedisSlots) ReleaseSlot(ctx context.Context, name, holder string) error {
	w := waitKeys(name)
	_, err := s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, slotKey(name), holder)
		p.ZRem(ctx, w[0], holder)
		p.ZRem(ctx, w[1], holder)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis: release model slot %s: %w", name, err)
	}
	return nil
}

// SlotsInUse implements SlotStore: every alias ever bounded here, with its
// live holders.
func (s *RedisSlots) SlotsInUse(ctx context.Context) ([]SlotUse, error) {
	bounds, err := s.c.HGetAll(ctx, SlotsPrefix).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: model slots: %w", err)
	}
	var out []SlotUse
	for name, max := range bounds {
		holders, err := liveSlotsScript.Run(ctx, s.c, []string{slotKey(name)}).StringSlice()
		if err != nil {
			return nil, fmt.Errorf("redis: model slots of %s: %w", name, err)
		}
		waiting, err := liveSlotsScript.Run(ctx, s.c, []string{waitKeys(name)[1]}).StringSlice()
		if err != nil {
			return nil, fmt.Errorf("redis: model slot waiters of %s: %w", name, err)
		}
		m, _ := strconv.Atoi(max)
		sort.Strings(holders)
		out = append(out, SlotUse{Name: name, Max: m, InUse: len(holders), Holders: holders, Waiting: len(waiting)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
