package git

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Git runs the git CLI against one repository with an explicit git dir, an
// explicit (or no) work tree, an environment built from an allowlist and
// guards against repository configuration that could run programs.
//
// Every git invocation in conductor goes through this type. It never reads
// the user's global or system configuration, never asks for credentials and
// never follows a ".git" file or directory found in a work tree: GitDir is
// always given by the caller.
type Git struct {
	// GitDir is the repository's git directory (for a linked worktree,
	// its private directory under the main repository's worktrees/).
	GitDir string
	// WorkTree is the work tree to operate on; empty means none (bare
	// operations such as cat-file, read-tree into a temporary index).
	WorkTree string
	// Env holds extra NAME=VALUE pairs appended after the allowlisted base
	// (for example GIT_INDEX_FILE, GIT_AUTHOR_NAME, a push credential).
	Env []string
	// Config holds extra -c NAME=VALUE pairs placed after the guards.
	Config []string
	// Scratch is the folder the throw-away git dirs of diffs, applies and
	// extractions are made in (the data root's scratch folder; stale ones
	// are removed by CleanScratch). Empty means os.TempDir().
	Scratch string
	// Timeout bounds every git child: it is killed (with its process
	// group) when it passes, and the error says so. 0 means the caller's
	// deadline when its context has one, else DefaultTimeout.
	Timeout time.Duration
}

// DefaultTimeout bounds a git child whose caller gave no deadline: a git
// that blocks (on a named pipe, a lock, a hung filesystem) becomes an
// error, never a hang.
const DefaultTimeout = 10 * time.Minute

// waitDelay is how long a killed or finished git's output pipes stay open
// for a process it started that still holds them (exec.Cmd.WaitDelay).
const waitDelay = 5 * time.Second

// GitError is returned when git exits non-zero or cannot start.
type GitError struct {
	Args   []string
	Stdout []byte
	Stderr []byte
	Err    error
}

func (e *GitError) Error() string {
	msg := strings.TrimSpace(string(e.Stderr))
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 && len(msg) > 400 {
		msg = msg[i+1:]
	}
	switch {
	case msg == "":
		msg = e.Err.Error()
	case errors.Is(e.Err, ErrKilled):
		msg = e.Err.Error() + " (" + msg + ")"
	}
	return fmt.Sprintf("git %s: %s", strings.Join(e.Args, " "), msg)
}

func (e *GitError) Unwrap() error { return e.Err }

// guardConfig neutralises every piece of repository configuration that can
// make git run a program or reach the network during the operations the
// conductor performs. Per-command flags (--no-ext-diff, --no-textconv) add to
// this where a command supports them.
//
// git never enters a submodule: a submodule's own repository (a .git a
// worker made in a gitlink's folder) has its own configuration, which the
// guards here do not reach, and git would run its filters as the
// conductor. status and diff also pass --ignore-submodules=all where they
// look at a worktree, and the worktree scan (ScanWorktree) removes every
// nested .git before host git runs at all.
var guardConfig = []string{
	"submodule.recurse=false",
	"diff.ignoreSubmodules=all",
	"status.submoduleSummary=false",
	"fetch.recurseSubmodules=false",
	"core.fsmonitor=false",
	"core.hooksPath=/dev/null",
	"core.sshCommand=false",
	"core.askPass=",
	"core.pager=cat",
	"core.editor=false",
	"core.gitProxy=",
	"core.untrackedCache=false",
	"core.quotePath=true",
	"core.autocrlf=false",
	"core.safecrlf=false",
	"credential.helper=",
	"diff.external=",
	"diff.noprefix=false",
	"diff.mnemonicPrefix=false",
	"diff.relative=false",
	"diff.renames=false",
	"color.ui=false",
	"protocol.ext.allow=never",
	"protocol.file.allow=always",
	"gc.auto=0",
	"maintenance.auto=false",
	"advice.detachedHead=false",
	"uploadpack.packObjectsHook=",
	"commit.gpgSign=false",
	"tag.gpgSign=false",
}

// baseEnvNames are the only variables taken from the caller's environment.
var baseEnvNames = []string{"PATH", "TMPDIR", "SYSTEMROOT"}

