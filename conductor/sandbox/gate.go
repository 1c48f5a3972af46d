package sandbox

import (
	"context"
	"fmt"
	"github.com/conductor-dev/conductor/policy"
	"os"
	"path/filepath"
	"time"
)

// gateEnvNames are the only variables review checks and landing gates take
// from the conductor's environment. Caches are not among them: a gate runs
// worker-written code, so it gets its own HOME (and Go build cache) in its
// scratch folder, never the conductor's.
var gateEnvNames = []string{
	"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ",
	"GOROOT", "GOFLAGS", "GONOSUMDB", "GOPRIVATE", "CGO_ENABLED",
	// GOMODCACHE only when the operator set it, meaning it is also bound
	// read-only (CONDUCTOR_SANDBOX_RO_PATHS): an offline module cache.
	"GOMODCACHE",
}

// GateEnv is the environment of review checks and landing gates run in a
// sandbox whose scratch folder is root: the allowlist above, HOME and TMPDIR
// in root, no network for Go (GOPROXY=off, GOTOOLCHAIN=local), git
// discovery stopped at root, CI=true and CONDUCTOR_GATE=1, ToolConfigEnv
// (configuration files in that HOME ignored), then extra.
func GateEnv(getenv func(string) string, root string, extra ...string) []string {
	env := make([]string, 0, len(gateEnvNames)+12+len(extra))
	for _, n := range gateEnvNames {
		if v := getenv(n); v != "" && !policy.Withheld(n) {
			env = append(env, n+"="+v)
		}
	}
	if getenv("PATH") == "" {
		env = append(env, "PATH=/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin")
	}
	if getenv("LANG") == "" {
		env = append(env, "LANG=C.UTF-8")
	}
	env = append(env,
		"HOME="+filepath.Join(root, "home"),
		"TMPDIR="+filepath.Join(root, "tmp"),
		"GOPROXY=off",
		"GOTOOLCHAIN=local",
		"GIT_CEILING_DIRECTORIES="+root,
		"GIT_TERMINAL_PROMPT=0",
		"CI=true",
		"CONDUCTOR_GATE=1",
	)
	env = append(env, toolConfigEnv...)
	return append(env, extra...)
}

// RunGate runs one review check or gate command in sb: dir (the exported or
// checked-out tree) is the working directory and writable; root, outside
// dir, is the scratch folder holding home/ and tmp/ (made here, as GateEnv
// names them). Both are handed to the sandbox uid first. The command sees no
// network, no credential and no .git. Its Go caches start warm
// (Spec.WarmGoCache) when a warm cache exists.
func RunGate(ctx context.Context, sb Sandbox, dir, root string, argv, env []string, timeout time.Duration, outputLimit int64) (Result, error) {
	for _, d := range []string{filepath.Join(root, "home"), filepath.Join(root, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Result{}, fmt.Errorf("gate: %w", err)
		}
	}
	for _, d := range []string{dir, root} {
		if sb.Name() == BackendNone {
			break // runs as the conductor: nothing to hand over
		}
		if err := prepareFor(sb, d); err != nil {
			return Result{}, fmt.Errorf("gate: %w", err)
		}
	}
	// The warm Go caches (cache.go): a layer of this scratch folder's own
	// over the trusted generation, so the gate's commands share what they
	// compile and nothing reaches a later gate.
	return sb.Run(ctx, Spec{Dir: dir, Scratch: root, Argv: argv, Env: env, Timeout: timeout, OutputLimit: outputLimit, WarmGoCache: true})
}

// prepareFor hands dir to sb's uid with sb's own options (the default
// identity for a backend that does not say).
func prepareFor(sb Sandbox, dir string) error {
	if p, ok := sb.(interface{ PrepareWorktree(string) error }); ok {
		return p.PrepareWorktree(dir)
	}
	return Options{}.PrepareWorktree(dir)
}

// ForGate returns sb, or, when sb is nil, the default backend ("auto":
// bubblewrap when it works) with the default options (the command line
// passes one made with the operator's: OptionsFrom, or Unavailable). A
// gate never silently runs unsandboxed: with no working sandbox the error
// wraps ErrUnavailable and the caller refuses.
func ForGate(sb Sandbox) (Sandbox, error) {
	if u, ok := sb.(unavailable); ok {
		return nil, u.err
	}
	if sb != nil {
		return sb, nil
	}
	return NewWithOptions(BackendAuto, Options{})
}

// Unavailable is what a caller that probed the backends with the
// operator's options hands on when none works here (err says why): it
// runs nothing, and ForGate returns err for it, so the domain refuses
// with its own words when it reaches its gate, and never probes again
// with other options (a default bwrap in place of the one configured).
func Unavailable(err error) Sandbox { return unavailable{err} }

type unavailable struct{ err error }

func (u unavailable) Name() string { return "unavailable" }

func (u unavailable) Run(context.Context, Spec) (Result, error) { return Result{}, u.err }
