package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/forge/fakegitea"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// TestScriptForge runs testdata/script/forge: pr open, push and the fake
// Gitea, against real git repositories in the script's $WORK.
func TestScriptForge(t *testing.T) {
	testscript.Run(t, scriptParams("forge", map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"fakegitea":    fakegitea.ScriptCmd,
		"forgeverdict": forgeVerdictCmd,
		"fakellm":      fakellm.ScriptCmd,
	}))
}

// forgeVerdictCmd records a review verdict in the script's bus store, as the
// review step does: forgeverdict REPO BRANCH VERDICT [FINDING...]. The
// verdict binds the branch tip of the repository in REPO.
func forgeVerdictCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: forgeverdict REPO BRANCH VERDICT [FINDING...]")
	}
	cmd := exec.Command("git", "-C", ts.MkAbs(args[0]), "rev-parse", "--verify", "refs/heads/"+args[1])
	cmd.Env = []string{"PATH=" + ts.Getenv("PATH"), "HOME=" + ts.Getenv("HOME"), "GIT_CONFIG_NOSYSTEM=1"}
	out, err := cmd.Output()
	ts.Check(err)
	ctx := context.Background()
	st, err := bus.Open(ctx, bus.Options{DataRoot: filepath.Join(ts.Getenv("WORK"), ".conductor")})
	ts.Check(err)
	defer st.Close()
	_, err = st.PutVerdict(ctx, bus.Verdict{
		RunID: "r-1", WorkRef: "refs/heads/" + args[1], Commit: strings.TrimSpace(string(out)),
		PatchID: "0123abcd", Verdict: args[2], Reviewer: "script", Findings: args[3:],
	})
	ts.Check(err)
}
