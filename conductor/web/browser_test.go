package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/queue"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/conductor/web"
	"github.com/conductor-dev/conductor/land"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
	"github.com/conductor-dev/conductor/runtask"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// chromium finds the browser: $CONDUCTOR_TEST_CHROMIUM, else Debian's
// chromium. Absent: the test skips, or fails when CI=true.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CONDUCTOR_TEST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (apt-get install chromium); CI must run the browser test")
	}
	t.Skip("chromium is not installed (apt-get install chromium)")
	return ""
}

// gitT runs git for the test's own repository, isolated from the host's
// configuration, with fixed names and dates.
func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=T", "GIT_AUTHOR_EMAIL=t@example.test",
		"GIT_COMMITTER_NAME=T", "GIT_COMMITTER_EMAIL=t@example.test",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// gatedModel holds the model's reply at turn `at` until release is closed:
// the run stays in progress, mid-conversation, for as long as the test wants.
type gatedModel struct {
	inner   runtask.ModelClient
	at      int
	waiting chan struct{} // closed when the gated turn is asked for
	release chan struct{}
	mu      sync.Mutex
	n       int
}

func (m *gatedModel) Complete(ctx context.Context, req runtask.ModelRequest) (runtask.ModelReply, error) {
	m.mu.Lock()
	n := m.n
	m.n++
	m.mu.Unlock()
	if n == m.at {
		close(m.waiting)
		select {
		case <-m.release:
		case <-ctx.Done():
			return runtask.ModelReply{}, ctx.Err()
		}
	}
	return m.inner.Complete(ctx, req)
}

type browserEnv struct {
	t      *testing.T
	root   string
	repo   string
	data   string
	cfg    conductor.Config
	store  bus.Store
	pol    *policy.Policy
	role   *policy.Role
	sb     sandbox.Sandbox
	getenv func(string) string
}

