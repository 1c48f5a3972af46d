package bus

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Locker is implemented by the store: named leases that serialize one act
// across processes and hosts sharing the store (e.g. `pr open` of one
// repository and branch). A lease expires after its ttl, so a holder that
// died never blocks the others for longer than that.
type Locker interface {
	// Lock waits until it holds the lease called name (or ctx ends) and
	// returns the function that releases it.
	Lock(ctx context.Context, name string, ttl time.Duration) (unlock func(), err error)
}

var _ Locker = (*sqlStore)(nil)

// The lease table is created on first use, outside the numbered schema
// migrations: it holds only short-lived rows and nothing reads it but Lock.
const leaseTable = `CREATE TABLE IF NOT EXISTS conductor_leases (
	name       TEXT PRIMARY KEY,
	holder     TEXT NOT NULL,
	expires_at BIGINT NOT NULL
)`

// Lock implements Locker.
func (s *sqlStore) Lock(ctx context.Context, name string, ttl time.Duration) (func(), error) {
	if name == "" {
		return nil, errors.New("lock: empty name")
	}
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	// The table is made on every call (Lock is rare; IF NOT EXISTS is
	// cheap). Concurrent creates can collide in PostgreSQL's catalogue
	// (a unique violation): the loser tries again and finds the table.
	var cerr error
	for i := 0; i < 3; i++ {
		if cerr = s.write(ctx, func(q querier) error {
			_, err := q.exec(ctx, leaseTable)
			return err
		}); cerr == nil {
			break
		}
		time.Sleep(time.Duration(rand.Int64N(int64(20*time.Millisecond))) + time.Millisecond)
	}
	if cerr != nil {
		return nil, fmt.Errorf("lock %s: %w", name, cerr)
	}
	var b [12]byte
	crand.Read(b[:])
	holder := hex.EncodeToString(b[:])
	delay := 5 * time.Millisecond
	for {
		var got bool
		err := s.write(ctx, func(q querier) error {
			now := s.timeNow()
			if _, err := q.exec(ctx, `DELETE FROM conductor_leases WHERE name = ? AND expires_at < ?`, name, ts(now)); err != nil {
				return err
			}
			n, err := q.exec(ctx, `INSERT INTO conductor_leases (name, holder, expires_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING`,
				name, holder, ts(now.Add(ttl)))
			got = n == 1
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		if got {
			return func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				s.write(ctx, func(q querier) error {
					_, err := q.exec(ctx, `DELETE FROM conductor_leases WHERE name = ? AND holder = ?`, name, holder)
					return err
				})
			}, nil
		}
		sleep := time.Duration(rand.Int64N(int64(delay)) + 1)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lock %s: still held by another process: %w", name, ctx.Err())
		case <-time.After(sleep):
		}
		delay = min(delay*2, 200*time.Millisecond)
	}
}