// Environ returns the environment git runs with.
func (g Git) Environ() []string {
	env := make([]string, 0, 16+len(g.Env))
	for _, name := range baseEnvNames {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	env = append(env,
		"LANG=C", "LC_ALL=C",
		"HOME=/nonexistent",
		"XDG_CONFIG_HOME=/nonexistent",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=/bin/false",
		"SSH_ASKPASS=/bin/false",
		"GIT_NO_REPLACE_OBJECTS=1",
		"GIT_ATTR_NOSYSTEM=1",
		"GIT_PROTOCOL_FROM_USER=0",
		"GIT_OPTIONAL_LOCKS=0",
	)
	return append(env, g.Env...)
}

// Args returns the full argument list (without "git") for a subcommand.
func (g Git) Args(args ...string) []string {
	full := make([]string, 0, 4+2*(len(guardConfig)+len(g.Config))+len(args))
	full = append(full, "--git-dir="+g.GitDir)
	if g.WorkTree != "" {
		full = append(full, "--work-tree="+g.WorkTree)
	}
	for _, c := range guardConfig {
		full = append(full, "-c", c)
	}
	for _, c := range g.Config {
		full = append(full, "-c", c)
	}
	return append(full, args...)
}

// Command builds an *exec.Cmd for streaming use. The caller sets Stdin,
// Stdout and Stderr and must check the error of Wait. The process runs in
// its own process group and is killed with it at its deadline (see
// Timeout) or when ctx ends; its pipes are closed waitDelay after that.
func (g Git) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd, _ := g.command(ctx, args...)
	return cmd
}

// deadline returns ctx bounded by g's timeout (see Timeout).
func (g Git) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	timeout := g.Timeout
	if timeout == 0 {
		if _, ok := ctx.Deadline(); ok {
			return context.WithCancel(ctx)
		}
		timeout = DefaultTimeout
	}
	return context.WithTimeout(ctx, timeout)
}

// command is Command, also returning the context the process is bound to.
// Its cancel function is called when the process is cancelled; a process
// that ends first leaves the context to its deadline (or to ctx's end: Run
// and Start end theirs when the process does).
func (g Git) command(ctx context.Context, args ...string) (*exec.Cmd, context.Context) {
	ctx, cancel := g.deadline(ctx)
	cmd := exec.CommandContext(ctx, "git", g.Args(args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		defer cancel()
		// The whole group: a filter, hook or helper git started must not
		// outlive it. The leader is not reaped yet, so its pgid is ours.
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
	cmd.WaitDelay = waitDelay
	cmd.Env = g.Environ()
	// Run from a neutral directory: git must never discover a repository
	// from the process's working directory.
	if g.WorkTree != "" {
		cmd.Dir = g.WorkTree
	} else {
		cmd.Dir = g.GitDir
	}
	return cmd, ctx
}

// Run runs git and returns its standard output.
func (g Git) Run(ctx context.Context, args ...string) ([]byte, error) {
	return g.RunInput(ctx, nil, args...)
}

// RunInput runs git with stdin and returns its standard output.
func (g Git) RunInput(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd, cctx := g.command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdin = stdin
	cmd.Stdout = &out
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), &GitError{Args: args, Stdout: out.Bytes(), Stderr: errb.Bytes(), Err: killedErr(cctx, err)}
	}
	return out.Bytes(), nil
}

// ErrKilled wraps the error of a git child killed at its deadline or by
// its caller's cancellation.
var ErrKilled = errors.New("killed")

// killedErr is err, or why the process was killed when its context ended.
func killedErr(ctx context.Context, err error) error {
	switch ctx.Err() {
	case nil:
		return err
	case context.DeadlineExceeded:
		return fmt.Errorf("%w: did not finish before its deadline: %w", ErrKilled, context.DeadlineExceeded)
	default:
		return fmt.Errorf("%w: %w", ErrKilled, context.Cause(ctx))
	}
}

// Line runs git and returns its output with surrounding space trimmed.
func (g Git) Line(ctx context.Context, args ...string) (string, error) {
	out, err := g.Run(ctx, args...)
	return strings.TrimSpace(string(out)), err
}

// WithWorkTree returns a copy of g operating on another work tree.
func (g Git) WithWorkTree(dir string) Git { g.WorkTree = dir; return g }

// WithEnv returns a copy of g with extra environment entries.
func (g Git) WithEnv(env ...string) Git {
	g.Env = append(append([]string(nil), g.Env...), env...)
	return g
}
