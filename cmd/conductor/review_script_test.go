package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// TestScriptReview runs the review and policy scripts in
// testdata/script/review: worker run → review → verdict, findings and
// refusals, redispatch, policy check/show.
func TestScriptReview(t *testing.T) {
	testscript.Run(t, scriptParams("review", map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"fakellm": fakellm.ScriptCmd,
		"verdict": verdictCmd,
	}))
}

// verdictCmd is the script command "verdict WORKREF": it prints the latest
// verdict on WORKREF from the embedded store under $CONDUCTOR_HOME as JSON,
// or "none". (No CLI command shows verdicts; land reads them.)
func verdictCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: verdict WORKREF")
	}
	s, err := bus.Open(context.Background(), bus.Options{DataRoot: ts.Getenv("CONDUCTOR_HOME")})
	ts.Check(err)
	defer s.Close()
	v, err := s.LatestVerdict(context.Background(), args[0])
	if errors.Is(err, bus.ErrNotFound) {
		fmt.Fprintln(ts.Stdout(), "none")
		return
	}
	ts.Check(err)
	b, err := json.Marshal(v)
	ts.Check(err)
	fmt.Fprintln(ts.Stdout(), string(b))
}
