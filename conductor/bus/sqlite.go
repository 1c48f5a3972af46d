package bus

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sqlite "modernc.org/sqlite"
)

// FileName is the embedded store's file under the data root.
const FileName = "bus.db"

// busyTimeout is how long one SQLite statement waits for another
// connection's lock before the store's own retry loop takes over.
const busyTimeout = 5 * time.Second

// sqliteBackend is the embedded store: one SQLite file in WAL mode. Writers
// take the write lock up front (BEGIN IMMEDIATE), so a transaction never
// fails half-way on a lock upgrade; writers of this process queue on a mutex
// first, writers of other processes wait in SQLite's busy handler and the
// store's retry loop.
type sqliteBackend struct {
	path  string
	sdb   *sql.DB
	mu    sync.Mutex // held by the writer committing a group
	stmts *stmtCache

	qmu   sync.Mutex // guards queue
	queue []*pendingWrite
}

func openSQLite(dataRoot string) (*sqliteBackend, error) {
	if dataRoot == "" {
		return nil, errors.New("bus store: no data root for the embedded store (set --data-root or CONDUCTOR_HOME)")
	}
	root, err := filepath.Abs(dataRoot)
	if err != nil {
		return nil, fmt.Errorf("bus store: data root %s: %w", dataRoot, err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("bus store: create data root: %w", err)
	}
	path := filepath.Join(root, FileName)
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("bus store %s: not a regular file", path)
	}
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(busyTimeout.Milliseconds()))
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_txlock", "immediate")
	q.Set("_foreign_keys", "1")
	dsn := (&url.URL{Scheme: "file", Path: path, RawQuery: q.Encode()}).String()
	sdb, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("bus store %s: %w", path, err)
	}
	sdb.SetMaxOpenConns(8)
	sdb.SetMaxIdleConns(4)
	sdb.SetConnMaxIdleTime(time.Minute)
	return &sqliteBackend{path: path, sdb: sdb, stmts: &stmtCache{db: sdb}}, nil
}

func (b *sqliteBackend) name() string  { return "embedded" }
func (b *sqliteBackend) where() string { return b.path }
func (b *sqliteBackend) close() error  { b.stmts.close(); return b.sdb.Close() }
func (b *sqliteBackend) db() querier   { return sqlQuerier{q: b.sdb, stmts: b.stmts} }

// tx runs fn in a write transaction. Writers of this process that arrive
// while another holds the write lock are committed together: the next
// holder runs every waiting fn in one transaction, each inside a savepoint
// of its own (a failing fn is rolled back alone and gets its error), so the
// WAL is fsynced once per group instead of once per write. Every fn
// returns only after the commit that holds its writes.
func (b *sqliteBackend) tx(ctx context.Context, fn func(q querier) error) error {
	w := &pendingWrite{ctx: ctx, fn: fn, done: make(chan error, 1)}
	b.qmu.Lock()
	b.queue = append(b.queue, w)
	b.qmu.Unlock()
	b.mu.Lock()
	b.qmu.Lock()
	group := b.queue
	b.queue = nil
	b.qmu.Unlock()
	if len(group) > 0 { // else an earlier holder committed ours
		b.commitGroup(group)
	}
	b.mu.Unlock()
	return <-w.done
}

// errGroupAborted is the outcome of a writer whose group's transaction
// ended under another writer's failure: retryable, its writes are not kept.
var errGroupAborted = errors.New("the write's group commit was aborted by another write; retrying")

// pendingWrite is one writer waiting for its group's commit.
type pendingWrite struct {
	ctx  context.Context
	fn   func(q querier) error
	done chan error
}

// commitGroup runs the group's writes in one transaction and tells each
// writer its outcome. A lone writer runs as a plain transaction.
func (b *sqliteBackend) commitGroup(group []*pendingWrite) {
	if len(group) == 1 {
		group[0].done <- b.oneTx(group[0].ctx, group[0].fn)
		return
	}
	tx, err := b.sdb.BeginTx(context.WithoutCancel(group[0].ctx), nil) // BEGIN IMMEDIATE (_txlock)
	if err != nil {
		for _, w := range group {
			w.done <- err
		}
		return
	}
	q := sqlQuerier{q: tx, tx: tx, stmts: b.stmts}
	errs := make([]error, len(group))
	for i, w := range group {
		if err := w.ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		if _, err := q.exec(w.ctx, "SAVEPOINT w"); err != nil {
			errs[i] = err
			continue
		}
		errs[i] = w.fn(q)
		var serr error // of the savepoint's own statements
		if errs[i] != nil {
			_, serr = q.exec(context.Background(), "ROLLBACK TO w")
		}
		if serr == nil {
			_, serr = q.exec(context.Background(), "RELEASE w")
		}
		if serr != nil {
			// SQLite ended the transaction itself (some errors roll back
			// all of it): nothing of the group is kept, and the writers
			// whose own writes were fine write again.
			tx.Rollback()
			for j, w := range group {
				w.done <- cmp.Or(errs[j], error(errGroupAborted))
			}
			return
		}
	}
	cerr := tx.Commit()
	for i, w := range group {
		w.done <- cmp.Or(errs[i], cerr)
	}
}

