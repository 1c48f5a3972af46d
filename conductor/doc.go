// Package conductor holds the protocol's shared core: the configuration and
// the data root. Its subpackages own the bus store (bus), run records
// (runrec), the job queue (queue) and the forge (forge).
//
// The configuration is resolved once (Resolve): every knob — worktree
// base, repository root, pool bounds, step and token limits, checkpoint
// cadence, sandbox backend and limits, committer identity, model default,
// config file, store and queue URLs, pi dir, data root — from the flags,
// else the environment, else the config file, else the defaults, each with
// its source, and a malformed value is an *Error naming it. This is the
// only package (with the command line) that reads a knob's variable;
// domain packages receive values (architecture_test.go checks it). It
// imports nothing of ours but jsonstrict, so every package may import it.
//
// conductor never hands a credential to a worker: forge tokens and API keys
// are read in the forge and the model client only, never written to a run
// record.
package conductor
