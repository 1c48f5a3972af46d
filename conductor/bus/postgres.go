package bus

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// connectTimeout bounds dialling PostgreSQL when the URL sets no
// connect_timeout, so an unreachable server fails fast instead of hanging.
const connectTimeout = 5 * time.Second

// migrationLockKey is the advisory lock that serialises migrations of
// several processes opening the same database for the first time.
const migrationLockKey = 0x636f6e64 // "cond"

// postgresBackend is the store on PostgreSQL through a pgx pool.
type postgresBackend struct {
	pool     *pgxpool.Pool
	display  string // the URL without its password
	password string
}

func openPostgres(ctx context.Context, rawURL string) (*postgresBackend, error) {
	display := RedactURL(rawURL)
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("bus store: database URL %s: %s", display, redact(err.Error(), rawURL, ""))
	}
	pw := cfg.ConnConfig.Password
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	b := &postgresBackend{display: display, password: pw}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bus store %s: %s", display, b.redact(err))
	}
	pctx, cancel := context.WithTimeout(ctx, 2*cfg.ConnConfig.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &unreachableError{msg: fmt.Sprintf("bus store: cannot connect to PostgreSQL at %s: %s", display, b.redact(err))}
	}
	b.pool = pool
	return b, nil
}

func (b *postgresBackend) name() string  { return "postgres" }
func (b *postgresBackend) where() string { return b.display }
func (b *postgresBackend) close() error  { b.pool.Close(); return nil }
func (b *postgresBackend) db() querier   { return pgQuerier{b.pool} }

func (b *postgresBackend) tx(ctx context.Context, fn func(q querier) error) (err error) {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := fn(pgQuerier{tx}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (b *postgresBackend) retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01": // serialization_failure, deadlock_detected
			return true
		}
	}
	return false
}

func (b *postgresBackend) describe(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "3F000" { // invalid_schema_name
		return describedf("bus store %s: the search_path names no schema that exists (%w); create the schema or fix the URL", b.display, err)
	}
	if errors.As(err, &pe) || pgconn.Timeout(err) || errors.As(err, new(*pgconn.ConnectError)) {
		msg := b.redact(err)
		if msg != err.Error() {
			return describedf("bus store %s: %s", b.display, msg)
		}
	}
	return err
}

// redact removes the password from an error message.
func (b *postgresBackend) redact(err error) string {
	return redact(err.Error(), "", b.password)
}

func redact(msg, rawURL, password string) string {
	if rawURL != "" {
		if u, err := url.Parse(rawURL); err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
				if esc := url.QueryEscape(pw); esc != pw {
					msg = strings.ReplaceAll(msg, esc, "xxxxx")
				}
			}
			if pw := u.Query().Get("password"); pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
		if i := strings.Index(rawURL, "password="); i >= 0 {
			pw := rawURL[i+len("password="):]
			if j := strings.IndexAny(pw, " &"); j >= 0 {
				pw = pw[:j]
			}
			if pw = strings.Trim(pw, "'"); pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
	}
	if password != "" {
		msg = strings.ReplaceAll(msg, password, "xxxxx")
	}
	return msg
}

// RedactURL returns a database URL fit for messages: the password (in the
// user info or a password= parameter, or wherever the driver finds it) is
// replaced by "xxxxx".
func RedactURL(raw string) string {
	out := redactURLForm(raw)
	if cfg, err := pgconn.ParseConfig(raw); err == nil && cfg.Password != "" {
		for _, form := range []string{cfg.Password, url.QueryEscape(cfg.Password), url.PathEscape(cfg.Password),
			(&url.URL{User: url.UserPassword("", cfg.Password)}).String()[3:]} {
			if form != "" {
				out = strings.ReplaceAll(out, form, "xxxxx")
			}
		}
	}
	return out
}

func redactURLForm(raw string) string {
	u, err := url.Parse(raw)
	blanked, changed := blankUserinfo(raw)
	hasPW := false
	if err == nil && u.User != nil {
		_, hasPW = u.User.Password()
	}
	switch {
	case err == nil && u.Scheme != "" && u.Fragment == "" && (hasPW || !changed):
		// A well-formed URL.
		if hasPW {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		if q := u.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return passwordParam.ReplaceAllString(u.String(), "${1}xxxxx")
	case strings.Contains(raw, "://"):
		// Malformed: blank what may be a password anyway.
		return passwordParam.ReplaceAllString(blanked, "${1}xxxxx")
	}
	// A key=value connection string.
	fields := strings.Fields(raw)
	for i, f := range fields {
		if strings.HasPrefix(f, "password=") {
			fields[i] = "password=xxxxx"
		}
	}
	if len(fields) == 0 {
		return "(unparsable database URL)"
	}
	return strings.Join(fields, " ")
}

// blankUserinfo replaces what follows the first ':' after "://" up to the
// last '@' (where a password would be) with "xxxxx".
func blankUserinfo(raw string) (string, bool) {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw, false
	}
	i += len("://")
	j := strings.LastIndex(raw, "@")
	if j <= i {
		return raw, false
	}
	k := strings.Index(raw[i:j], ":")
	if k < 0 {
		return raw, false
	}
	return raw[:i+k+1] + "xxxxx" + raw[j:], true
}

var (
	passwordParam = regexp.MustCompile(`(password=)[^&#]*`)
)

// pgQuerier runs "?"-placeholder SQL on a pool or a transaction.
type pgQuerier struct {
	q interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	}
}

func (p pgQuerier) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := p.q.Exec(ctx, numberPlaceholders(query), args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (p pgQuerier) query(ctx context.Context, query string, args ...any) (rows, error) {
	r, err := p.q.Query(ctx, numberPlaceholders(query), args...)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// numberPlaceholders turns "?" into "$1", "$2"… The store's SQL has no "?"
// inside string literals.
func numberPlaceholders(q string) string {
	if !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
