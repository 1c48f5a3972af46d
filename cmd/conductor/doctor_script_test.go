package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/runtask/sandbox"
)

// TestScriptDoctor runs testdata/script/doctor. The [sandbox] condition is
// true when the bwrap backend works here; without it the scripts that need
// it skip locally and the test fails when CI=true. [root]: the conductor
// runs as root (the sandbox then drops to an unprivileged uid).
func TestScriptDoctor(t *testing.T) {
	_, bwrapErr := sandbox.NewWithOptions(sandbox.BackendBwrap, sandbox.Options{})
	if bwrapErr != nil && os.Getenv("CI") == "true" {
		t.Fatalf("the bwrap sandbox must work in CI: %v", bwrapErr)
	}
	p := scriptParams("doctor", nil)
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
