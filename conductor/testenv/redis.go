package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Redis starts a private redis-server on a unix socket in a temp folder and
// returns its URL ("unix:///path/redis.sock", as go-redis's ParseURL takes
// it). The server stops when the test ends. Without redis-server the test is skipped, unless CI=true.
func Redis(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		redisUnavailable(t, "redis-server")
	}
	dir, err := os.MkdirTemp("", "conductor-redis-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--loglevel", "warning")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line := sc.Text(); strings.Contains(line, "# ") {
				t.Logf("redis: %s", line)
			}
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not create %s within 10s", sock)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Sprintf("unix://%s", sock)
}

// redisUnavailable skips (locally) or fails (CI=true) a test whose server
// binary is absent.
func redisUnavailable(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI=true but was not found", what)
	}
	t.Skipf("%s not found; skipping (set CI=true to make this a failure)", what)
}
