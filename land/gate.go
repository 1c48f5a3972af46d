package land

import (
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
func runGate(ctx context.Context, sb sandbox.Sandbox, cmds []policy.GateCommand, dir, root string, env []string) ([]sandbox.GateResult, error) {
	var results []sandbox.GateResult
	for _, gc := range cmds {
		if len(gc.Argv) == 0 {
			return results, fmt.Errorf("gate %s: empty argv", gc.Name)
		}
		timeout := gc.Timeout
		if timeout <= 0 {
			timeout = defaultGateTimeout
		}
		out, err := sandbox.RunGate(ctx, sb, dir, root, gc.Argv, env, timeout, sandbox.GateOutputLimit)
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
		res := sandbox.GateResultOf(gc.Name, gc.Argv, out)
		if err != nil {
			return results, fmt.Errorf("gate %s: %w", res.Name, err)
		}
		results = append(results, res)
		if !res.OK() {
			return results, nil
		}
	}
	return results, nil
}

// gateFailed describes the failing command for a gate-failed refusal.
func gateFailed(results []sandbox.GateResult) *refusal.Refusal {
	last := results[len(results)-1]
	why := "exited non-zero"
	if last.TimedOut {
		why = "timed out"
	}
	r := refusal.New("gate-failed",
		fmt.Sprintf("gate command %q %s on the squashed tree", last.Name, why),
		"fix the change (re-dispatch the worker with the gate output), review and approve again, then land")
	r.Detail = last.OutputTail
	switch {
	case last.TimedOut:
		r.Detail = strings.TrimLeft(r.Detail+fmt.Sprintf("\n(killed after %s)", last.Duration.Round(time.Millisecond)), "\n")
	case r.Detail == "":
		r.Detail = fmt.Sprintf("exit status %d", last.ExitCode)
	}
	return r
}
