package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// TestScriptDoctor runs testdata/script/doctor: conductor doctor, and
// run-task with the bwrap sandbox end to end (fakellm plays the model). The [sandbox] condition is
// true when the bwrap backend works here; without it the scripts that need
// it skip locally and the test fails when CI=true. [root]: the conductor
// runs as root (the sandbox then drops to an unprivileged uid).
func TestScriptDoctor(t *testing.T) {
	_, bwrapErr := sandbox.NewWithOptions(sandbox.BackendBwrap, sandbox.Options{})
	if bwrapErr != nil && os.Getenv("CI") == "true" {
		t.Fatalf("the bwrap sandbox must work in CI: %v", bwrapErr)
	}
	p := scriptParams("doctor", map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"fakellm": fakellm.ScriptCmd,
	})
	setup := p.Setup
	p.Setup = func(env *testscript.Env) error {
		if err := setup(env); err != nil {
			return err
		}
		// $REACHABLE: a folder the sandbox uid can reach ($WORK's parent
		// is private to the test user).
		dir, err := os.MkdirTemp("", "conductor-doctor-")
		if err != nil {
			return err
		}
		env.Defer(func() { os.RemoveAll(dir) })
		env.Setenv("REACHABLE", dir)
		return os.Chmod(dir, 0o755)
	}
	p.Condition = func(cond string) (bool, error) {
		switch cond {
		case "sandbox":
			return bwrapErr == nil, nil
		case "root":
			return os.Geteuid() == 0, nil
		}
		return false, fmt.Errorf("unknown condition %q", cond)
	}
	testscript.Run(t, p)
}
