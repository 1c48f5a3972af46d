package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/conductor/bus"
)

// mcpDataRoot makes a data root with a one-task backlog.
func mcpDataRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	backlog := filepath.Join(root, "backlog")
	if err := os.MkdirAll(backlog, 0o755); err != nil {
		t.Fatal(err)
	}
	task := `{"taskVersion":1,"id":"t-mcp","prompt":"Write hello.txt.","workspace":"default","capabilities":{"tools":["read","write"]},"session":"s-mcp","timeoutSeconds":600}`
	if err := os.WriteFile(filepath.Join(backlog, "t-mcp.json"), []byte(task), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// conductorCmd is the real conductor binary (the test binary, installed on
// PATH by testscript.Main) with an isolated environment.
func conductorCmd(t *testing.T, root string, args ...string) *exec.Cmd {
	t.Helper()
	bin, err := exec.LookPath("conductor")
	if err != nil {
		t.Fatalf("conductor is not on PATH (testscript.Main installs it): %v", err)
	}
	cmd := exec.Command(bin, append([]string{"--data-root", root}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "CONDUCTOR_HOME=" + root}
	return cmd
}

func callTool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, out any) (bool, string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	text := ""
	if len(res.Content) > 0 {
		if tc, ok := res.Content[0].(*sdk.TextContent); ok {
			text = tc.Text
		}
	}
	if !res.IsError && out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
	return !res.IsError, text
}

type mcpClaim struct {
	RunID      string `json:"runId"`
	LeaseToken string `json:"leaseToken"`
	Holder     string `json:"holder"`
}

// TestMCPStdioProcesses runs two real `conductor mcp` processes over stdio
// on one store: both claim the same task at once, exactly one wins, the
// loser is told who holds it; the winner completes; the store's rows say so.
func TestMCPStdioProcesses(t *testing.T) {
	root := mcpDataRoot(t)
	ctx := context.Background()
	var sessions []*sdk.ClientSession
	for i := range 2 {
		var stderr bytes.Buffer
		cmd := conductorCmd(t, root, "mcp")
		cmd.Stderr = &stderr
		cs, err := sdk.NewClient(&sdk.Implementation{Name: fmt.Sprint("proc-", i), Version: "1"}, nil).
			Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect to conductor mcp: %v\nstderr:\n%s", err, stderr.String())
		}
		t.Cleanup(func() {
			cs.Close()
			if t.Failed() {
				t.Logf("process %d stderr:\n%s", i, stderr.String())
			}
		})
		sessions = append(sessions, cs)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		wins    []mcpClaim
		refusal []string
	)
	for i, cs := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c mcpClaim
			ok, text := callTool(t, cs, "claim_task", map[string]any{"taskId": "t-mcp", "agent": fmt.Sprint("agent-", i)}, &c)
			mu.Lock()
			defer mu.Unlock()
			if ok {
				wins = append(wins, c)
			} else {
				refusal = append(refusal, text)
			}
		}()
	}
	wg.Wait()
	if len(wins) != 1 || len(refusal) != 1 {
		t.Fatalf("winners %+v, refusals %q: want exactly one of each", wins, refusal)
	}
	w := wins[0]
	if want := fmt.Sprintf("refused (task-claimed): task t-mcp is claimed by %s (run %s)", w.Holder, w.RunID); !strings.HasPrefix(refusal[0], want) {
		t.Fatalf("refusal %q, want %q…", refusal[0], want)
	}
	winner := sessions[0]
	if w.Holder == "agent-1" {
		winner = sessions[1]
	}
	if ok, text := callTool(t, winner, "complete_task", map[string]any{"runId": w.RunID, "leaseToken": w.LeaseToken,
		"outcome": "succeeded", "modelAlias": "ide-agent", "promptTokens": 40, "completionTokens": 2, "totalTokens": 42}, nil); !ok {
		t.Fatalf("complete_task: %s", text)
	}
	// The loser's server still serves; its completion of the winner's run
	// without the lease token is refused.
	loser := sessions[1]
	if winner == sessions[1] {
		loser = sessions[0]
	}
	if ok, text := callTool(t, loser, "complete_task", map[string]any{"runId": w.RunID, "leaseToken": "guess",
		"outcome": "failed", "modelAlias": "m"}, nil); ok || !strings.Contains(text, "not-lease-holder") {
		t.Fatalf("completion without the lease: ok=%v %q", ok, text)
	}
	for _, cs := range sessions {
		cs.Close()
	}

	st, err := bus.Open(ctx, bus.Options{DataRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cl, err := st.GetClaim(ctx, "t-mcp")
	if err != nil {
		t.Fatal(err)
	}
	if c := cl.Completion; cl.Claimant != w.RunID || c == nil || c.Outcome != "succeeded" || c.ModelAlias != "ide-agent" || *c.TotalTokens != 42 {
		t.Fatalf("claim row = %+v %+v", cl, cl.Completion)
	}
	run, err := st.GetRun(ctx, w.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != "succeeded" || run.TaskID != "t-mcp" || *run.PromptTokens != 40 || run.FinishedAt.IsZero() {
		t.Fatalf("run row = %+v", run)
	}
	runs, err := st.ListRuns(ctx, bus.RunFilter{TaskID: "t-mcp"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs of t-mcp = %+v, %v (the refused claim must leave none)", runs, err)
	}
}

var listenLine = regexp.MustCompile(`streamable HTTP on (http://\S+)/`)
var tokenLine = regexp.MustCompile(`bearer token \(generated; .*\): (\S+)`)

// TestMCPHTTPProcess runs `conductor mcp --listen 127.0.0.1:0` with no
// token: one is generated and printed to stderr; a request without it gets
// 401, with it the SDK client claims a task.
func TestMCPHTTPProcess(t *testing.T) {
	root := mcpDataRoot(t)
	cmd := conductorCmd(t, root, "mcp", "--listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	var url, token string
	sc := bufio.NewScanner(stderr)
	for (url == "" || token == "") && sc.Scan() {
		if m := listenLine.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
		}
		if m := tokenLine.FindStringSubmatch(sc.Text()); m != nil {
			token = m[1]
		}
	}
	if url == "" || token == "" {
		t.Fatalf("no address or token on stderr (url %q token %q)", url, token)
	}
	go func() {
		for sc.Scan() { // keep the pipe drained
		}
	}()

	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the token: status %d, want 401", resp.StatusCode)
	}

	tr := &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport{token}}}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "http", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var c mcpClaim
	if ok, text := callTool(t, cs, "claim_task", map[string]any{"taskId": "t-mcp", "agent": "over-http"}, &c); !ok || c.Holder != "over-http" {
		t.Fatalf("claim over HTTP: ok=%v %q %+v", ok, text, c)
	}
	if ok, text := callTool(t, cs, "claim_task", map[string]any{"taskId": "t-none", "agent": "over-http"}, nil); ok || !strings.Contains(text, "task-not-found") {
		t.Fatalf("claim of a missing task: ok=%v %q", ok, text)
	}
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestScriptMCP runs testdata/script/mcp: the start refusals (a
// non-loopback --listen without a token, bad flags) and the help.
func TestScriptMCP(t *testing.T) {
	testscript.Run(t, scriptParams("mcp", nil))
}

// TestMCPWorkIsReviewable: an outside agent's work takes the same path as a
// conductor worker's. The claim names the base commit of the workspace's
// repository; a patch that does not apply there is refused and nothing is
// recorded; the patch that applies is completed, and `conductor review`
// takes the run (the work commit it makes has the patch-id the completion
// recorded).
func TestMCPWorkIsReviewable(t *testing.T) {
	root := mcpDataRoot(t)
	repos := filepath.Join(root, "repos")
	repo := filepath.Join(repos, "default")
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	git(repo, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(repo, "README.md"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "Makefile"), []byte("test:\n\ttest -s README.md\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(repo, "add", "README.md", "Makefile")
	git(repo, "commit", "-qm", "start")
	head := git(repo, "rev-parse", "HEAD")

	ctx := context.Background()
	cmd := conductorCmd(t, root, "mcp")
	cmd.Env = append(cmd.Env, "WORKER_REPO_ROOT="+repos)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "outside", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	defer cs.Close()
	var c struct {
		mcpClaim
		BaseCommit string `json:"baseCommit"`
	}
	if ok, text := callTool(t, cs, "claim_task", map[string]any{"taskId": "t-mcp", "agent": "outside"}, &c); !ok {
		t.Fatalf("claim: %s", text)
	}
	if c.BaseCommit != head {
		t.Fatalf("claim's baseCommit %q, want the workspace HEAD %s", c.BaseCommit, head)
	}
	complete := func(diff string) (bool, string) {
		return callTool(t, cs, "complete_task", map[string]any{"runId": c.RunID, "leaseToken": c.LeaseToken,
			"outcome": "succeeded", "modelAlias": "ide-agent", "totalTokens": 9, "patch": diff}, nil)
	}
	stale := "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-goodbye\n+hello, world\n"
	if ok, text := complete(stale); ok || !strings.Contains(text, "refused (patch-does-not-apply)") {
		t.Fatalf("a patch that does not apply: ok=%v %q", ok, text)
	}
	st, err := bus.Open(ctx, bus.Options{DataRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	run, err := st.GetRun(ctx, c.RunID)
	st.Close()
	if err != nil || run.Status != "running" || run.PatchID != "" {
		t.Fatalf("after the refusal the run is %+v, %v: want it still running, with no patch", run, err)
	}

	clone := filepath.Join(root, "clone")
	git(root, "clone", "-q", repo, clone)
	if err := os.WriteFile(filepath.Join(clone, "README.md"), []byte("hello, world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, text := complete(git(clone, "diff") + "\n"); !ok {
		t.Fatalf("complete: %s", text)
	}
	cs.Close()

	rev := conductorCmd(t, root, "review", c.RunID, "--sandbox", "none", "--json")
	var revErr bytes.Buffer
	rev.Stderr = &revErr
	out, err := rev.Output()
	if err != nil {
		t.Fatalf("conductor review %s: %v\n%s%s", c.RunID, err, out, revErr.String())
	}
	var rep struct {
		Base    string `json:"base"`
		PatchID string `json:"patchId"`
		Files   []struct {
			Path string `json:"path"`
		} `json:"files"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("review output: %v\n%s", err, out)
	}
	if rep.Base != head || rep.PatchID == "" || len(rep.Files) != 1 || rep.Files[0].Path != "README.md" {
		t.Fatalf("review report %+v\n%s", rep, out)
	}
}
