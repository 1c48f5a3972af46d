package sandbox

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
)

// noneBackend runs commands directly on the host: no namespaces, no
// unprivileged user, no hidden .git. It still gives the command exactly
// Spec.Env, never uses a shell, and kills the whole process group when the
// command ends, times out or floods its output. Every run prints a warning.
type noneBackend struct {
	opts Options
}

func (n *noneBackend) Name() string { return "none" }

func (n *noneBackend) Run(ctx context.Context, spec Spec) (Result, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return Result{ExitCode: -1}, fmt.Errorf("sandbox none: empty argv")
	}
	warn := spec.Warn
	if warn == nil {
		warn = n.opts.Warn
	}
	fmt.Fprintf(warn, "conductor: WARNING: sandbox \"none\": running %q in %s with NO isolation: it can read, write and reach everything this user (uid %d) can\n",
		strings.Join(spec.Argv, " "), spec.Dir, geteuid())
	path := spec.Argv[0]
	if !strings.Contains(path, "/") {
		// Look the program up in the command's own PATH, not ours.
		var err error
		if path, err = lookPathIn(path, envValue(spec.Env, "PATH")); err != nil {
			return Result{ExitCode: -1}, fmt.Errorf("sandbox none: %w", err)
		}
	}
	env := append([]string{}, spec.Env...) // non-nil: never inherit ours
	cmd := &exec.Cmd{
		Path:        path,
		Args:        append([]string{}, spec.Argv...),
		Env:         env,
		Dir:         spec.Dir,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	return runner{opts: n.opts}.execute(ctx, cmd, spec)
}

func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}
