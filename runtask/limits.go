package runtask

import (
	"cmp"
	"time"

	"github.com/conductor-dev/conductor/conductor"
)

// RolePolicy is what the worker needs from a role contract. *policy.Role
// implements it; runtask declares it so it never imports the policy loader.
type RolePolicy interface {
	Name() string
	SystemPrompt() string             // the role's prompt (the task's brief is appended by runtask)
	AllowsTool(tool string) bool      // canonical tool names
	CheckCommand(argv []string) error // nil if argv matches an allowlisted argv prefix; *refusal.Refusal otherwise
	CheckWrite(path string) error     // nil if the role may write this worktree-relative path
	EnvAllowlist() []string           // extra environment variable NAMES commands may receive
	SandboxBackend() string           // "bwrap" | "none" | "auto"
	MaxSteps() int                    // 0 = default
	TokenBudget() int64               // 0 = unlimited
	CommandTimeout() time.Duration    // 0 = default
	OutputLimit() int                 // bytes of tool output shown to the model; 0 = default
}

// memoryLimiter is implemented by roles that bound each command's memory
// (*policy.Role: the contract's limits.memoryBytes). A role without it, or
// 0, leaves the sandbox's default.
type memoryLimiter interface {
	MemoryLimit() int64 // bytes; 0 = the sandbox's default
}

// Defaults applied when neither the task, the role nor the operator says.
const (
	DefaultMaxSteps        = conductor.DefaultMaxToolSteps
	DefaultCommandTimeout  = 5 * time.Minute
	DefaultOutputLimit     = 10 << 10 // what the model sees of one tool result
	DefaultCheckpointEvery = conductor.DefaultCheckpointEvery
	// fullOutputLimit bounds what is captured of one command for the run
	// folder (the model sees DefaultOutputLimit of it).
	fullOutputLimit = 8 << 20
	// stuckRepeats is how often the same call with the same result ends a run.
	stuckRepeats = 3
)

// limits are the resolved stops of one run.
type limits struct {
	MaxSteps        int
	Timeout         time.Duration
	TokenBudget     int64 // 0: unlimited
	CommandTimeout  time.Duration
	OutputLimit     int
	CheckpointEvery int   // 0: never
	MemoryLimit     int64 // bytes per command; 0: the sandbox's default
}

// resolveLimits applies the precedence of docs/worker.md ("Limits: who
// decides"): the step limit and the token budget are the task's, else the
// operator's (cfg: WORKER_MAX_TOOL_STEPS, WORKER_TOKEN_BUDGET, the config
// file), else the defaults, and the role's limits are a ceiling over all
// of them, never an override. The checkpoint cadence is the operator's
// (WORKER_CHECKPOINT_EVERY_N_STEPS), cut to the step limit so that a run
// that reaches its limit has been checkpointed.
func resolveLimits(t Task, role RolePolicy, cfg conductor.Config) limits {
	cfg = cfg.WithDefaults()
	l := limits{
		MaxSteps:        cmp.Or(t.MaxSteps, cfg.MaxToolSteps),
		TokenBudget:     cmp.Or(t.TokenBudget, cfg.TokenBudget),
		Timeout:         time.Duration(t.TimeoutSeconds) * time.Second,
		CommandTimeout:  DefaultCommandTimeout,
		OutputLimit:     DefaultOutputLimit,
		CheckpointEvery: cfg.Checkpoints(),
	}
	if role != nil {
		if n := role.MaxSteps(); n > 0 && n < l.MaxSteps {
			l.MaxSteps = n
		}
		if n := role.TokenBudget(); n > 0 && (l.TokenBudget == 0 || n < l.TokenBudget) {
			l.TokenBudget = n
		}
		if d := role.CommandTimeout(); d > 0 {
			l.CommandTimeout = d
		}
		if n := role.OutputLimit(); n > 0 {
			l.OutputLimit = n
		}
		if m, ok := role.(memoryLimiter); ok && m.MemoryLimit() > 0 {
			l.MemoryLimit = m.MemoryLimit()
		}
	}
	if l.CheckpointEvery > l.MaxSteps {
		l.CheckpointEvery = l.MaxSteps
	}
	if l.Timeout > 0 && l.CommandTimeout > l.Timeout {
		l.CommandTimeout = l.Timeout
	}
	return l
}
