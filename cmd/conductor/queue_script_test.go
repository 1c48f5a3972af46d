package main

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/conductor/forge/fakegitea"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

func TestScriptQueue(t *testing.T) {
	testscript.Run(t, scriptParams("queue", map[string]func(*testscript.TestScript, bool, []string){
		"fakellm":   fakellm.ScriptCmd,
		"fakegitea": fakegitea.ScriptCmd,
	}))
}
