package main

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/queue"
)

// modelSlots is the semaphore that makes an alias's maxConcurrent hold
// across processes and hosts: in Redis when a Redis URL is set (--redis-url
// or REDIS_URL), else in the bus store. It is reached on the first request
// to a bounded alias; an unreachable one is waited out by queue.ModelSlots.
func (d *deps) modelSlots(c *cli.Context) *queue.ModelSlots {
	cfg := d.config(c)
	ttl := cmp.Or(cfg.ModelSlotTTL, queue.DefaultSlotTTL) // CONDUCTOR_MODEL_SLOT_TTL or models.slotTTL
	url := cfg.RedisURL                                   // flag > REDIS_URL > file, resolved once
	ls := &lazySlots{open: func(ctx context.Context) (queue.SlotStore, func() error, error) {
		if url != "" {
			s, err := queue.DialRedisSlots(ctx, url)
			if err != nil {
				return nil, nil, err
			}
			return s, s.Close, nil
		}
		st, err := bus.Open(ctx, bus.Options{DataRoot: cfg.DataRoot, DatabaseURL: cfg.DatabaseURL, Now: d.Now})
		if err != nil {
			return nil, nil, err
		}
		ss, ok := st.(queue.SlotStore)
		if !ok {
			st.Close()
			return nil, nil, fmt.Errorf("the bus store %T keeps no model slots", st)
		}
		return ss, st.Close, nil
	}}
	return &queue.ModelSlots{Store: ls, TTL: ttl, Log: d.Log}
}

// lazySlots opens its store on first use, and again after a failed open.
type lazySlots struct {
	open func(ctx context.Context) (queue.SlotStore, func() error, error)

	mu    sync.Mutex
	s     queue.SlotStore
	close func() error
}

func (l *lazySlots) get(ctx context.Context) (queue.SlotStore, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.s == nil {
		s, closer, err := l.open(ctx)
		if err != nil {
			return nil, fmt.Errorf("model slots: %w", err)
		}
		l.s, l.close = s, closer
	}
	return l.s, nil
}

func (l *lazySlots) TryAcquireSlot(ctx context.Context, name, holder string, max int, ttl time.Duration) (bool, error) {
	s, err := l.get(ctx)
	if err != nil {
		return false, err
	}
	return s.TryAcquireSlot(ctx, name, holder, max, ttl)
}

func (l *lazySlots) RenewSlot(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	s, err := l.get(ctx)
	if err != nil {
		return false, err
	}
	return s.RenewSlot(ctx, name, holder, ttl)
}

func (l *lazySlots) ReleaseSlot(ctx context.Context, name, holder string) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.ReleaseSlot(ctx, name, holder)
}

func (l *lazySlots) SlotsInUse(ctx context.Context) ([]queue.SlotUse, error) {
	s, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.SlotsInUse(ctx)
}
