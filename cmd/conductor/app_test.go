package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/patch/git"
)

// TestEveryCommandHasVersionAndExitStatus walks the whole command tree:
// every command answers --version (exit 0) and its --help ends with the
// EXIT STATUS section.
func TestEveryCommandHasVersionAndExitStatus(t *testing.T) {
	var paths [][]string
	var walk func(prefix []string, cmds []*cli.Command)
	walk = func(prefix []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Name == "help" {
				continue
			}
			p := append(append([]string(nil), prefix...), c.Name)
			paths = append(paths, p)
			walk(p, c.Subcommands)
		}
	}
	walk(nil, newApp(&deps{}).Commands)
	if len(paths) < 20 {
		t.Fatalf("only %d commands found", len(paths))
	}
	for _, p := range paths {
		name := strings.Join(p, " ")
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append(append([]string{"conductor"}, p...), "--version")
			if code := run(args, strings.NewReader(""), &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "conductor version ") {
				t.Errorf("%s --version: exit %d, stdout %q, stderr %q", name, code, out.String(), errb.String())
			}
			out.Reset()
			errb.Reset()
			args = append(append([]string{"conductor"}, p...), "--help")
			if code := run(args, strings.NewReader(""), &out, &errb); code != 0 || !strings.Contains(out.String(), "EXIT STATUS:\n   0   ok") {
				t.Errorf("%s --help: exit %d, no EXIT STATUS section:\n%s%s", name, code, out.String(), errb.String())
			}
		})
	}
}

// TestExitCodes checks the one error → exit status map.
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"conductor", "--bogus"}, exitUsage},
		{[]string{"conductor", "land", "--bogus"}, exitUsage},
		{[]string{"conductor", "land"}, exitUsage},
		{[]string{"conductor", "extract"}, exitUsage},
		{[]string{"conductor", "patch-id", "--stable", "--unstable"}, exitUsage},
		{[]string{"conductor", "worker", "--finishing", "-1", "--dry-run"}, exitUsage},
		{[]string{"conductor", "worker", "--prefetch", "-1", "--dry-run"}, exitUsage},
	} {
		var out, errb bytes.Buffer
		if got := run(tc.args, strings.NewReader(""), &out, &errb); got != tc.want {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, got, tc.want, errb.String())
		}
	}
}

// TestExitCodeNeverLeaks: only 0/1/2/3/130 leave conductor, whatever a child
// process exited with and however deeply its error is wrapped.
func TestExitCodeNeverLeaks(t *testing.T) {
	gitErr := func(code int) error {
		err := exec.Command("sh", "-c", fmt.Sprintf("exit %d", code)).Run()
		if err == nil {
			t.Fatalf("sh exit %d: no error", code)
		}
		return &git.GitError{Args: []string{"update-ref"}, Err: err}
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"git 128", gitErr(128), exitError},
		{"git 128 wrapped twice", fmt.Errorf("land d-1: %w", fmt.Errorf("move main: %w", gitErr(128))), exitError},
		{"git 1", gitErr(1), exitError},
		{"git 2 (not a usage error)", gitErr(2), exitError},
		{"git 3 (not a refusal)", gitErr(3), exitError},
		{"git 130 (not an interrupt)", gitErr(130), exitError},
		{"bare exec.ExitError 255", exec.Command("sh", "-c", "exit 255").Run(), exitError},
		{"cli.Exit 42", cli.Exit("x", 42), exitError},
		{"cli.Exit 3 wrapped", fmt.Errorf("x: %w", cli.Exit("x", 3)), exitError},
		{"joined with git 128", errors.Join(errors.New("a"), gitErr(128)), exitError},
		{"silent refused", &silentError{code: exitRefused}, exitRefused},
		{"silent interrupted", &silentError{code: exitInterrupted}, exitInterrupted},
		{"silent bogus 99", &silentError{code: 99}, exitError},
		{"refusal", fmt.Errorf("land: %w", refusal.New("x", "y", "z")), exitRefused},
		{"usage", usagef("bad"), exitUsage},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), exitInterrupted},
		{"plain", errors.New("boom"), exitError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := exitCode(ctx, tc.err); got != tc.want {
				t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

func TestEveryCommandHasExamples(t *testing.T) {
	app := newApp(&deps{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }})
	var walk func(parent string, cmds []*cli.Command)
	walk = func(parent string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			p := commandPath(parent, c)
			if len(examples[p]) == 0 {
				t.Errorf("conductor %s has no EXAMPLES (add them to examples.go)", p)
			}
			walk("conductor "+p, c.Subcommands)
		}
	}
	walk("conductor", app.Commands)
	for p := range examples {
		found := p == ""
		for _, c := range app.Commands {
			if strings.HasPrefix(p+" ", c.Name+" ") {
				found = true
			}
		}
		if !found {
			t.Errorf("examples for %q name no command", p)
		}
	}
}