func newBrowserEnv(t *testing.T) *browserEnv {
	t.Helper()
	root := t.TempDir()
	e := &browserEnv{t: t, root: root, repo: filepath.Join(root, "repo"), data: filepath.Join(root, "data")}
	must(t, os.MkdirAll(filepath.Join(e.repo, "lib"), 0o755))
	must(t, os.WriteFile(filepath.Join(e.repo, "lib", "util.go"), []byte("package lib\n\nconst Answer = 41\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(e.repo, "README.md"), []byte("# demo\n"), 0o644))
	gitT(t, e.repo, "init", "-q", "-b", "main")
	gitT(t, e.repo, "add", "-A")
	gitT(t, e.repo, "commit", "-q", "-m", "initial")

	// The role and a landing policy without a gate (nothing to build here).
	rolesDir := filepath.Join(root, "roles")
	must(t, os.MkdirAll(rolesDir, 0o755))
	must(t, os.WriteFile(filepath.Join(rolesDir, "tester.json"), []byte(`{
  "contractVersion": 1, "role": "tester", "harness": "code",
  "systemPrompt": "You are the tester role.",
  "tools": ["read_file", "write_file", "edit_file", "grep", "list_dir"],
  "write": {"allow": ["**"]}, "sandbox": "none", "limits": {"maxSteps": 20}
}`), 0o644))
	must(t, os.WriteFile(filepath.Join(rolesDir, policy.PolicyFile), []byte(`{
  "policyVersion": 1,
  "landing": {"targets": ["main"], "requiredOption": "merge", "requiredVerdict": "approve", "gate": []},
  "review": {"syntaxChecks": []}
}`), 0o644))
	var err error
	e.pol, err = policy.Load(roles.FS, rolesDir)
	must(t, err)
	e.role, err = e.pol.Role("tester")
	must(t, err)
	env := map[string]string{"PATH": os.Getenv("PATH"), "HOME": filepath.Join(root, "home")}
	e.getenv = func(k string) string { return env[k] }
	e.sb, err = sandbox.NewWithOptions(sandbox.BackendNone, sandbox.Options{Warn: io.Discard})
	must(t, err)
	every := 1
	e.cfg = conductor.Config{DataRoot: e.data, CheckpointEvery: &every}.WithDefaults()
	e.store, err = bus.Open(context.Background(), bus.Options{DataRoot: e.data})
	must(t, err)
	t.Cleanup(func() { e.store.Close() })
	return e
}

// run plays a scripted conversation through the real worker loop.
func (e *browserEnv) run(ctx context.Context, session string, model func(runtask.ModelClient) runtask.ModelClient, turns ...fakellm.Turn) (runrec.Result, error) {
	srv := fakellm.Start(fakellm.Script{Model: "qwen2.5-coder:7b", Turns: turns})
	defer srv.Close()
	client, err := runtask.NewClient(runtask.ModelSpec{Alias: "ollama-qwen", BaseURL: srv.URL(), Model: "qwen2.5-coder:7b",
		Timeout: time.Minute, MaxAttempts: 1, RetryBase: time.Millisecond, RetryMax: time.Millisecond}, e.getenv)
	if err != nil {
		return runrec.Result{}, err
	}
	if model != nil {
		client = model(client)
	}
	task := runtask.Task{TaskVersion: 1, ID: "t-" + session, Prompt: "Make the answer 42.", Workspace: "repo",
		Capabilities: runtask.Capabilities{Tools: []string{"read", "write", "edit"}}, Session: session, TimeoutSeconds: 600,
		Harness: "code", MaxSteps: 20}
	return runtask.Run(ctx, runtask.Options{Task: task, Config: e.cfg, Repo: e.repo, Model: client, ModelName: "qwen2.5-coder:7b",
		ModelAlias: "ollama-qwen", Role: e.role, Sandbox: e.sb, Store: e.store, Getenv: e.getenv, Stderr: io.Discard})
}

func args(t *testing.T, v map[string]any) json.RawMessage {
	b, err := json.Marshal(v)
	must(t, err)
	return b
}

// TestBrowser drives mission control in headless Chromium against a store
// filled by real scripted runs, a real review and a real landing.
func TestBrowser(t *testing.T) {
	exe := chromium(t)
	e := newBrowserEnv(t)
	ctx := context.Background()

	// A finished run, reviewed, approved, a merge decision raised.
	done, rep := e.reviewed(ctx)
	decision := rep.Decision.ID

	// A run in progress: held before its second model turn.
	gate := &gatedModel{at: 1, waiting: make(chan struct{}), release: make(chan struct{})}
	liveDone := make(chan runrec.Result, 1)
	runCtx, stopRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopRun(); wg.Wait() }() // the worker ends before the test does
	wg.Add(1)
	go func() {
		defer wg.Done()
		res, err := e.run(runCtx, "s-live", func(c runtask.ModelClient) runtask.ModelClient { gate.inner = c; return gate },
			fakellm.Turn{Name: "list", ToolCalls: []fakellm.ToolCall{{ID: "call_1", Name: "list_dir", Arguments: args(t, map[string]any{"path": "lib"})}}},
			fakellm.Turn{Name: "read", ToolCalls: []fakellm.ToolCall{{ID: "call_2", Name: "read_file", Arguments: args(t, map[string]any{"path": "README.md"})}}},
			fakellm.Turn{Name: "done", Content: "Nothing to change."})
		if err != nil {
			t.Errorf("live run: %v", err)
		}
		liveDone <- res
	}()
	select {
	case <-gate.waiting:
	case res := <-liveDone:
		t.Fatalf("the live run ended before its gated turn: %+v", res)
	}
	var liveID string
	runs, err := e.store.ListRuns(ctx, bus.RunFilter{Status: runrec.StatusRunning})
	must(t, err)
	if len(runs) != 1 {
		t.Fatalf("running runs: %+v", runs)
	}
	liveID = runs[0].ID
	// A job a worker dead-lettered (its role has no contract), then one
	// waiting; and the worker's heartbeat and a model slot it holds.
	q := &queue.Embedded{Store: e.store, Key: "tasks", Consumer: "host1:4242:1", MaxAttempt: 3, Lease: time.Minute}
	deadJob := []byte(`{"runId":"r-retry-me","task":{"taskVersion":1,"id":"t-retry","role":"nobody"}}`)
	must(t, q.Push(ctx, deadJob))
	dl, err := q.Take(ctx, time.Second)
	must(t, err)
	if dl == nil {
		t.Fatal("no job to dead-letter")
	}
	must(t, q.Bury(ctx, dl, errors.New(`job: unknown role "nobody"`)))
	_, err = e.store.Enqueue(ctx, "tasks", []byte(`{"taskVersion":1,"id":"t-next"}`))
	must(t, err)
	must(t, e.store.(bus.Workers).PutHeartbeat(ctx, bus.Heartbeat{Consumer: "host1:4242:1", Host: "host1", PID: 4242,
		Queue: q.Name(), Concurrency: 4, InFlight: 1, TTL: time.Hour}))
	if ok, err := e.store.(queue.SlotStore).TryAcquireSlot(ctx, "qwen-coder-mlx", "host1:4242:3:0a1b", 2, time.Hour); err != nil || !ok {
		t.Fatalf("model slot: %v %v", ok, err)
	}

	// The server, as `conductor serve` runs it; its landing previews run
	// land.Preview with a gate held until the test releases it.
	release := filepath.Join(t.TempDir(), "release")
	s, err := web.New(web.Options{Preview: e.preview(gatedRules{Rules: e.pol.Landing(), gate: heldGate(release)}), Store: e.store, RunsDir: e.cfg.RunsDir(), Listen: "127.0.0.1:0",
		DeadLetters: q, QueueName: q.Name(), ModelSlots: e.store.(queue.SlotStore).SlotsInUse,
		Operators: []web.Operator{{Name: "alice", Token: aliceToken}}, Poll: 100 * time.Millisecond,
		Audit: func(ctx context.Context, repo, commit string) (web.Audit, error) {
			rep, err := land.Audit(ctx, land.AuditOptions{Git: patch.Git{GitDir: repo}, Store: e.store, Commit: commit})
			a := web.Audit{OK: rep.OK, PatchID: rep.PatchID}
			for _, c := range rep.Checks {
				a.Checks = append(a.Checks, web.AuditCheck{Name: c.Name, OK: c.OK, Want: c.Want, Got: c.Got, Detail: c.Detail})
			}
			return a, err
		}})
	must(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := httptest.NewUnstartedServer(s)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	defer s.Close() // before the listener closes: a preview still running is cancelled
	base := srv.URL

	shots := os.Getenv("CONDUCTOR_SCREENSHOTS")
	if shots == "" {
		shots = t.ArtifactDir()
	}
	must(t, os.MkdirAll(shots, 0o755))

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 900))
	actx, cancelA := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		bctx, cancel = context.WithDeadline(bctx, d.Add(-10*time.Second))
		defer cancel()
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			buf, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name), buf, 0o644)
		})
	}
	// Wait for a JavaScript condition (until the test's deadline).
	until := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond))
	}

	// Log in with the operator's token.
	do("log in",
		chromedp.Navigate(base+"/login?next=/runs"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), aliceToken),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS(`table.runs`)),
		shot("runs.png"),
	)

	// The runs table: both runs, with their status and model.
	doneRow := text(fmt.Sprintf(`tr[data-run="%s"]`, done.RunID))
	liveRow := text(fmt.Sprintf(`tr[data-run="%s"]`, liveID))
	for _, want := range []string{"succeeded", "tester", "builtin", "code", "ollama-qwen", "3/20"} {
		if !strings.Contains(doneRow, want) {
			t.Errorf("the finished run's row %q lacks %q", doneRow, want)
		}
	}
	if !strings.Contains(liveRow, "running") {
		t.Errorf("the live run's row %q does not say running", liveRow)
	}
	cps, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(fmt.Sprintf(`tr[data-run="%s"] td[data-label="checkpoints"]`, done.RunID))))
	must(t, err)
	if cps == "0" || cps == "" {
		t.Errorf("the finished run shows %q checkpoints; it checkpointed every step", cps)
	}

	// The run page of the run in progress: a new transcript entry arrives
	// over SSE when the worker's next turn happens.
	do("open the live run",
		chromedp.Navigate(base+"/runs/"+liveID),
		chromedp.WaitVisible(chromedp.ID("transcript")),
		until(`document.getElementById("conn").textContent === "live"`),
		chromedp.WaitVisible(chromedp.CSS(`textarea[name="text"]`)),
	)
	// An operator note from the page, while the run waits for its model.
	do("add a note",
		chromedp.SendKeys(chromedp.CSS(`textarea[name="text"]`), "Also look at README.md"),
		chromedp.Click(chromedp.CSS(`form.note-form button`)),
	)
	do("see the note",
		chromedp.WaitVisible(chromedp.CSS(`#live ul.notes`)),
		until(`document.querySelector("#live .notes") !== null && document.querySelector("#live .notes").textContent.includes("Also look at README.md")`),
		until(`document.getElementById("conn").textContent === "live"`),
		shot("run-live.png"),
	)
	pending, err := e.store.PendingNotes(ctx, liveID)
	must(t, err)
	if len(pending) != 1 || pending[0].Text != "Also look at README.md" {
		t.Fatalf("the store's pending notes after the form: %+v", pending)
	}
	before, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("#transcript li").length`))
	must(t, err)
	if before == 0 {
		t.Fatal("the live run page shows no transcript entries")
	}
	close(gate.release)
	do("see the new entry arrive",
		until(fmt.Sprintf(`document.querySelectorAll("#transcript li").length > %d && document.getElementById("transcript").textContent.includes("README.md")`, before)),
	)
	res := <-liveDone
	if res.Status != runrec.StatusSucceeded {
		t.Fatalf("live run: %s (%s)", res.Status, res.Error)
	}
	do("see the run end, and the note delivered",
		until(`!!document.querySelector("#live .status") && document.querySelector("#live .status").textContent === "succeeded"`),
		until(`document.querySelector("#live .notes").textContent.includes("delivered at step")`),
	)

	// The finished run's page: transcript, diff, review.
	do("open the finished run",
		chromedp.Navigate(base+"/runs/"+done.RunID),
		chromedp.WaitVisible(chromedp.CSS(`pre.diff`)),
		shot("run.png"),
	)
	if diff := text(`pre.diff`); !strings.Contains(diff, "+const Answer = 42") {
		t.Errorf("the diff %q lacks the change", diff)
	}

	// Decisions: what it would land, then merge with the button.
	button := fmt.Sprintf(`article[data-decision="%s"] button[data-option="merge"]`, decision)
	do("decisions",
		chromedp.Navigate(base+"/decisions"),
		chromedp.WaitVisible(chromedp.CSS(button)),
		shot("decisions.png"),
	)
	card := text(fmt.Sprintf(`article[data-decision="%s"]`, decision))
	for _, want := range []string{"lib/util.go", "approve", rep.PatchID, "as alice"} {
		if !strings.Contains(card, want) {
			t.Errorf("the decision card lacks %q:\n%s", want, card)
		}
	}
	// Preview the landing before choosing: the button runs land --preview
	// (its gate held), the card says it runs, then the result arrives over
	// SSE, without a reload.
	previewBtn := fmt.Sprintf(`article[data-decision="%s"] button[data-preview-button="%s"]`, decision, decision)
	section := fmt.Sprintf(`article[data-decision="%s"] section[data-preview="%s"]`, decision, decision)
	unchanged := e.state(decision)
	do("preview",
		chromedp.Click(chromedp.CSS(previewBtn)),
		chromedp.WaitVisible(chromedp.CSS(section+`[data-state="running"]`)),
		until(`document.getElementById("conn").textContent === "live"`),
		chromedp.Evaluate[chromedp.Void](`window.previewMark = "same page"`),
	)
	if dis, err := chromedp.Run(bctx, chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector(%q).disabled`, previewBtn))); err != nil || !dis {
		t.Errorf("the preview button is not disabled while the preview runs (%v)", err)
	}
	must(t, os.WriteFile(release, nil, 0o644))
	do("see the preview's result arrive",
		chromedp.WaitVisible(chromedp.CSS(section+`[data-state="would-land"]`)),
		shot("decision-preview.png"),
	)
	if mark, err := chromedp.Run(bctx, chromedp.Evaluate[string](`window.previewMark || ""`)); err != nil || mark != "same page" {
		t.Errorf("the preview's result came with a reload (%q, %v), not over SSE", mark, err)
	}
	pv := text(section)
	for _, want := range []string{"would land", "gate unit passed", "patch-id binding", rep.PatchID, "against main at", "less than a minute ago"} {
		if !strings.Contains(pv, want) {
			t.Errorf("the preview lacks %q:\n%s", want, pv)
		}
	}
	if after := e.state(decision); after != unchanged {
		t.Fatalf("the preview changed the repository or the store:\nbefore\n%s\nafter\n%s", unchanged, after)
	}
	do("merge",
		chromedp.Click(chromedp.CSS(button)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-decision="%s"]`, decision))),
	)
	d, err := e.store.GetDecision(ctx, decision)
	must(t, err)
	if d.Option != bus.OptionMerge || d.ResolvedBy != "alice" {
		t.Fatalf("after the click the store has %+v; want merge by alice", d)
	}

	// Land it (conductor land's act), then the Landed and Queue pages.
	out, err := land.Run(ctx, land.Options{Store: e.store, Rules: e.pol.Landing(), DecisionID: decision, DataRoot: e.data,
		Getenv: e.getenv, Committer: land.Identity{Name: "conductor", Email: "conductor@localhost"}})
	must(t, err)
	do("landed",
		chromedp.Navigate(base+"/landed"),
		chromedp.WaitVisible(chromedp.CSS(`#live`)),
		shot("landed.png"),
	)
	if landed := text(`#live`); !strings.Contains(landed, out.Commit) || !strings.Contains(landed, "Decision-Id: "+decision) ||
		!strings.Contains(landed, "audit ok") {
		t.Errorf("the landed page lacks the commit, its receipt or its audit:\n%s", landed)
	}
	do("queue",
		chromedp.Navigate(base+"/queue"),
		chromedp.WaitVisible(chromedp.CSS(`#live`)),
		shot("queue.png"),
	)
	page := text(`#live`)
	for _, want := range []string{"1 queued", "1 dead", "r-retry-me", `unknown role "nobody"`, "host1 pid 4242", "1 / 4", "qwen-coder-mlx", "1 / 2"} {
		if !strings.Contains(page, want) {
			t.Errorf("the queue page lacks %q:\n%s", want, page)
		}
	}
	// Retry the dead letter with its button: the job is queued again.
	retry := fmt.Sprintf(`button[data-retry="%s"]`, dl.ID)
	do("retry",
		chromedp.Click(chromedp.CSS(retry)),
		chromedp.WaitNotPresent(chromedp.CSS(retry)),
	)
	do("requeued",
		chromedp.WaitVisible(chromedp.CSS(`#live`)),
		until(`document.querySelector('table.dead') === null && document.body.innerText.includes('2 queued')`),
	)
	if dead, err := q.DeadLetters(ctx); err != nil || len(dead) != 0 {
		t.Errorf("after the retry click the store has dead letters %+v (%v)", dead, err)
	}
	jobs, err := e.store.(bus.Views).ListJobs(ctx)
	must(t, err)
	requeued := false
	for _, j := range jobs {
		if string(j.Payload) == string(deadJob) && j.State() == "queued" && j.Attempts == 0 {
			requeued = true
		}
	}
	if !requeued {
		t.Errorf("the retried job is not queued again with its attempts reset: %+v", jobs)
	}

	// A phone-sized screen.
	do("phone",
		chromedp.EmulateViewport(390, 844),
		chromedp.Navigate(base+"/runs"),
		chromedp.WaitVisible(chromedp.CSS(`table.runs`)),
		shot("runs-phone.png"),
	)
	t.Logf("screenshots in %s", shots)
}
