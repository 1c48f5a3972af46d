package land

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/sandbox"
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

// tailOf keeps the last tailBytes of a command's output, from a line start.
func tailOf(out string) string {
	b := []byte(out)
	if len(b) > tailBytes {
		b = b[len(b)-tailBytes:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 && i < len(b)-1 {
			b = b[i+1:]
		}
	}
	return strings.TrimRight(string(b), "\n")
}

// gateEnv is the environment of gate commands whose scratch folder is
// root (sandbox.GateEnv: the allowlist shared with review's checks, HOME and
// TMPDIR in root, no credential), plus what the gate may want to know about
// the landing.
func gateEnv(getenv func(string) string, root string, extra ...string) []string {
	if getenv == nil {
		getenv = os.Getenv
	}
	return sandbox.GateEnv(getenv, root, extra...)
}

// runGate runs every gate command in dir, inside sb (the gate runs
// worker-written code: never on the host), in order, and stops at the first
// failure. root is the scratch folder (HOME, TMPDIR) outside dir. A command
// that outlives its timeout is killed with its whole process group.
func runGate(ctx context.Context, sb sandbox.Sandbox, cmds []policy.GateCommand, dir, root string, env []string) ([]GateResult, error) {
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
		out, err := sandbox.RunGate(ctx, sb, dir, root, gc.Argv, env, timeout, tailBytes)
		res.Seconds = out.Duration.Seconds()
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
		if err != nil {
			return results, fmt.Errorf("gate %s: %w", res.Name, err)
		}
		res.OK = out.ExitCode == 0 && !out.TimedOut
		if !res.OK {
			res.TimedOut = out.TimedOut
			res.Tail = tailOf(string(out.Output))
			if out.TimedOut {
				res.Tail = strings.TrimLeft(res.Tail+fmt.Sprintf("\n(killed after %s)", timeout), "\n")
			} else if res.Tail == "" {
				res.Tail = fmt.Sprintf("exit status %d", out.ExitCode)
			}
		}
		results = append(results, res)
		if !res.OK {
			return results, nil
		}
	}
	return results, nil
}

// gateFailed describes the failing command for a gate-failed refusal.
func gateFailed(results []GateResult) *refusal.Refusal {
	last := results[len(results)-1]
	why := "exited non-zero"
	if last.TimedOut {
		why = "timed out"
	}
	r := refusal.New("gate-failed",
		fmt.Sprintf("gate command %q %s on the squashed tree", last.Name, why),
		"fix the change (re-dispatch the worker with the gate output), review and approve again, then land")
	r.Detail = last.Tail
	return r
}
