// Package runtask is the worker: task files, the session tool loop against an
// OpenAI-compatible model, the tools it executes for the model, the sandbox
// commands run in, and checkpoints.
//
// runtask never sees a forge credential and never passes an API key, token or
// any variable outside the allowlist to a tool, a command or a prompt. It
// never runs host git on a worker's worktree that has not been scanned since
// the last sandboxed command (patch.ScanWorktree: nested repositories and
// special files removed, every hazard recorded in the run's result), and
// never reuses a pooled worktree that holds one.
package runtask
