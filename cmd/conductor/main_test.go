package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"conductor": func() {
			setupProcess()
			os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
		},
	})
}

// scriptParams returns the shared testscript setup for the scripts in
// testdata/script/<dir>: an isolated HOME, fixed git identities and dates, a
// data root under $WORK, and the given custom commands (fakellm, fakegitea…).
// Each issue's scripts run through their own Test function calling this.
func scriptParams(dir string, cmds map[string]func(ts *testscript.TestScript, neg bool, args []string)) testscript.Params {
	return testscript.Params{
		Dir:                 filepath.Join("testdata", "script", dir),
		Cmds:                cmds,
		RequireExplicitExec: true,
		UpdateScripts:       os.Getenv("CONDUCTOR_UPDATE") != "",
		Setup: func(env *testscript.Env) error {
			// The sandbox runs commands as an unprivileged uid: it must be
			// able to traverse to the data root's scratch folders.
			for _, d := range []string{filepath.Dir(env.WorkDir), env.WorkDir} {
				if err := os.Chmod(d, 0o755); err != nil {
					return err
				}
			}
			home := filepath.Join(env.WorkDir, ".home")
			if err := os.MkdirAll(home, 0o755); err != nil {
				return err
			}
			env.Setenv("HOME", home)
			env.Setenv("CONDUCTOR_HOME", filepath.Join(env.WorkDir, ".conductor"))
			env.Setenv("GIT_CONFIG_NOSYSTEM", "1")
			env.Setenv("GIT_CONFIG_GLOBAL", filepath.Join(home, ".gitconfig"))
			env.Setenv("GIT_AUTHOR_NAME", "Test Author")
			env.Setenv("GIT_AUTHOR_EMAIL", "author@example.test")
			env.Setenv("GIT_COMMITTER_NAME", "Test Committer")
			env.Setenv("GIT_COMMITTER_EMAIL", "committer@example.test")
			env.Setenv("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
			env.Setenv("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
			return os.WriteFile(filepath.Join(home, ".gitconfig"),
				[]byte("[init]\n\tdefaultBranch = main\n[user]\n\tname = Test\n\temail = test@example.test\n"), 0o644)
		},
	}
}