func (b *sqliteBackend) oneTx(ctx context.Context, fn func(q querier) error) (err error) {
	tx, err := b.sdb.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	if err := fn(sqlQuerier{q: tx, tx: tx, stmts: b.stmts}); err != nil {
		return err
	}
	return tx.Commit()
}

// sqliteCode returns the primary result code of a SQLite error, or 0.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() & 0xff
	}
	return 0
}

const (
	sqliteBusy      = 5
	sqliteLocked    = 6
	sqliteCorrupt   = 11
	sqliteCantOpen  = 14
	sqliteNotADB    = 26
	sqliteReadOnly  = 8
	sqliteFull      = 13
	sqliteIOErr     = 10
	sqliteProtocol  = 15
	sqliteBusyMatch = "database is locked"
)

func (b *sqliteBackend) retryable(err error) bool {
	if errors.Is(err, errGroupAborted) {
		return true
	}
	switch sqliteCode(err) {
	case sqliteBusy, sqliteLocked, sqliteProtocol:
		return true
	}
	return err != nil && strings.Contains(err.Error(), sqliteBusyMatch)
}

func (b *sqliteBackend) describe(err error) error {
	switch sqliteCode(err) {
	case sqliteCorrupt, sqliteNotADB:
		return describedf("bus store %s is not a SQLite database or is corrupt (%w); move it aside to start an empty store, or restore it from a backup", b.path, err)
	case sqliteCantOpen:
		return describedf("bus store %s cannot be opened (%w); check the folder exists and is writable", b.path, err)
	case sqliteReadOnly:
		return describedf("bus store %s is read-only (%w)", b.path, err)
	case sqliteFull:
		return describedf("bus store %s: disk full (%w)", b.path, err)
	case sqliteIOErr:
		return describedf("bus store %s: I/O error (%w)", b.path, err)
	case sqliteBusy, sqliteLocked:
		return describedf("bus store %s stayed locked by another writer for over %s (%w)", b.path, retryBudget, err)
	}
	return err
}

// sqlQuerier runs statements on a *sql.DB or *sql.Tx, through the
// backend's prepared statements: SQLite parses a statement each time it
// is prepared, which was a tenth of a queue job's store time.
type sqlQuerier struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	}
	tx    *sql.Tx // set when q is a transaction
	stmts *stmtCache
}

// prepared returns the statement for query on this querier, or nil when
// it is not cached (then the query is prepared once, as database/sql
// does without a cache).
func (s sqlQuerier) prepared(ctx context.Context, query string) *sql.Stmt {
	st := s.stmts.get(ctx, query)
	if st == nil || s.tx == nil {
		return st
	}
	return s.tx.StmtContext(ctx, st) // reuses the tx connection's copy when it has one
}

func (s sqlQuerier) exec(ctx context.Context, query string, args ...any) (int64, error) {
	var res sql.Result
	var err error
	if st := s.prepared(ctx, query); st != nil {
		res, err = st.ExecContext(ctx, args...)
	} else {
		res, err = s.q.ExecContext(ctx, query, args...)
	}
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s sqlQuerier) query(ctx context.Context, query string, args ...any) (rows, error) {
	var r *sql.Rows
	var err error
	if st := s.prepared(ctx, query); st != nil {
		r, err = st.QueryContext(ctx, args...)
	} else {
		r, err = s.q.QueryContext(ctx, query, args...)
	}
	if err != nil {
		return nil, err
	}
	return sqlRows{r}, nil
}

// stmtCache keeps one prepared statement per query text (database/sql
// prepares it again on each connection that runs it). The store's
// queries are constants, so the cache stays small; it is bounded all
// the same, and a query beyond the bound is run unprepared.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

const maxCachedStmts = 256

func (c *stmtCache) get(ctx context.Context, query string) *sql.Stmt {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[query]; ok {
		return st
	}
	if len(c.m) >= maxCachedStmts {
		return nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil // run unprepared: the query reports the error itself
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[query] = st
	return st
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		st.Close()
	}
	c.m = nil
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }
