package land

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/conductor-dev/conductor/policy"
)

// defaultGateTimeout bounds a gate command whose policy gives no timeout.
const defaultGateTimeout = 10 * time.Minute

// tailBytes is how much of a failing gate command's output a refusal keeps.
const tailBytes = 4000

// GateResult is one gate command's outcome.
type GateResult struct {
	Name     string   `json:"name"`
	Argv     []string `json:"argv"`
	OK       bool     `json:"ok"`
	Seconds  float64  `json:"seconds"`
	TimedOut bool     `json:"timedOut,omitempty"`
	Tail     string   `json:"tail,omitempty"` // output tail when it failed
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) > t.max {
		b = b[len(b)-t.max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 && i < len(b)-1 {
			b = b[i+1:]
		}
	}
	return strings.TrimRight(string(b), "\n")
}

// runGate runs every gate command in dir with env, in order, and stops at the
// first failure. A command that outlives its timeout is killed with its whole
// process group.
func runGate(ctx context.Context, cmds []policy.GateCommand, dir string, env []string) ([]GateResult, error) {
	var results []GateResult
	for _, gc := range cmds {
		if len(gc.Argv) == 0 {
			return results, fmt.Errorf("gate %s: empty argv", gc.Name)
		}
		timeout := gc.Timeout
		if timeout <= 0 {
			timeout = defaultGateTimeout
		}
		res := GateResult{Name: gc.Name, Argv: gc.Argv}
		if res.Name == "" {
			res.Name = strings.Join(gc.Argv, " ")
		}
		start := time.Now()
		tail := &tailWriter{max: tailBytes}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		cmd := exec.Command(gc.Argv[0], gc.Argv[1:]...)
		cmd.Dir = dir
		cmd.Env = env
		cmd.Stdout = tail
		cmd.Stderr = tail
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		err := cmd.Start()
		if err == nil {
			done := make(chan struct{})
			go func() {
				select {
				case <-cctx.Done():
					syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				case <-done:
				}
			}()
			err = cmd.Wait()
			close(done)
			// Kill what the command left running in its group.
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		res.Seconds = time.Since(start).Seconds()
		timedOut := errors.Is(cctx.Err(), context.DeadlineExceeded)
		cancel()
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
		res.OK = err == nil
		if !res.OK {
			res.TimedOut = timedOut
			res.Tail = tail.String()
			if timedOut {
				res.Tail = strings.TrimLeft(res.Tail+fmt.Sprintf("\n(killed after %s)", timeout), "\n")
			} else if res.Tail == "" {
				res.Tail = err.Error()
			}
		}
		results = append(results, res)
		if !res.OK {
			return results, nil
		}
	}
	return results, nil
}

// gateEnvNames are the variables the gate takes from the conductor's
// environment (the same allowlist as review's gate): no token, key or URL
// with a password passes.
var gateEnvNames = []string{
	"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ",
	"GOROOT", "GOPATH", "GOCACHE", "GOMODCACHE", "GOFLAGS", "GOPROXY", "GONOSUMDB", "GONOSUMCHECK",
	"GOPRIVATE", "GOTOOLCHAIN", "CGO_ENABLED", "GOTMPDIR",
}

// gateEnv is the environment of gate commands run under the scratch root:
// the allowlist, HOME and TMPDIR inside root, Go's caches kept where the
// conductor's are (a gate is not a cold build), git discovery stopped at
// root, CI=true, CONDUCTOR_GATE=1, plus what the gate may want to know about
// the landing.
func gateEnv(getenv func(string) string, root string, extra ...string) []string {
	if getenv == nil {
		getenv = os.Getenv
	}
	env := make([]string, 0, len(gateEnvNames)+16)
	for _, n := range gateEnvNames {
		if v := getenv(n); v != "" {
			env = append(env, n+"="+v)
		}
	}
	home := getenv("HOME")
	if getenv("GOCACHE") == "" {
		if c := getenv("XDG_CACHE_HOME"); c != "" {
			env = append(env, "GOCACHE="+filepath.Join(c, "go-build"))
		} else if home != "" {
			env = append(env, "GOCACHE="+filepath.Join(home, ".cache", "go-build"))
		}
	}
	if getenv("GOPATH") == "" && home != "" {
		if getenv("GOMODCACHE") == "" {
			env = append(env, "GOMODCACHE="+filepath.Join(home, "go", "pkg", "mod"))
		}
		env = append(env, "GOPATH="+filepath.Join(home, "go"))
	}
	env = append(env,
		"HOME="+filepath.Join(root, "home"),
		"TMPDIR="+filepath.Join(root, "tmp"),
		"GIT_CEILING_DIRECTORIES="+root,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"CI=true",
		"CONDUCTOR_GATE=1",
	)
	return append(env, extra...)
}

// gateFailed describes the failing command for a gate-failed refusal.
func gateFailed(results []GateResult) *policy.Refusal {
	last := results[len(results)-1]
	why := "exited non-zero"
	if last.TimedOut {
		why = "timed out"
	}
	r := policy.Refuse("gate-failed",
		fmt.Sprintf("gate command %q %s on the squashed tree", last.Name, why),
		"fix the change (re-dispatch the worker with the gate output), review and approve again, then land")
	r.Detail = last.Tail
	return r
}
