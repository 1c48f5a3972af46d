package main

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/conductor/forge/fakegitea"
)

// TestScriptForge runs testdata/script/forge: pr open, push and the fake
// Gitea, against real git repositories in the script's $WORK.
func TestScriptForge(t *testing.T) {
	testscript.Run(t, scriptParams("forge", map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"fakegitea": fakegitea.ScriptCmd,
	}))
}
