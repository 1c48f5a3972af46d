package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgServer is the one PostgreSQL server of this test binary.
type pgServer struct {
	dir    string // data, socket and log live here
	sock   string // socket directory
	binDir string
	err    error
	skip   string
}

var (
	pgOnce sync.Once
	pg     pgServer
	pgSeq  atomic.Int64
)

// Postgres returns the URL of a new, empty database (schema) on this test binary's
// private PostgreSQL server, starting the server on first use: initdb and
// pg_ctl in a temp folder, listening on a unix socket only, run as the
// "postgres" user when the tests run as root (initdb refuses root). The
// server stops when the test binary exits (a watchdog process stops it even
// when the binary is killed). Without the PostgreSQL binaries the test is
// skipped, unless CI=true.
func Postgres(t testing.TB) string {
	t.Helper()
	if err := PostgresAvailable(); err != nil {
		var u *unavailableError
		if errors.As(err, &u) {
			unavailable(t, u.what)
		}
		t.Fatalf("testenv: PostgreSQL: %v", err)
	}
	url, err := NewPostgresDatabase()
	if err != nil {
		t.Fatal(err)
	}
	name := schemaName(url)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, pg.url("postgres")); err == nil {
			c.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
			c.Close(ctx)
		}
	})
	return url
}

// unavailableError says which binary is missing.
type unavailableError struct{ what string }

func (e *unavailableError) Error() string { return e.what + " not found" }

// PostgresAvailable starts the server on first use and reports why it
// cannot run (an error wrapping the missing binary's name), or nil. For
// harnesses with no testing.TB at hand (testscript setups).
func PostgresAvailable() error {
	pgOnce.Do(func() { pg.start() })
	if pg.skip != "" {
		return &unavailableError{what: pg.skip}
	}
	return pg.err
}

// NewPostgresDatabase returns the URL of a new, empty place to keep tables
// on the running server (see PostgresAvailable): a schema of its own in the
// server's "postgres" database, selected by the URL's search_path (creating
// a schema is instant; a database takes a checkpoint). It goes away with the
// server.
func NewPostgresDatabase() (string, error) {
	if err := PostgresAvailable(); err != nil {
		return "", err
	}
	name := fmt.Sprintf("t%d_%d", os.Getpid(), pgSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, pg.url("postgres"))
	if err != nil {
		return "", fmt.Errorf("testenv: connect to PostgreSQL: %w", err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return "", fmt.Errorf("testenv: create schema %s: %w", name, err)
	}
	return pg.url("postgres", "search_path", name), nil
}

func schemaName(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return p.Query().Get("search_path")
}

// url is the URL of database db with extra query parameters (name, value
// pairs).
func (s *pgServer) url(db string, params ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(params); i += 2 {
		q.Set(params[i], params[i+1])
	}
	q.Set("host", s.sock)
	q.Set("user", "postgres")
	q.Set("sslmode", "disable")
	return "postgres:///" + db + "?" + q.Encode()
}

// findPGBin returns the folder holding initdb and pg_ctl.
func findPGBin() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "pg_ctl")); err == nil {
			return filepath.Dir(p)
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	for i := len(matches) - 1; i >= 0; i-- {
		dir := filepath.Dir(matches[i])
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir
		}
	}
	return ""
}

func (s *pgServer) start() {
	s.binDir = findPGBin()
	if s.binDir == "" {
		s.skip = "PostgreSQL (initdb, pg_ctl)"
		return
	}
	// As root, run the server as "postgres"; otherwise as ourselves.
	var runAs []string
	var uid, gid = -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			s.skip = "a \"postgres\" user to run PostgreSQL as (tests run as root)"
			return
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		if p, err := exec.LookPath("runuser"); err == nil {
			runAs = []string{p, "-u", "postgres", "--"}
		} else if p, err := exec.LookPath("setpriv"); err == nil {
			runAs = []string{p, "--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups", "--"}
		} else {
			s.skip = "runuser or setpriv (to run PostgreSQL as the postgres user)"
			return
		}
	}
	dir, err := os.MkdirTemp("", "conductor-pg-")
	if err != nil {
		s.err = err
		return
	}
	s.dir = dir
	s.sock = filepath.Join(dir, "sock")
	if err := os.Mkdir(s.sock, 0o700); err != nil {
		s.err = err
		return
	}
	if uid >= 0 {
		for _, p := range []string{dir, s.sock} {
			if err := os.Chown(p, uid, gid); err != nil {
				s.err = fmt.Errorf("chown %s to postgres: %w", p, err)
				return
			}
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		s.err = err
		return
	}
	data := filepath.Join(dir, "data")
	logf := filepath.Join(dir, "log")
	run := func(name string, args ...string) error {
		argv := append(append(append([]string(nil), runAs...), filepath.Join(s.binDir, name)), args...)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C", "TZ=UTC")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %v\n%s", name, err, out.Bytes())
		}
		return nil
	}
	if err := run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		s.err = err
		return
	}
	opts := fmt.Sprintf("-k %s -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200", s.sock)
	if err := run("pg_ctl", "-D", data, "-l", logf, "-o", opts, "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(logf)
		s.err = fmt.Errorf("%v\nserver log:\n%s", err, log)
		return
	}
	// The watchdog stops the server and removes the folder once this test
	// binary is gone, however it ends.
	stop := fmt.Sprintf(`while kill -0 %d 2>/dev/null; do sleep 0.5; done; %s %s -D %s -m immediate stop >/dev/null 2>&1; rm -rf %s`,
		os.Getpid(), shellJoin(runAs), filepath.Join(s.binDir, "pg_ctl"), data, dir)
	wd := exec.Command("sh", "-c", stop)
	wd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := wd.Start(); err != nil {
		s.err = fmt.Errorf("start PostgreSQL watchdog: %w", err)
		return
	}
	go wd.Wait()
}

func shellJoin(args []string) string {
	var b bytes.Buffer
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("'" + a + "'")
	}
	return b.String()
}

// unavailable skips (locally) or fails (CI=true) a test whose server binary
// is absent.
func unavailable(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI=true but was not found", what)
	}
	t.Skipf("%s not found; skipping (set CI=true to make this a failure)", what)
}
