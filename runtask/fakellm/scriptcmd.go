package fakellm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/rogpeppe/go-internal/testscript"
)

// running maps a test script to its servers, keyed by the variable holding
// their URL. Entries are removed when the script ends.
var running = struct {
	sync.Mutex
	m map[*testscript.TestScript]map[string]*Server
}{m: map[*testscript.TestScript]map[string]*Server{}}

// ScriptCmd is the testscript command "fakellm". Register it in
// testscript.Params.Cmds as "fakellm":
//
//	fakellm start [-env NAME] SCRIPT.json   start a server for the rest of the script;
//	                                        sets $NAME (default FAKELLM_URL) to its /v1 base URL
//	fakellm requests [-env NAME] FILE       write every request received as JSON lines to FILE
//	                                        ({"index","method","path","header","raw","body","turn","status"})
//	fakellm check [-env NAME] [-all]        fail on any unmet expect/expectLast/forbid;
//	                                        -all: also fail when a scripted turn was never played
//	fakellm stop [-env NAME]                stop the server (it is stopped at the end anyway)
//
// With "!", check succeeds only when it would have failed.
func ScriptCmd(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 0 {
		ts.Fatalf("usage: fakellm start|requests|check|stop [-env NAME] ...")
	}
	sub, args := args[0], args[1:]
	env := "FAKELLM_URL"
	all := false
	var rest []string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-env" && i+1 < len(args):
			env = args[i+1]
			i++
		case args[i] == "-all" && sub == "check":
			all = true
		default:
			rest = append(rest, args[i])
		}
	}
	if neg && sub != "check" {
		ts.Fatalf("fakellm %s: unsupported with !", sub)
	}
	switch sub {
	case "start":
		if len(rest) != 1 {
			ts.Fatalf("usage: fakellm start [-env NAME] SCRIPT.json")
		}
		script, err := Load(ts.MkAbs(rest[0]))
		ts.Check(err)
		srv := Start(*script)
		running.Lock()
		servers := running.m[ts]
		if servers == nil {
			servers = map[string]*Server{}
			running.m[ts] = servers
			ts.Defer(func() {
				running.Lock()
				defer running.Unlock()
				for _, s := range running.m[ts] {
					s.Close()
				}
				delete(running.m, ts)
			})
		}
		old := servers[env]
		servers[env] = srv
		running.Unlock()
		if old != nil {
			old.Close()
		}
		ts.Setenv(env, srv.URL())
	case "requests":
		if len(rest) != 1 {
			ts.Fatalf("usage: fakellm requests [-env NAME] FILE")
		}
		srv := lookup(ts, env)
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		for _, r := range srv.Requests() {
			ts.Check(enc.Encode(r))
		}
		ts.Check(os.WriteFile(ts.MkAbs(rest[0]), buf.Bytes(), 0o644))
	case "check":
		if len(rest) != 0 {
			ts.Fatalf("usage: fakellm check [-env NAME] [-all]")
		}
		srv := lookup(ts, env)
		var problems []string
		for _, m := range srv.Mismatches() {
			problems = append(problems, m.String())
		}
		if all {
			for _, i := range srv.Unplayed() {
				problems = append(problems, fmt.Sprintf("turn %d was never played", i))
			}
		}
		switch {
		case neg && len(problems) == 0:
			ts.Fatalf("fakellm check: no mismatch, but one was expected")
		case neg:
			ts.Logf("fakellm check (expected to fail):\n%s", strings.Join(problems, "\n"))
		case len(problems) > 0:
			ts.Fatalf("fakellm check:\n%s", strings.Join(problems, "\n"))
		}
	case "stop":
		running.Lock()
		srv := running.m[ts][env]
		delete(running.m[ts], env)
		running.Unlock()
		if srv == nil {
			ts.Fatalf("fakellm stop: no server for $%s", env)
		}
		srv.Close()
	default:
		ts.Fatalf("fakellm: unknown subcommand %q (start, requests, check, stop)", sub)
	}
}

func lookup(ts *testscript.TestScript, env string) *Server {
	running.Lock()
	defer running.Unlock()
	srv := running.m[ts][env]
	if srv == nil {
		ts.Fatalf("fakellm: no server for $%s; run fakellm start first", env)
	}
	return srv
}
