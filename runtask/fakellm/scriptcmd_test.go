package fakellm_test

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// TestScriptCmd drives the "fakellm" testscript command the way other
// packages' scripts use it; "post" stands in for the conductor.
func TestScriptCmd(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"fakellm": fakellm.ScriptCmd,
			// post URL BODYFILE: POST BODYFILE to URL/chat/completions, print the answer.
			"post": func(ts *testscript.TestScript, neg bool, args []string) {
				body, err := os.ReadFile(ts.MkAbs(args[1]))
				ts.Check(err)
				resp, err := http.Post(args[0]+"/chat/completions", "application/json", strings.NewReader(string(body)))
				ts.Check(err)
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				ts.Check(err)
				ts.Stdout().Write(b)
			},
		},
	})
}
