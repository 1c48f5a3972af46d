package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/forge/fakegitea"
	"github.com/conductor-dev/conductor/conductor/testenv"
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

// TestScriptForgeReal runs testdata/script/forgereal against this test
// binary's real Gitea (testenv.GiteaServer): the same commands as
// testdata/script/forge, pushing over HTTP to the server itself.
func TestScriptForgeReal(t *testing.T) {
	testenv.GiteaServer(t) // skip (or fail under CI=true) without the build
	testscript.Run(t, scriptParams("forgereal", map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"gitea": giteaCmd,
	}))
}

// giteaCmd is the testscript command "gitea", for the real server:
//
//	gitea start [-repo NAME]... [-issue NAME:TITLE]...
//	    makes a user of the script's own and its (empty) repositories, and
//	    sets OWNER, GITEA_URL, GITEA_TOKEN (scope all) and GITEA_RO_TOKEN
//	    (read-only scopes) in the script's environment.
//	gitea ready NAME      waits until the server no longer calls NAME empty
//	gitea issue NAME TITLE  opens an issue
//	gitea pulls NAME      "count N", then the pull requests, one JSON line
//	                      each: {"number","title","head","base","state","draft"}
func giteaCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: gitea start|ready|issue|pulls ...")
	}
	g := testenv.SharedGitea()
	owner := ts.Getenv("OWNER")
	switch args[0] {
	case "start":
		u, err := g.NewUser(g.Unique("acme"))
		ts.Check(err)
		ro, err := g.NewToken(u, "read:repository", "read:issue", "read:user")
		ts.Check(err)
		ts.Setenv("OWNER", u.Name)
		ts.Setenv("GITEA_URL", g.URL)
		ts.Setenv("GITEA_TOKEN", u.Token)
		ts.Setenv("GITEA_RO_TOKEN", ro)
		for i := 1; i+1 < len(args); i += 2 {
			switch args[i] {
			case "-repo":
				ts.Check(g.NewRepo(u.Name, args[i+1], testenv.RepoOptions{}))
			case "-issue":
				name, title, _ := strings.Cut(args[i+1], ":")
				_, err := g.NewIssue(u.Name, name, title)
				ts.Check(err)
			default:
				ts.Fatalf("gitea start: unknown flag %s", args[i])
			}
		}
	case "ready":
		if len(args) != 2 {
			ts.Fatalf("usage: gitea ready NAME")
		}
		ts.Check(g.WaitNotEmpty(owner + "/" + args[1]))
	case "issue":
		if len(args) != 3 {
			ts.Fatalf("usage: gitea issue NAME TITLE")
		}
		n, err := g.NewIssue(owner, args[1], args[2])
		ts.Check(err)
		fmt.Fprintln(ts.Stdout(), n)
	case "pulls":
		if len(args) != 2 {
			ts.Fatalf("usage: gitea pulls NAME")
		}
		b, err := g.Call("GET", "/api/v1/repos/"+owner+"/"+args[1]+"/pulls?state=all&limit=50", g.AdminToken, nil, 200)
		ts.Check(err)
		var pulls []struct {
			Number int64  `json:"number"`
			Title  string `json:"title"`
			State  string `json:"state"`
			Draft  bool   `json:"draft"`
			Head   struct {
				Ref string `json:"ref"`
			} `json:"head"`
			Base struct {
				Ref string `json:"ref"`
			} `json:"base"`
		}
		ts.Check(json.Unmarshal(b, &pulls))
		fmt.Fprintf(ts.Stdout(), "count %d\n", len(pulls))
		for _, p := range pulls {
			line, _ := json.Marshal(map[string]any{"number": p.Number, "title": p.Title, "head": p.Head.Ref, "base": p.Base.Ref, "state": p.State, "draft": p.Draft})
			fmt.Fprintln(ts.Stdout(), string(line))
		}
	default:
		ts.Fatalf("gitea: unknown subcommand %q", args[0])
	}
}
