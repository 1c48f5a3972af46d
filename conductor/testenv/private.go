package testenv

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// PGServer is a PostgreSQL server of one test's own, for fault tests that
// stop and start it (the shared server of Postgres must stay up for the
// other tests of the binary).
type PGServer struct {
	t      testing.TB
	mu     sync.Mutex
	runAs  []string
	binDir string
	data   string
	sock   string
	logf   string
	opts   string
}

// PrivatePostgres starts a PostgreSQL server for t alone, on a unix socket
// in a temp folder; it is stopped when t ends. Without the binaries the test
// is skipped, unless CI=true.
func PrivatePostgres(t testing.TB) *PGServer {
	t.Helper()
	s := &PGServer{t: t, binDir: findPGBin()}
	if s.binDir == "" {
		unavailable(t, "PostgreSQL (initdb, pg_ctl)")
	}
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			unavailable(t, `a "postgres" user to run PostgreSQL as (tests run as root)`)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		if p, err := exec.LookPath("runuser"); err == nil {
			s.runAs = []string{p, "-u", "postgres", "--"}
		} else if p, err := exec.LookPath("setpriv"); err == nil {
			s.runAs = []string{p, "--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups", "--"}
		} else {
			unavailable(t, "runuser or setpriv (to run PostgreSQL as the postgres user)")
		}
	}
	dir, err := os.MkdirTemp("", "conductor-pgp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s.sock, s.data, s.logf = filepath.Join(dir, "sock"), filepath.Join(dir, "data"), filepath.Join(dir, "log")
	if err := os.Mkdir(s.sock, 0o700); err != nil {
		t.Fatal(err)
	}
	if uid >= 0 {
		for _, p := range []string{dir, s.sock} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	os.Chmod(dir, 0o755)
	if err := s.pg("initdb", "-D", s.data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		t.Fatal(err)
	}
	s.opts = fmt.Sprintf("-k %s -c listen_addresses='' -c fsync=off -c full_page_writes=off -c max_connections=100", s.sock)
	s.Start()
	t.Cleanup(func() { s.pg("pg_ctl", "-D", s.data, "-m", "immediate", "-w", "stop") })
	return s
}

func (s *PGServer) pg(name string, args ...string) error {
	argv := append(append(append([]string(nil), s.runAs...), filepath.Join(s.binDir, name)), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = filepath.Dir(s.data)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C", "TZ=UTC")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		log, _ := os.ReadFile(s.logf)
		return fmt.Errorf("%s %s: %v\n%s\nserver log:\n%s", name, strings.Join(args, " "), err, out.Bytes(), log)
	}
	return nil
}

// URL is the server's "postgres" database.
func (s *PGServer) URL() string {
	return "postgres:///postgres?host=" + s.sock + "&user=postgres&sslmode=disable"
}

// Start starts the (stopped) server and waits until it accepts connections.
func (s *PGServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.pg("pg_ctl", "-D", s.data, "-l", s.logf, "-o", s.opts, "-w", "-t", "120", "start"); err != nil {
		s.t.Fatal(err)
	}
}

// Stop stops the server: mode is "fast" (clients are disconnected, the
// server shuts down cleanly) or "immediate" (as if it crashed).
func (s *PGServer) Stop(mode string) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.pg("pg_ctl", "-D", s.data, "-m", mode, "-w", "-t", "120", "stop"); err != nil {
		s.t.Fatal(err)
	}
}

// RedisServer is a redis-server of one test's own, with an append-only
// file (appendfsync always), that can be killed and restarted on the same
// socket with its data.
type RedisServer struct {
	t    testing.TB
	bin  string
	dir  string
	sock string
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// PrivateRedis starts a redis-server for t alone; it is stopped when t
// ends. Without redis-server the test is skipped, unless CI=true.
func PrivateRedis(t testing.TB) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		redisUnavailable(t, "redis-server")
	}
	dir, err := os.MkdirTemp("", "conductor-redisp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &RedisServer{t: t, bin: bin, dir: dir, sock: filepath.Join(dir, "redis.sock")}
	s.Start()
	t.Cleanup(func() { s.Kill() })
	return s
}

// URL is the server's unix socket URL.
func (s *RedisServer) URL() string { return "unix://" + s.sock }

// Start starts the (stopped) server and waits for its socket.
func (s *RedisServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	os.Remove(s.sock)
	cmd := exec.Command(s.bin, "--port", "0", "--unixsocket", s.sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", s.dir,
		"--daemonize", "no", "--loglevel", "warning")
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.cmd = cmd
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
		}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(s.sock); err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server did not create %s", s.sock)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Kill stops the server with SIGKILL (its append-only file keeps what was
// written).
func (s *RedisServer) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}
