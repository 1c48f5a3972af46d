package main

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// TestScriptRuntask runs testdata/script/runtask: run-task and pool against a
// scripted OpenAI-compatible server (fakellm) and real git.
func TestScriptRuntask(t *testing.T) {
	testscript.Run(t, scriptParams("runtask", map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"fakellm": fakellm.ScriptCmd,
	}))
}
