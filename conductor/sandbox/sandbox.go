// Package sandbox runs one worker command in isolation: no network, no
// credentials, the worktree as the only writable path and the worktree's
// .git hidden. Backends: bwrap (bubblewrap, the default on Linux when it
// works), docker (one container per job, through the docker CLI; Close
// removes it) and none (only when asked for explicitly; warns on every
// run). Review checks and landing gates run through it too (RunGate).
//
// sandbox never adds a variable to a command's environment that the caller
// did not pass (but GOCACHE, GOMODCACHE and GOFLAGS when the caller asks
// for the warm Go caches, Spec.WarmGoCache), never runs a command through a
// shell, never binds the warm cache's lower layer into a sandbox, never falls back to
// none by itself, never runs a command as root, and never binds the Docker
// engine's socket into a container. The threat model and every mechanism
// are in docs/security.md.
package sandbox

import (
	"context"
	"errors"
	"io"
	"time"
)

// ErrUnavailable is returned (wrapped) by New when the asked-for backend
// cannot run on this machine. A run whose role demands it must not start.
var ErrUnavailable = errors.New("sandbox unavailable")

// Spec is one command to run.
type Spec struct {
	Dir         string        // the worktree: working directory and the only writable path
	Argv        []string      // exact argv; never passed to a shell
	Env         []string      // the complete environment (already allowlisted)
	Timeout     time.Duration // 0: no timeout beyond ctx
	OutputLimit int64         // cap on captured output bytes (head+tail kept); 0: default
	// MemoryLimit bounds the command's memory in bytes (RLIMIT_DATA of
	// each process; memory.max of the command's cgroup where
	// Options.Cgroup is set). It may lower Options.MaxMemory, the
	// operator's limit, never raise it; 0: Options.MaxMemory. The none
	// backend sets no limit.
	MemoryLimit int64
	Stdin       []byte

	// Scratch is an optional host folder outside Dir, bound read-write at
	// its own path: the place for HOME, GOCACHE and GOPATH that persist
	// across the commands of one session. Empty: HOME, TMPDIR, GOCACHE,
	// GOPATH, GOMODCACHE and XDG_CACHE_HOME that point outside Dir get a
	// fresh, empty tmpfs for each command.
	Scratch string

	// DirInside is where Dir appears inside the sandbox (default: its own
	// path). An agent CLI that records its working directory in a session
	// (pi) gets the same path in every round, whichever pooled worktree
	// serves it. Environment values that name the worktree must use it.
	// Ignored by the none backend, which has no inside.
	DirInside string
	// Mounts are extra host paths bound in at their own paths: a runtime's
	// install and its configuration read-only, its session folder or the
	// model proxy's socket folder writable. None may be a system folder or
	// overlap the worktree.
	Mounts []Mount
	// ReadOnlyDirs are folders inside Dir (slash-separated, relative) the
	// command sees read-only: the base tree's submodule (gitlink) folders,
	// so that a command cannot make a repository there for host git to
	// enter. One that is not a plain folder below Dir (absent, a link, a
	// file) is skipped. Defence in depth only: a command can still rename
	// a parent folder away; the conductor's worktree scan after every
	// command is the boundary.
	ReadOnlyDirs []string
	// WarmGoCache gives the command the warm Go caches (cache.go): GOCACHE
	// and GOMODCACHE start as the current generation of Options.GoCache,
	// seen through a writable layer of Scratch's own (kept for the
	// commands of the same Scratch in this process, never written back),
	// and GOFLAGS gains -trimpath (cache keys that do not depend on the
	// tree's folder). Needs Scratch; a cache that cannot be used means a
	// cold cache and one warning line on Warn, never a failure.
	WarmGoCache bool
	// Warn receives this command's warnings (the none backend's "NO
	// isolation"): a run passes its own stderr, which is kept in the run
	// folder's stderr.txt. Nil: Options.Warn.
	Warn io.Writer
}

// Mount is one extra bind of a host path, at the same path inside.
type Mount struct {
	Path     string
	Writable bool
}

// Result is what a command did.
type Result struct {
	ExitCode  int           `json:"exitCode"` // -1 when killed
	Output    []byte        `json:"-"`        // combined stdout+stderr, capped
	Truncated bool          `json:"truncated"`
	TimedOut  bool          `json:"timedOut"`
	Duration  time.Duration `json:"duration"`

	// Outcome names how the command ended: exited, signaled, timeout,
	// output-exceeded, memory-exceeded, cancelled (the Outcome* constants).
	Outcome string `json:"outcome"`
	// Signal is the signal that ended the command when Outcome is
	// signaled (e.g. "killed" for a command killed by the kernel).
	Signal string `json:"signal,omitempty"`
	// OutputExceeded: the command wrote more than the kill limit and was
	// killed.
	OutputExceeded bool `json:"outputExceeded"`
	// OutputBytes is the total output written, kept or not.
	OutputBytes int64 `json:"outputBytes"`
	// MemoryExceeded: the command failed for want of memory under its
	// limit (Outcome memory-exceeded): its cgroup recorded an OOM kill,
	// or, with RLIMIT_DATA only, it failed saying it was out of memory.
	MemoryExceeded bool `json:"memoryExceeded,omitempty"`
}

// Sandbox runs commands in isolation.
type Sandbox interface {
	// Name is the backend name: "bwrap", "none", "docker".
	Name() string
	// Run runs spec. A non-zero exit is a Result, not an error; errors are
	// for commands that could not be started or a sandbox that failed.
	Run(ctx context.Context, spec Spec) (Result, error)
}
