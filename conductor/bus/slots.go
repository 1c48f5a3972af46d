package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// SlotUse is one model semaphore's state: its live (unexpired) holders.
type SlotUse struct {
	Name    string   `json:"name"`
	Max     int      `json:"max"`   // the bound the latest acquirer asked for
	InUse   int      `json:"inUse"` // live leases
	Holders []string `json:"holders"`
	// Waiting counts the requests queued for a slot (their places not
	// lapsed).
	Waiting int `json:"waiting"`
}

// The model semaphore (queue.SlotStore): slot rows (name, 0..max-1), each
// held by one holder until its lease expires. Taking a slot is one upsert
// that succeeds only on a free or expired row, so on both backends at most
// max holders ever hold a lease at once, whatever the races.
//
// Waiters are served in the order they came, across processes and hosts:
// a holder that finds no slot it may take keeps a place in
// model_slot_waiters while it asks again within SlotWaitLease, and a free
// slot goes to the first places. A waiter that stopped asking (it died,
// or gave up without ReleaseSlot) loses its place after SlotWaitLease; one
// that asks again after that joins at the back.

// SlotWaitLease is how long a waiter keeps its place in the queue for a
// model slot without asking again. Waiters ask every quarter of it at
// most, jittered up to 1.5 times that (queue.ModelSlots); a dead waiter
// holds the head of the queue at most this long.
const SlotWaitLease = 3 * time.Second

func checkSlotArgs(name, holder string) error {
	switch {
	case name == "":
		return errors.New("model slot: empty name")
	case holder == "":
		return fmt.Errorf("model slot %s: empty holder", name)
	}
	return nil
}

