package fakegitea

import (
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/rogpeppe/go-internal/testscript"
)

// servers maps a script to its server: testscript commands have no other
// per-script storage. Entries are removed when the script ends.
var servers sync.Map // *testscript.TestScript → *Server

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// ScriptCmd is the testscript command "fakegitea":
//
//	fakegitea start [-token T] [-ro-token T] [-version V] [-wip PREFIX]... [-no-draft-field]
//	                [-repo OWNER/NAME[=BAREDIR]]... [-default BRANCH] [-private]
//	                [-issue OWNER/NAME:TITLE]...
//	    starts a server and sets GITEA_URL (and FAKEGITEA_URL) in the script's
//	    environment; BAREDIR (relative to $WORK) backs the repository's
//	    branches and is served over git smart HTTP at $GITEA_URL/OWNER/NAME.git.
//	fakegitea requests      one line per request: METHOD PATH STATUS [auth=SCHEME]
//	fakegitea count         the number of requests
//	fakegitea pulls OWNER/NAME    the pull requests as JSON lines
//	fakegitea issue OWNER/NAME N  the issue as JSON
//	fakegitea stop
func ScriptCmd(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 0 {
		ts.Fatalf("usage: fakegitea start|requests|count|pulls|issue|stop ...")
	}
	if args[0] == "start" {
		if neg {
			ts.Fatalf("unsupported: ! fakegitea start")
		}
		start(ts, args[1:])
		return
	}
	v, ok := servers.Load(ts)
	if !ok {
		ts.Fatalf("fakegitea: not started")
	}
	s := v.(*Server)
	switch args[0] {
	case "requests":
		for _, r := range s.Requests() {
			line := fmt.Sprintf("%s %s %d", r.Method, r.Path, r.Status)
			if r.Auth != "" {
				line += " auth=" + r.Auth
			}
			fmt.Fprintln(ts.Stdout(), line)
		}
	case "count":
		fmt.Fprintln(ts.Stdout(), len(s.Requests()))
	case "pulls":
		if len(args) != 2 {
			ts.Fatalf("usage: fakegitea pulls OWNER/NAME")
		}
		owner, name, _ := strings.Cut(args[1], "/")
		for _, p := range s.Pulls(owner, name) {
			b, _ := json.Marshal(p)
			fmt.Fprintln(ts.Stdout(), string(b))
		}
	case "issue":
		if len(args) != 3 {
			ts.Fatalf("usage: fakegitea issue OWNER/NAME N")
		}
		owner, name, _ := strings.Cut(args[1], "/")
		n, err := strconv.ParseInt(args[2], 10, 64)
		ts.Check(err)
		is, ok := s.Issue(owner, name, n)
		if !ok {
			ts.Fatalf("fakegitea: no issue %s#%d", args[1], n)
		}
		b, _ := json.Marshal(is)
		fmt.Fprintln(ts.Stdout(), string(b))
	case "stop":
		s.Close()
		servers.Delete(ts)
	default:
		ts.Fatalf("fakegitea: unknown subcommand %q", args[0])
	}
}

func start(ts *testscript.TestScript, args []string) {
	if _, ok := servers.Load(ts); ok {
		ts.Fatalf("fakegitea: already started")
	}
	fs := flag.NewFlagSet("fakegitea start", flag.ContinueOnError)
	var o Options
	var repos, issues, wips multi
	fs.StringVar(&o.Token, "token", "", "the valid token")
	fs.StringVar(&o.ReadToken, "ro-token", "", "a valid token with read-only scopes (writes are 403)")
	fs.StringVar(&o.Version, "version", "", "version string")
	fs.BoolVar(&o.NoDraftField, "no-draft-field", false, "omit draft from pull request JSON")
	fs.Var(&wips, "wip", "work-in-progress prefix (repeatable)")
	fs.Var(&repos, "repo", "OWNER/NAME[=BAREDIR] (repeatable)")
	fs.Var(&issues, "issue", "OWNER/NAME:TITLE (repeatable)")
	def := fs.String("default", "main", "default branch")
	private := fs.Bool("private", false, "repositories are private")
	if err := fs.Parse(args); err != nil {
		ts.Fatalf("fakegitea start: %v", err)
	}
	o.WIPPrefixes = wips
	s := New(o)
	for _, spec := range repos {
		full, dir, _ := strings.Cut(spec, "=")
		owner, name, ok := strings.Cut(full, "/")
		if !ok {
			ts.Fatalf("fakegitea: -repo %q: want OWNER/NAME[=BAREDIR]", spec)
		}
		r := Repo{Owner: owner, Name: name, DefaultBranch: *def, Private: *private}
		if dir != "" {
			r.GitDir = ts.MkAbs(dir)
		}
		s.AddRepo(r)
	}
	for _, spec := range issues {
		full, title, _ := strings.Cut(spec, ":")
		owner, name, _ := strings.Cut(full, "/")
		if _, err := s.AddIssue(owner, name, title); err != nil {
			ts.Fatalf("%v", err)
		}
	}
	servers.Store(ts, s)
	ts.Defer(func() {
		s.Close()
		servers.Delete(ts)
	})
	ts.Setenv("GITEA_URL", s.URL)
	ts.Setenv("FAKEGITEA_URL", s.URL)
}
