package main

import (
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/runtask/sandbox"
)

// TestScriptDoctor runs testdata/script/doctor. The [sandbox] condition is
// true when the bwrap backend works here; without it the scripts that need
// it skip locally and the test fails when CI=true.
func TestScriptDoctor(t *testing.T) {
	_, bwrapErr := sandbox.NewWithOptions(sandbox.BackendBwrap, sandbox.Options{})
	if bwrapErr != nil && os.Getenv("CI") == "true" {
		t.Fatalf("the bwrap sandbox must work in CI: %v", bwrapErr)
	}
	p := scriptParams("doctor", nil)
	p.Condition = func(cond string) (bool, error) {
		if cond == "sandbox" {
			return bwrapErr == nil, nil
		}
		return false, nil
	}
	testscript.Run(t, p)
}
