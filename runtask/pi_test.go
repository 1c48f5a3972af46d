package runtask_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
	"github.com/conductor-dev/conductor/runtask"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// piDir is where the tests find pi: $CONDUCTOR_TEST_PI_DIR, else the
// folder .ci/run installs it in. Without it the tests skip locally and
// fail when CI=true.
func piDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CONDUCTOR_TEST_PI_DIR")
	if dir == "" {
		dir = "/opt/conductor/pi"
	}
	if _, err := runtask.FindPi(dir); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the pi runtime tests need pi in CI: %v", err)
		}
		t.Skipf("pi not available: %v", err)
	}
	return dir
}

const piKey = "sk-pi-test-4be1d0f0a0c9-KEY"

// piRig runs pi tasks against a scripted server that demands piKey.
type piRig struct {
	e      *escapeEnv
	srv    *fakellm.Server
	reg    *runtask.Registry
	pi     string
	getenv func(string) string
}

func newPiRig(t *testing.T, script string) *piRig {
	t.Helper()
	pi := piDir(t)
	e := newEscapeEnv(t)
	sc, err := fakellm.Parse([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	sc.RequireBearer = piKey
	srv := fakellm.Start(*sc)
	t.Cleanup(srv.Close)
	getenv := func(k string) string {
		if k == "PI_TEST_API_KEY" {
			return piKey
		}
		return e.getenv(k)
	}
	cfg := filepath.Join(e.root, "config.json")
	writeHostFile(t, cfg, `{"models":{"aliases":{"pitest":{"baseURL":"`+srv.URL()+`","model":"scripted","apiKeyEnv":"PI_TEST_API_KEY","maxAttempts":1}}}}`, 0o644)
	reg, err := runtask.LoadRegistry(cfg, getenv)
	if err != nil {
		t.Fatal(err)
	}
	return &piRig{e: e, srv: srv, reg: reg, pi: pi, getenv: getenv}
}

func (p *piRig) run(t *testing.T, session, followUp string) (runrec.Result, string) {
	t.Helper()
	// The seed's task template, with "runtime": "pi".
	task := runtask.Task{TaskVersion: 1, ID: "t-worker-pi", Prompt: "Write a.txt and b.txt as asked.", Workspace: "escape",
		Capabilities: runtask.Capabilities{Tools: []string{"read", "write", "edit", "bash"}}, Session: session,
		TimeoutSeconds: 300, Runtime: runtask.RuntimePi, Model: "pitest"}
	var stderr bytes.Buffer
	res, err := runtask.Run(context.Background(), runtask.Options{
		Task: task, Config: conductor.Config{DataRoot: p.e.data, PiDir: p.pi}, Repo: p.e.repo, Registry: p.reg,
		Role: p.e.role, Sandbox: p.e.sb, Getenv: p.getenv, Stderr: &stderr,
		DeniedEnv: append(secretNames(p.e.secrets), "PI_TEST_API_KEY"), FollowUp: followUp,
	})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	return res, stderr.String()
}

func TestPiRuntime(t *testing.T) {
	// Round 1: a bash call that looks for credentials, a write; round 2
	// (the same session, a follow-up) appends with bash.
	rig := newPiRig(t, `{"mode":"history","model":"scripted","turns":[
	 {"toolCalls":[{"name":"bash","arguments":{"command":"echo hello > a.txt; env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; ls -la / ~ 2>&1"}}],"usage":{"promptTokens":100,"completionTokens":10}},
	 {"toolCalls":[{"name":"write","arguments":{"path":"b.txt","content":"bee\n"}}],"usage":{"promptTokens":120,"completionTokens":12}},
	 {"content":"done","usage":{"promptTokens":130,"completionTokens":3}},
	 {"toolCalls":[{"name":"bash","arguments":{"command":"cat a.txt >> b.txt"}}],"usage":{"promptTokens":200,"completionTokens":20}},
	 {"content":"done again","usage":{"promptTokens":210,"completionTokens":5}}
	]}`)
	res, stderr := rig.run(t, "pi-1", "")
	if res.Status != runrec.StatusSucceeded {
		t.Fatalf("round 1: %s %s\n%s", res.Status, res.Error, stderr)
	}
	if res.TotalTokens == nil || *res.TotalTokens != 375 || res.ModelAlias != "pitest" || res.Steps != 3 {
		t.Fatalf("round 1 receipt: tokens %v (want 375, the server's usage) alias %q steps %d", res.TotalTokens, res.ModelAlias, res.Steps)
	}
	dir := runrec.Dir((conductor.Config{DataRoot: rig.e.data}).RunDir(res.RunID))
	patch, _ := os.ReadFile(dir.Path(runrec.PatchFile))
	for _, want := range []string{"+++ b/a.txt", "+hello", "+++ b/b.txt", "+bee"} {
		if !strings.Contains(string(patch), want) {
			t.Fatalf("round 1 patch lacks %q:\n%s", want, patch)
		}
	}
	transcript, _ := os.ReadFile(dir.Path(runrec.TranscriptFile))
	for _, want := range []string{`"type":"model"`, `"type":"tool_call"`, `"tool":"bash"`, `"type":"tool_result"`, "Successfully wrote"} {
		if !strings.Contains(string(transcript), want) {
			t.Fatalf("normalised transcript lacks %s:\n%s", want, transcript)
		}
	}
	if _, err := os.Stat(dir.Path(runtask.PiEventsFile)); err != nil {
		t.Fatalf("pi's own events are not kept: %v", err)
	}

	res2, stderr := rig.run(t, "pi-1", "Now append a.txt to b.txt.")
	if res2.Status != runrec.StatusSucceeded || res2.RunID == res.RunID {
		t.Fatalf("round 2: %s %s\n%s", res2.Status, res2.Error, stderr)
	}
	reqs := rig.srv.ChatRequests()
	last := reqs[len(reqs)-1]
	if !strings.Contains(string(mustJSONText(t, last)), "Successfully wrote 4 bytes") || !strings.Contains(string(mustJSONText(t, last)), "Now append") {
		t.Fatalf("round 2 did not continue round 1's conversation: %s", mustJSONText(t, last))
	}
	dir2 := runrec.Dir((conductor.Config{DataRoot: rig.e.data}).RunDir(res2.RunID))
	patch2, _ := os.ReadFile(dir2.Path(runrec.PatchFile))
	if !strings.Contains(string(patch2), "+bee\n+hello") {
		t.Fatalf("round 2 patch:\n%s", patch2)
	}
	if res2.TotalTokens == nil || *res2.TotalTokens != 435 {
		t.Fatalf("round 2 tokens %v, want 435", res2.TotalTokens)
	}

	// The key and the conductor's secrets appear nowhere the worker or the
	// model could see: not in what the model was sent (the bash output of
	// env and /proc), not in the run folders, the session, the worktree.
	secrets := []string{piKey}
	for _, v := range rig.e.secrets {
		secrets = append(secrets, v)
	}
	for _, r := range rig.srv.Requests() {
		for _, s := range secrets {
			if strings.Contains(string(r.Raw), s) {
				t.Fatalf("a secret reached the model in request %d", r.Index)
			}
		}
	}
	if !strings.Contains(string(mustJSONText(t, reqs[1])), "HOME=") {
		t.Fatalf("the bash tool's env output did not reach the model (the check above would prove nothing): %s", mustJSONText(t, reqs[1]))
	}
	for _, root := range []string{rig.e.data, rig.e.repo} {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, s := range secrets {
				if bytes.Contains(b, []byte(s)) {
					t.Errorf("a secret is in %s", p)
				}
			}
			return nil
		})
	}
}

