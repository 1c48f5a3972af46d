package main

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestScriptPatch runs the patch-id and extract scripts in
// testdata/script/patch.
func TestScriptPatch(t *testing.T) {
	testscript.Run(t, scriptParams("patch", nil))
}
