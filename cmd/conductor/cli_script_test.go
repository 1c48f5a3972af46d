package main

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestScriptCLI runs the command-line behaviour scripts in
// testdata/script/cli: unknown commands, `conductor version`.
func TestScriptCLI(t *testing.T) {
	testscript.Run(t, scriptParams("cli", nil))
}
