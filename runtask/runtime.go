package runtask

import (
	"context"
	"fmt"
)

// Runtime names: who drives a session's conversation.
const (
	RuntimeBuiltin = "builtin" // conductor's own tool loop
	RuntimePi      = "pi"      // the pi coding agent, sandboxed, through the model proxy
)

// Runtimes lists the runtime names a task may ask for.
var Runtimes = []string{RuntimeBuiltin, RuntimePi}

// WorkerSession is one runtime's round of a session: it drives the
// conversation in the run's worktree until the model stops, a limit is
// reached or ctx ends, and says how it ended. Everything around a round —
// the worktree and pool, the sandbox, the run record and transcript, notes,
// checkpoints, extraction and the patch-id, claims, the --json events — is
// the runner's, the same for every runtime.
type WorkerSession interface {
	Runtime() string
	// Turn returns the run's status (runrec.Status*) and a message.
	Turn(ctx context.Context) (status, msg string)
}

// builtinSession is conductor's own tool loop.
type builtinSession struct{ r *runner }

func (b builtinSession) Runtime() string { return RuntimeBuiltin }

func (b builtinSession) Turn(ctx context.Context) (string, string) { return b.r.loop(ctx) }

// checkRuntime reports whether name can run here (nil for builtin).
func checkRuntime(name string, piPrefix string) (PiInstall, error) {
	switch name {
	case "", RuntimeBuiltin:
		return PiInstall{}, nil
	case RuntimePi:
		return FindPi(piPrefix)
	}
	return PiInstall{}, fmt.Errorf("%w: unknown runtime %q (known: builtin, pi)", ErrRuntimeUnavailable, name)
}
