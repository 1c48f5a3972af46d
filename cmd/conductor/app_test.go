package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
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
	} {
		var out, errb bytes.Buffer
		if got := run(tc.args, strings.NewReader(""), &out, &errb); got != tc.want {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, got, tc.want, errb.String())
		}
	}
}