// TryAcquireSlot takes one of max slots of name for holder, leased for ttl.
func (s *sqlStore) TryAcquireSlot(ctx context.Context, name, holder string, max int, ttl time.Duration) (bool, error) {
	if err := checkSlotArgs(name, holder); err != nil {
		return false, err
	}
	if max < 1 || ttl <= 0 {
		return false, fmt.Errorf("model slot %s: max %d and lease %s must be positive", name, max, ttl)
	}
	var got bool
	err := s.write(ctx, func(q querier) error {
		got = false
		now := s.timeNow()
		exp := ts(now.Add(ttl))
		n, err := q.exec(ctx, `UPDATE model_slots SET expires_at = ?, max_slots = ? WHERE name = ? AND holder = ?`,
			exp, int64(max), name, holder)
		if err != nil || n > 0 {
			got = n > 0
			return err
		}
		live, err := all(ctx, q, func(r scanner) (int64, error) {
			var v int64
			return v, r.Scan(&v)
		}, `SELECT slot FROM model_slots WHERE name = ? AND expires_at >= ? ORDER BY slot`, name, ts(now))
		if err != nil {
			return err
		}
		slot := int64(-1)
		for i := int64(0); i < int64(max); i++ {
			if !slices.Contains(live, i) {
				slot = i
				break
			}
		}
		// The queue: lapsed places go; a free slot is this holder's when
		// fewer waiters than free slots stand before it.
		if _, err := q.exec(ctx, `DELETE FROM model_slot_waiters WHERE name = ? AND seen_until < ?`, name, ts(now)); err != nil {
			return err
		}
		queued, err := all(ctx, q, func(r scanner) (string, error) {
			var v string
			return v, r.Scan(&v)
		}, `SELECT holder FROM model_slot_waiters WHERE name = ? ORDER BY seq, holder`, name)
		if err != nil {
			return err
		}
		place := slices.Index(queued, holder)
		ahead := place
		if place < 0 {
			ahead = len(queued)
		}
		if free := int64(max) - int64(len(live)); slot < 0 || int64(ahead) >= free {
			seen := ts(now.Add(SlotWaitLease))
			if place >= 0 {
				_, err = q.exec(ctx, `UPDATE model_slot_waiters SET seen_until = ? WHERE name = ? AND holder = ?`, seen, name, holder)
				return err
			}
			_, err = q.exec(ctx, `INSERT INTO model_slot_waiters (name, holder, seq, seen_until)
				SELECT CAST(? AS TEXT), CAST(? AS TEXT), COALESCE(MAX(seq), 0) + 1, CAST(? AS BIGINT)
				FROM model_slot_waiters WHERE name = ?`, name, holder, seen, name)
			return err
		}
		n, err = q.exec(ctx, `INSERT INTO model_slots (name, slot, holder, max_slots, acquired_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (name, slot) DO UPDATE SET holder = excluded.holder, max_slots = excluded.max_slots,
				acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
			WHERE model_slots.expires_at < ?`,
			name, slot, holder, int64(max), ts(now), exp, ts(now))
		if err != nil || n != 1 {
			return err
		}
		got = true
		if place >= 0 {
			_, err = q.exec(ctx, `DELETE FROM model_slot_waiters WHERE name = ? AND holder = ?`, name, holder)
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("model slot %s: %w", name, err)
	}
	return got, nil
}

// RenewSlot extends holder's lease; false when its lease expired meanwhile.
func (s *sqlStore) RenewSlot(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if err := checkSlotArgs(name, holder); err != nil {
		return false, err
	}
	var n int64
	err := s.write(ctx, func(q querier) (err error) {
		now := s.timeNow()
		n, err = q.exec(ctx, `UPDATE model_slots SET expires_at = ? WHERE name = ? AND holder = ? AND expires_at >= ?`,
			ts(now.Add(ttl)), name, holder, ts(now))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("renew model slot %s: %w", name, err)
	}
	return n > 0, nil
}

// ReleaseSlot frees holder's slot, or its place in the queue.
func (s *sqlStore) ReleaseSlot(ctx context.Context, name, holder string) error {
	if err := checkSlotArgs(name, holder); err != nil {
		return err
	}
	err := s.write(ctx, func(q querier) error {
		if _, err := q.exec(ctx, `DELETE FROM model_slots WHERE name = ? AND holder = ?`, name, holder); err != nil {
			return err
		}
		_, err := q.exec(ctx, `DELETE FROM model_slot_waiters WHERE name = ? AND holder = ?`, name, holder)
		return err
	})
	if err != nil {
		return fmt.Errorf("release model slot %s: %w", name, err)
	}
	return nil
}

// SlotsInUse lists every alias with a slot row, with its live holders.
func (s *sqlStore) SlotsInUse(ctx context.Context) ([]SlotUse, error) {
	type row struct {
		name, holder string
		max, exp     int64
	}
	var rs []row
	err := s.read(ctx, func(q querier) (err error) {
		rs, err = all(ctx, q, func(r scanner) (row, error) {
			var v row
			return v, r.Scan(&v.name, &v.holder, &v.max, &v.exp)
		}, `SELECT name, holder, max_slots, expires_at FROM model_slots ORDER BY name, acquired_at DESC, slot`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("model slots: %w", err)
	}
	type wait struct {
		name string
		n    int
	}
	var ws []wait
	err = s.read(ctx, func(q querier) (err error) {
		ws, err = all(ctx, q, func(r scanner) (wait, error) {
			var v wait
			return v, r.Scan(&v.name, &v.n)
		}, `SELECT name, COUNT(*) FROM model_slot_waiters WHERE seen_until >= ? GROUP BY name`, ts(s.timeNow()))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("model slots: %w", err)
	}
	now := ts(s.timeNow())
	by := map[string]*SlotUse{}
	var out []SlotUse
	for _, r := range rs {
		u := by[r.name]
		if u == nil {
			// Rows are newest first: the first gives the latest bound.
			u = &SlotUse{Name: r.name, Max: int(r.max), Holders: []string{}}
			by[r.name] = u
		}
		if r.exp >= now {
			u.InUse++
			u.Holders = append(u.Holders, r.holder)
		}
	}
	for _, w := range ws {
		if u := by[w.name]; u != nil {
			u.Waiting = w.n
		}
	}
	for _, u := range by {
		sort.Strings(u.Holders)
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
