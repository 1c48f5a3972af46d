package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// groupFixture opens an embedded store with a scratch table.
func groupFixture(t *testing.T) (*sqlStore, *sqliteBackend) {
	t.Helper()
	st, err := Open(context.Background(), Options{DataRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s := st.(*sqlStore)
	b := s.b.(*sqliteBackend)
	if _, err := b.db().exec(context.Background(), "CREATE TABLE scratch (k TEXT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	return s, b
}

// queued starts n writers while the write lock is held, so that they form
// one group, and returns their outcomes once the lock is let go.
func queued(t *testing.T, b *sqliteBackend, n int, write func(i int) func(q querier) error) []error {
	t.Helper()
	b.mu.Lock()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.tx(context.Background(), write(i))
		}()
	}
	for ; ; time.Sleep(time.Millisecond) { // every writer waits in the queue
		b.qmu.Lock()
		k := len(b.queue)
		b.qmu.Unlock()
		if k == n {
			break
		}
	}
	b.mu.Unlock()
	wg.Wait()
	return errs
}

func keys(t *testing.T, b *sqliteBackend) map[string]bool {
	t.Helper()
	r, err := b.db().query(context.Background(), "SELECT k FROM scratch")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out := map[string]bool{}
	for r.Next() {
		var k string
		r.Scan(&k)
		out[k] = true
	}
	return out
}

// TestGroupCommitKeepsWritesApart: writers that wait for the lock are
// committed together, each as if alone: one that fails is rolled back
// alone and gets its own error, the others' writes are kept.
func TestGroupCommitKeepsWritesApart(t *testing.T) {
	_, b := groupFixture(t)
	bad := errors.New("the writer's own failure")
	errs := queued(t, b, 12, func(i int) func(q querier) error {
		return func(q querier) error {
			if _, err := q.exec(context.Background(), "INSERT INTO scratch (k) VALUES (?)", fmt.Sprint("k", i)); err != nil {
				return err
			}
			if i == 5 {
				return bad
			}
			return nil
		}
	})
	got := keys(t, b)
	for i, err := range errs {
		switch {
		case i == 5 && !errors.Is(err, bad):
			t.Errorf("writer 5: %v, want its own error", err)
		case i == 5 && got["k5"]:
			t.Error("writer 5's insert was kept")
		case i != 5 && (err != nil || !got[fmt.Sprint("k", i)]):
			t.Errorf("writer %d: %v, kept %v", i, err, got[fmt.Sprint("k", i)])
		}
	}
}

// TestGroupCommitAbortedByOneWrite: a write whose failure makes SQLite end
// the whole transaction (INSERT OR ROLLBACK on a duplicate) leaves nothing
// of its group; the other writers are told to write again, and through the
// store's retry loop they succeed.
func TestGroupCommitAbortedByOneWrite(t *testing.T) {
	s, b := groupFixture(t)
	if _, err := b.db().exec(context.Background(), "INSERT INTO scratch (k) VALUES ('taken')"); err != nil {
		t.Fatal(err)
	}
	errs := queued(t, b, 6, func(i int) func(q querier) error {
		return func(q querier) error {
			k := fmt.Sprint("k", i)
			if i == 2 {
				k = "taken"
			}
			_, err := q.exec(context.Background(), "INSERT OR ROLLBACK INTO scratch (k) VALUES (?)", k)
			return err
		}
	})
	got := keys(t, b)
	for i, err := range errs {
		if i == 2 {
			if err == nil || errors.Is(err, errGroupAborted) {
				t.Errorf("writer 2: %v, want its constraint error", err)
			}
			continue
		}
		if !errors.Is(err, errGroupAborted) || got[fmt.Sprint("k", i)] {
			t.Errorf("writer %d: %v (kept %v), want the abort and nothing kept", i, err, got[fmt.Sprint("k", i)])
		}
	}
	// Through the store's retry loop the innocent writers get through.
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		if i == 2 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.write(context.Background(), func(q querier) error {
				_, err := q.exec(context.Background(), "INSERT INTO scratch (k) VALUES (?)", fmt.Sprint("k", i))
				return err
			})
			if err != nil {
				t.Errorf("writer %d through the store: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if got := keys(t, b); len(got) != 6 {
		t.Fatalf("rows %v", got)
	}
}
