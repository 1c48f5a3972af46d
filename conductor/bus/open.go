package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/jackc/pgx/v5/pgconn"
)

// Open opens the store the options select: PostgreSQL when DatabaseURL is
// set, otherwise the embedded file DataRoot/bus.db (created on first use).
// The schema is migrated forward automatically; a database whose schema is
// newer than this binary knows is refused (CodeSchemaTooNew) untouched.
func Open(ctx context.Context, o Options) (Store, error) {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	var (
		s   *sqlStore
		err error
	)
	if o.DatabaseURL != "" {
		var b *postgresBackend
		if b, err = openPostgres(ctx, o.DatabaseURL); err != nil {
			return nil, err
		}
		s = &sqlStore{b: b, d: postgresDialect, now: now}
	} else {
		var b *sqliteBackend
		if b, err = openSQLite(o.DataRoot); err != nil {
			return nil, err
		}
		s = &sqlStore{b: b, d: sqliteDialect, now: now}
	}
	if err := s.migrate(ctx); err != nil {
		// A server that went away between the first ping and the
		// migration is an outage, not a bad store.
		if pb, ok := s.b.(*postgresBackend); ok && ctx.Err() == nil {
			pctx, cancel := context.WithTimeout(ctx, connectTimeout)
			perr := pb.pool.Ping(pctx)
			cancel()
			if perr != nil {
				s.Close()
				return nil, &unreachableError{msg: err.Error()}
			}
		}
		s.Close()
		return nil, err
	}
	return s, nil
}

// missingTable reports the error of querying a table that does not exist
// yet (a new database).
func missingTable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "42P01" // undefined_table
	}
	return sqliteCode(err) == 1 && strings.Contains(err.Error(), "no such table")
}

// schemaVersion reads the applied schema version (0 for a new database).
func schemaVersion(ctx context.Context, q querier) (int, error) {
	var v int64
	if err := one(ctx, q, `SELECT COALESCE(MAX(version), 0) FROM conductor_schema`, nil, &v); err != nil {
		return 0, err
	}
	return int(v), nil
}

func (s *sqlStore) tooNew(v int) error {
	return &refusalError{sentinel: ErrConflict, refusal: refusal.Newf(CodeSchemaTooNew,
		fmt.Sprintf("use a conductor that knows schema version %d, or point --data-root / --database-url at another store", v),
		"the bus store at %s has schema version %d, newer than this conductor knows (%d)", s.b.where(), v, SchemaVersion)}
}

// migrate brings the schema to SchemaVersion. It is idempotent and safe
// when several processes open a new database at once: the migration runs in
// one write transaction holding the write lock (SQLite) or an advisory lock
// (PostgreSQL), and re-reads the version under it.
func (s *sqlStore) migrate(ctx context.Context) error {
	// Fast path: an up-to-date store needs no write lock.
	var v int
	err := s.read(ctx, func(q querier) error {
		var err error
		v, err = schemaVersion(ctx, q)
		return err
	})
	switch {
	case err == nil && v == SchemaVersion:
		return nil
	case err == nil && v > SchemaVersion:
		return s.tooNew(v)
	case err != nil && isDescribed(err):
		return err
	case err != nil && !missingTable(err):
		return fmt.Errorf("bus store %s: read schema version: %w", s.b.where(), err)
	}
	err = s.write(ctx, func(q querier) error {
		if s.d == postgresDialect {
			if _, err := q.exec(ctx, fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d)`, migrationLockKey)); err != nil {
				return err
			}
		}
		if _, err := q.exec(ctx, versionTable); err != nil {
			return err
		}
		v, err := schemaVersion(ctx, q)
		if err != nil {
			return err
		}
		if v > SchemaVersion {
			return s.tooNew(v)
		}
		for _, m := range migrations {
			if m.version <= v {
				continue
			}
			for _, stmt := range m.stmts {
				if _, err := q.exec(ctx, s.d.ddl(stmt)); err != nil {
					return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
				}
			}
			if _, err := q.exec(ctx, `INSERT INTO conductor_schema (version, name, applied_at) VALUES (?, ?, ?)`,
				int64(m.version), m.name, ts(s.timeNow())); err != nil {
				return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
			}
		}
		return nil
	})
	if err != nil {
		var rf *refusal.Refusal
		if errors.As(err, &rf) || isDescribed(err) {
			return err
		}
		return fmt.Errorf("bus store %s: migrate schema: %w", s.b.where(), err)
	}
	return nil
}
