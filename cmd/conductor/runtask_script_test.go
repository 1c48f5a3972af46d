package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/runtask"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// TestScriptRuntask runs testdata/script/runtask: run-task and pool against a
// scripted OpenAI-compatible server (fakellm) and real git.
func TestScriptRuntask(t *testing.T) {
	p := scriptParams("runtask", map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"fakellm": fakellm.ScriptCmd,
	})
	pi := os.Getenv("CONDUCTOR_TEST_PI_DIR")
	if pi == "" {
		pi = "/opt/conductor/pi"
	}
	// [pi]: the pi runtime can run here (skipped without it locally; CI
	// installs it, and the runtask package's pi tests fail there without it).
	p.Condition = func(cond string) (bool, error) {
		if cond != "pi" {
			return false, fmt.Errorf("unknown condition %q", cond)
		}
		_, err := runtask.FindPi(pi)
		return err == nil, nil
	}
	setup := p.Setup
	p.Setup = func(env *testscript.Env) error {
		if err := setup(env); err != nil {
			return err
		}
		env.Setenv("CONDUCTOR_PI_DIR", pi)
		// The protocol's shell entry points, run against this test binary.
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			return err
		}
		env.Setenv("SCRIPTS", filepath.Join(root, "scripts"))
		env.Setenv("CONDUCTOR", "conductor")
		// The bwrap sandbox runs commands as an unprivileged uid that must
		// traverse to the worktrees: open the test's own temp folders.
		tmp := filepath.Clean(os.TempDir())
		for dir := env.WorkDir; strings.HasPrefix(dir, tmp+string(filepath.Separator)); dir = filepath.Dir(dir) {
			if err := os.Chmod(dir, 0o755); err != nil {
				return err
			}
		}
		return nil
	}
	testscript.Run(t, p)
}
