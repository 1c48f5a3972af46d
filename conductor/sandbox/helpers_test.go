package sandbox

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/testenv"
)

var tool struct {
	once sync.Once
	dir  string // world-readable folder holding the escapetool binary
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopDocker()
	if tool.dir != "" {
		os.RemoveAll(tool.dir)
	}
	os.Exit(code)
}

// escapeTool builds testdata/escape/escapetool once, into a folder every
// user can read (the sandbox uid must be able to run it).
func escapeTool(t *testing.T) (dir, path string) {
	t.Helper()
	tool.once.Do(func() {
		if p := os.Getenv(escapeToolEnv); p != "" {
			// A helper process: the parent test built it (and removes it).
			tool.path = p
			return
		}
		d, err := os.MkdirTemp(reachableTempBase(), "conductor-escapetool-")
		if err != nil {
			tool.err = err
			return
		}
		tool.dir = d
		if err := os.Chmod(d, 0o755); err != nil {
			tool.err = err
			return
		}
		tool.path = filepath.Join(d, "escapetool")
		cmd := exec.Command("go", "build", "-buildvcs=false", "-o", tool.path, "github.com/conductor-dev/conductor/testdata/escape/escapetool")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			tool.err = errors.New("go build escapetool: " + err.Error() + ": " + string(out))
		}
	})
	if tool.err != nil {
		t.Fatal(tool.err)
	}
	return filepath.Dir(tool.path), tool.path
}

// escapeToolEnv passes the built escapetool to helper processes.
const escapeToolEnv = "CONDUCTOR_TEST_ESCAPETOOL"

// bwrapBox returns a bwrap sandbox with the escape tool's folder bound
// read-only. Without a working bwrap it skips, or fails when CI=true.
func bwrapBox(t *testing.T, mod func(*Options)) *bwrapBackend {
	t.Helper()
	dir, _ := escapeTool(t)
	o := Options{ReadOnly: []string{dir}, Warn: &bytes.Buffer{}}
	if mod != nil {
		mod(&o)
	}
	sb, err := NewWithOptions("bwrap", o)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bwrap sandbox required in CI: %v", err)
		}
		t.Skipf("bwrap sandbox not available here: %v", err)
	}
	return sb.(*bwrapBackend)
}

// worktree makes a folder the sandbox uid can reach (t.TempDir's parent is
// private to the test user).
func worktree(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp(reachableTempBase(), "conductor-sandbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// reachableTempBase is $TMPDIR when the sandbox uid can reach it (a CI
// runner's may be private), else /tmp.
func reachableTempBase() string {
	if base := os.TempDir(); (Options{}).Reachable(base) == nil {
		return base
	}
	return "/tmp"
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// processesWith lists host pids whose command line contains all of parts
// (NUL-separated arguments are matched as one string with NULs).
func processesWith(parts ...string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		s := string(b)
		all := true
		for _, p := range parts {
			if !strings.Contains(s, p) {
				all = false
				break
			}
		}
		if all {
			pids = append(pids, pid)
		}
	}
	return pids
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

var testPath = "PATH=/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin"

func fileUID(t *testing.T, path string) int {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

// survivors is processesWith after a grace: processes SIGKILLed with their
// sandbox die asynchronously (the kernel tears a pid namespace down after
// its pid 1), so a process still listed a moment after Run returned is
// dying, not escaping; one still listed after the grace (up to 30 s, over as
// soon as none is left: a loaded machine must not turn dying into
// escaping) survived.
func survivors(parts ...string) []int {
	deadline := time.Now().Add(30 * time.Second)
	for {
		pids := processesWith(parts...)
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(50 * time.Millisecond)
	}
}