func mustJSONText(t *testing.T, req *fakellm.ChatRequest) string {
	t.Helper()
	return req.Text()
}

func TestPiRuntimeModelError(t *testing.T) {
	// pi exits 0 when the model failed: the run must say failed.
	rig := newPiRig(t, `[{"error":{"status":400,"message":"context length exceeded"}}]`)
	res, _ := rig.run(t, "pi-err", "")
	if res.Status != runrec.StatusFailed || !strings.Contains(res.Error, "context length exceeded") {
		t.Fatalf("status %s error %q", res.Status, res.Error)
	}
	if n := len(rig.srv.ChatRequests()); n != 1 {
		t.Fatalf("pi retried behind conductor's back: %d requests", n)
	}
}

func TestPiRuntimeStepLimit(t *testing.T) {
	turns := strings.Repeat(`{"toolCalls":[{"name":"bash","arguments":{"command":"true"}}]},`, 40)
	rig := newPiRig(t, `[`+strings.TrimSuffix(turns, ",")+`]`)
	task := runtask.Task{TaskVersion: 1, ID: "t-pi-steps", Prompt: "loop", Workspace: "escape",
		Capabilities: runtask.Capabilities{Tools: []string{"bash"}}, Session: "pi-steps", TimeoutSeconds: 300,
		Runtime: runtask.RuntimePi, Model: "pitest", MaxSteps: 3}
	res, err := runtask.Run(context.Background(), runtask.Options{
		Task: task, Config: conductor.Config{DataRoot: rig.e.data, PiDir: rig.pi}, Repo: rig.e.repo, Registry: rig.reg,
		Role: rig.e.role, Sandbox: rig.e.sb, Getenv: rig.getenv,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != runrec.StatusBudget || !strings.Contains(res.Error, "step limit of 3") {
		t.Fatalf("status %s error %q", res.Status, res.Error)
	}
	if n := len(rig.srv.ChatRequests()); n != 3 {
		t.Fatalf("the upstream saw %d requests, want 3", n)
	}
}

func TestPiRuntimeUnavailable(t *testing.T) {
	// No pi where it is looked for: refused before anything is created.
	data := t.TempDir()
	pol, err := policy.LoadFS(roles.FS, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	impl, err := pol.Role("implementer")
	if err != nil {
		t.Fatal(err)
	}
	task := runtask.Task{TaskVersion: 1, ID: "t-pi-missing", Prompt: "x", Workspace: "w",
		Capabilities: runtask.Capabilities{Tools: []string{"read"}}, Session: "s", TimeoutSeconds: 60, Runtime: runtask.RuntimePi}
	_, err = runtask.Run(context.Background(), runtask.Options{
		Task: task, Config: conductor.Config{DataRoot: data, PiDir: filepath.Join(data, "no-pi")}, Repo: t.TempDir(), Role: impl,
	})
	var ref *refusal.Refusal
	if !errors.As(err, &ref) || ref.Code != "runtime-unavailable" || !strings.Contains(err.Error(), "pi is not installed") {
		t.Fatalf("err %v", err)
	}
	if entries, _ := os.ReadDir(data); len(entries) != 0 {
		t.Fatalf("a refused run left %v in the data root", entries)
	}
}

func TestPiRuntimeEscapes(t *testing.T) {
	// pi's bash tool is a worker command like any other: everything it
	// tries happens inside the sandbox.
	probe := `{"toolCalls":[{"name":"bash","arguments":{"command":%q}}]}`
	rig := newPiRig(t, `[{"content":"x"}]`) // its server is replaced below, once the rig's paths are known
	e := rig.e
	cmds := []string{
		"echo escaped > " + e.marker("pi-marker") + "; echo escaped > /tmp/../" + e.markers + "/pi-marker2",
		"cat " + e.rootSecretFile + " " + e.hiddenFile + "; cat " + rig.pi + "/../../../etc/shadow",
		"(exec 3<>/dev/tcp/127.0.0.1/" + portOf(e.ln.Addr().String()) + ") && echo reached-host",
		"echo owned > ../escape-sibling; ls -la /work /proc/1/root 2>&1 | head -5; mkdir -p .git/hooks 2>&1",
		"sleep 3333.3 & disown; setsid sleep 3333.3 & echo bg",
	}
	var turns []string
	for _, c := range cmds {
		b, _ := json.Marshal(c)
		turns = append(turns, strings.Replace(probe, "%q", string(b), 1))
	}
	turns = append(turns, `{"content":"tried"}`)
	sc, err := fakellm.Parse([]byte("[" + strings.Join(turns, ",") + "]"))
	if err != nil {
		t.Fatal(err)
	}
	sc.RequireBearer = piKey
	srv := fakellm.Start(*sc)
	t.Cleanup(srv.Close)
	cfg := filepath.Join(e.root, "config-escape.json")
	writeHostFile(t, cfg, `{"models":{"aliases":{"pitest":{"baseURL":"`+srv.URL()+`","model":"scripted","apiKeyEnv":"PI_TEST_API_KEY","maxAttempts":1}}}}`, 0o644)
	if rig.reg, err = runtask.LoadRegistry(cfg, rig.getenv); err != nil {
		t.Fatal(err)
	}
	rig.srv = srv
	res, stderr := rig.run(t, "pi-escape", "")
	if res.Status != runrec.StatusSucceeded {
		t.Fatalf("%s %s\n%s", res.Status, res.Error, stderr)
	}
	if got := foundUnder(e.markers, "pi-marker", "pi-marker2"); len(got) > 0 {
		t.Errorf("a pi command wrote outside the sandbox: %v", got)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(e.repo), "escape-sibling")); err == nil {
		t.Errorf("a pi command wrote beside the worktree")
	}
	if n := e.hits.Load(); n > 0 {
		t.Errorf("a pi command reached the host's listener %d times", n)
	}
	// What the commands printed: the tool results of the last request.
	all := ""
	reqs := srv.ChatRequests()
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "tool" {
			all += string(m.Content) + "\n"
		}
	}
	for _, leak := range []string{"root-only-secret-content", "hidden-secret-content", "reached-host", "root:"} {
		if strings.Contains(all, leak) {
			t.Errorf("the model saw %q", leak)
		}
	}
	if !strings.Contains(all, "bg") {
		t.Fatalf("the probes did not run (the checks above prove nothing): %s", all)
	}
	if pids := pidsWith("3333.3"); len(pids) > 0 {
		t.Errorf("pi's background commands outlived the round: %v", pids)
	}
}

func TestRolePicksRuntime(t *testing.T) {
	// A role that says "runtime": "pi" makes its tasks pi tasks (here: no
	// pi installed, so refused before anything is created).
	dir := t.TempDir()
	writeHostFile(t, filepath.Join(dir, "pi-coder.json"), `{"contractVersion": 1, "role": "pi-coder", "harness": "code", "systemPrompt": "x",
		"tools": ["read_file"], "sandbox": "bwrap", "runtime": "pi", "limits": {}}`, 0o644)
	pol, err := policy.Load(roles.FS, dir)
	if err != nil {
		t.Fatal(err)
	}
	role, err := pol.Role("pi-coder")
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	task := runtask.Task{TaskVersion: 1, ID: "t-role-pi", Prompt: "x", Workspace: "w",
		Capabilities: runtask.Capabilities{Tools: []string{"read"}}, Session: "s", TimeoutSeconds: 60}
	_, err = runtask.Run(context.Background(), runtask.Options{Task: task, Role: role, Repo: t.TempDir(),
		Config: conductor.Config{DataRoot: data, PiDir: filepath.Join(data, "no-pi")}})
	var ref *refusal.Refusal
	if !errors.As(err, &ref) || ref.Code != "runtime-unavailable" {
		t.Fatalf("err %v", err)
	}
}

// fakePi installs a stand-in for pi whose CLI is script (node), under a
// folder the sandbox's uid can read.
func fakePi(t *testing.T, root, script string) string {
	t.Helper()
	prefix := filepath.Join(root, "fake-pi")
	pkg := filepath.Join(prefix, "node_modules", "@mariozechner", "pi-coding-agent")
	if err := os.MkdirAll(filepath.Join(pkg, "dist"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeHostFile(t, filepath.Join(pkg, "package.json"), `{"name":"@mariozechner/pi-coding-agent","version":"`+runtask.PiVersion+`","bin":{"pi":"dist/cli.js"}}`, 0o644)
	writeHostFile(t, filepath.Join(pkg, "dist", "cli.js"), script, 0o644)
	for d := prefix; d != root; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	return prefix
}

func TestPiRuntimeCrashAndHang(t *testing.T) {
	piDir(t) // node and the rest as for real pi
	for _, tc := range []struct {
		name, script, status, want string
		timeout                    int
	}{
		{"crash with garbage", `console.log("this is not JSON"); console.error("pi: fatal: boom"); process.exit(3)`,
			runrec.StatusFailed, "pi exited with status 3: pi: fatal: boom", 300},
		{"exits 0 without finishing", `console.log("{\"type\":\"session\"}"); process.exit(0)`,
			runrec.StatusFailed, "no agent_end event", 300},
		{"hangs", `setInterval(() => {}, 1000)`, runrec.StatusTimeout, "wall-clock limit of 3s", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := newPiRig(t, `[{"content":"x"}]`)
			prefix := fakePi(t, rig.e.root, tc.script)
			task := runtask.Task{TaskVersion: 1, ID: "t-pi-bad", Prompt: "x", Workspace: "escape",
				Capabilities: runtask.Capabilities{Tools: []string{"read", "bash"}}, Session: "pi-bad-" + strings.ReplaceAll(tc.name, " ", "-"),
				TimeoutSeconds: tc.timeout, Runtime: runtask.RuntimePi, Model: "pitest"}
			res, err := runtask.Run(context.Background(), runtask.Options{Task: task,
				Config: conductor.Config{DataRoot: rig.e.data, PiDir: prefix}, Repo: rig.e.repo, Registry: rig.reg,
				Role: rig.e.role, Sandbox: rig.e.sb, Getenv: rig.getenv})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.status || !strings.Contains(res.Error, tc.want) {
				t.Fatalf("status %s error %q; want %s %q", res.Status, res.Error, tc.status, tc.want)
			}
			// The worktree went back to the pool, and nothing of the
			// round is left beside the run.
			if res.Worktree != "" {
				t.Fatalf("the worktree was kept: %s", res.Worktree)
			}
			if left, _ := filepath.Glob(filepath.Join(rig.e.data, "scratch", "*")); len(left) > 0 {
				t.Fatalf("the round left %v", left)
			}
		})
	}
}
