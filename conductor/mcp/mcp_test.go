package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/bus/bustest"
	"github.com/conductor-dev/conductor/conductor/mcp"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/testenv"
)

// helloPatch adds hello.txt ("hello\n"); git patch-id --stable --verbatim
// is checked against the store below, not hard-coded.
const helloPatch = `diff --git a/hello.txt b/hello.txt
new file mode 100644
index 0000000..ce01362
--- /dev/null
+++ b/hello.txt
@@ -0,0 +1 @@
+hello
`

type fixture struct {
	t       *testing.T
	store   bus.AgentStore
	clock   *bustest.Clock
	srv     *mcp.Server
	root    string
	runsDir string
}

func task(id string) string {
	return fmt.Sprintf(`{"taskVersion":1,"id":%q,"prompt":"Do %s.\nCarefully.","workspace":"default","capabilities":{"tools":["read","write"]},"session":"s-%s","timeoutSeconds":600}`, id, id, id)
}

// newFixture opens an embedded store on a test clock, writes a backlog of
// tasks t-1 and t-2 (and one broken file) and builds the server.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	clock := bustest.NewClock()
	s, err := bus.Open(context.Background(), bus.Options{DataRoot: root, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	agents, err := bus.Agents(s)
	if err != nil {
		t.Fatal(err)
	}
	backlog := filepath.Join(root, "backlog")
	must(t, os.MkdirAll(backlog, 0o755))
	for _, id := range []string{"t-1", "t-2"} {
		must(t, os.WriteFile(filepath.Join(backlog, id+".json"), []byte(task(id)), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(backlog, "broken.json"), []byte(`{"taskVersion":1,"id":"t-x","surprise":true}`), 0o644))
	runsDir := filepath.Join(root, "runs")
	srv, err := mcp.New(mcp.Options{Store: s, RunsDir: runsDir, BacklogDir: backlog, Now: clock.Now, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, store: agents, clock: clock, srv: srv, root: root, runsDir: runsDir}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// client connects a new SDK client to the server over an in-memory
// transport.
func (f *fixture) client(name string) *sdk.ClientSession {
	f.t.Helper()
	ctx := context.Background()
	ct, st := sdk.NewInMemoryTransports()
	ss, err := f.srv.MCP().Connect(ctx, st, nil)
	must(f.t, err)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: name, Version: "1"}, nil).Connect(ctx, ct, nil)
	must(f.t, err)
	f.t.Cleanup(func() { cs.Close(); ss.Wait() })
	return cs
}

// call calls a tool; ok reports the tool's success, text is its first
// text content, and out (if non-nil) receives the structured result.
func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, out any) (ok bool, text string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	if len(res.Content) > 0 {
		if tc, ok := res.Content[0].(*sdk.TextContent); ok {
			text = tc.Text
		}
	}
	if !res.IsError && out != nil {
		b, err := json.Marshal(res.StructuredContent)
		must(t, err)
		must(t, json.Unmarshal(b, out))
	}
	return !res.IsError, text
}

func mustCall(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	if ok, text := call(t, cs, name, args, out); !ok {
		t.Fatalf("%s %v failed: %s", name, args, text)
	}
}

type claimed struct {
	TaskID        string     `json:"taskId"`
	RunID         string     `json:"runId"`
	LeaseToken    string     `json:"leaseToken"`
	Holder        string     `json:"holder"`
	ExpiresAt     time.Time  `json:"expiresAt"`
	Renewed       bool       `json:"renewed"`
	ReclaimedFrom *bus.Lease `json:"reclaimedFrom"`
	Task          struct {
		ID     string `json:"id"`
		Prompt string `json:"prompt"`
	} `json:"task"`
}

type completed struct {
	TaskID           string    `json:"taskId"`
	RunID            string    `json:"runId"`
	PatchID          string    `json:"patchId"`
	AlreadyCompleted bool      `json:"alreadyCompleted"`
	Claim            bus.Claim `json:"claim"`
}

// snapshot is what a refused call must leave unchanged.
func (f *fixture) snapshot() string {
	f.t.Helper()
	ctx := context.Background()
	var b strings.Builder
	runs, err := f.store.ListRuns(ctx, bus.RunFilter{})
	must(f.t, err)
	evs, err := f.store.ListEvents(ctx, bus.EventFilter{})
	must(f.t, err)
	fmt.Fprintf(&b, "runs %d events %d\n", len(runs), len(evs))
	js := func(v any) string {
		out, err := json.Marshal(v)
		must(f.t, err)
		return string(out)
	}
	for _, r := range runs {
		fmt.Fprintln(&b, js(r))
		notes, err := f.store.PendingNotes(ctx, r.ID)
		must(f.t, err)
		fmt.Fprintln(&b, "notes", js(notes))
	}
	for _, id := range []string{"t-1", "t-2"} {
		cl, err := f.store.GetClaim(ctx, id)
		fmt.Fprintln(&b, id, js(cl), err)
		l, err := f.store.GetLease(ctx, id)
		fmt.Fprintln(&b, js(l), err)
	}
	return b.String()
}

func TestClaimThenComplete(t *testing.T) {
	f := newFixture(t)
	cs := f.client("alice")
	ctx := context.Background()

	var c claimed
	mustCall(t, cs, "claim_task", map[string]any{"taskId": "t-1", "agent": "alice", "leaseSeconds": 600}, &c)
	if c.TaskID != "t-1" || c.Holder != "alice" || !strings.HasPrefix(c.RunID, "r-mcp-") || c.LeaseToken == "" ||
		!c.ExpiresAt.Equal(f.clock.Now().Add(10*time.Minute)) || c.Task.ID != "t-1" || !strings.HasPrefix(c.Task.Prompt, "Do t-1.") {
		t.Fatalf("claim = %+v", c)
	}
	cl, err := f.store.GetClaim(ctx, "t-1")
	must(t, err)
	if cl.Claimant != c.RunID || cl.Completion != nil {
		t.Fatalf("claim row = %+v", cl)
	}
	run, err := f.store.GetRun(ctx, c.RunID)
	must(t, err)
	if run.Status != runrec.StatusRunning || run.TaskID != "t-1" || run.Session != "s-t-1" {
		t.Fatalf("run row = %+v", run)
	}

	f.clock.Advance(time.Minute)
	args := map[string]any{"runId": c.RunID, "leaseToken": c.LeaseToken, "outcome": "succeeded", "modelAlias": "claude-sonnet",
		"promptTokens": 1200, "completionTokens": 300, "totalTokens": 1500, "summary": "added hello.txt", "patch": helloPatch}
	var done completed
	mustCall(t, cs, "complete_task", args, &done)
	if done.AlreadyCompleted || done.PatchID == "" || done.Claim.Completion == nil {
		t.Fatalf("complete = %+v", done)
	}
	cl, err = f.store.GetClaim(ctx, "t-1")
	must(t, err)
	comp := cl.Completion
	if comp == nil || comp.RunID != c.RunID || comp.Outcome != "succeeded" || comp.ModelAlias != "claude-sonnet" ||
		*comp.PromptTokens != 1200 || *comp.CompletionTokens != 300 || *comp.TotalTokens != 1500 || !cl.CompletedAt.Equal(f.clock.Now()) {
		t.Fatalf("completed claim row = %+v %+v", cl, comp)
	}
	run, err = f.store.GetRun(ctx, c.RunID)
	must(t, err)
	if run.Status != "succeeded" || run.ModelAlias != "claude-sonnet" || *run.TotalTokens != 1500 || run.PatchID != done.PatchID ||
		!run.FinishedAt.Equal(f.clock.Now()) || run.Outcome != "added hello.txt" {
		t.Fatalf("finished run row = %+v", run)
	}
	// The run folder is the receipt: task, result and patch.
	dir := runrec.Dir(filepath.Join(f.runsDir, c.RunID))
	res, err := dir.ReadResult()
	must(t, err)
	if res.Status != "succeeded" || res.PatchID != done.PatchID || *res.TotalTokens != 1500 {
		t.Fatalf("result.json = %+v", res)
	}
	if b, err := os.ReadFile(dir.Path(runrec.PatchFile)); err != nil || string(b) != helloPatch {
		t.Fatalf("patch.diff = %q, %v", b, err)
	}

	// Idempotent: the same completion again changes nothing.
	before := f.snapshot()
	var again completed
	mustCall(t, cs, "complete_task", args, &again)
	if !again.AlreadyCompleted || again.PatchID != done.PatchID {
		t.Fatalf("repeat = %+v", again)
	}
	if after := f.snapshot(); after != before {
		t.Fatalf("repeated completion changed the store:\n%s\n---\n%s", before, after)
	}

	// get_run shows it; the patch is a resource.
	var got struct {
		Run       bus.RunSummary `json:"run"`
		Resources []string       `json:"resources"`
		Verdicts  []bus.Verdict  `json:"verdicts"`
	}
	mustCall(t, cs, "get_run", map[string]any{"runId": c.RunID}, &got)
	if got.Run.Status != "succeeded" || got.Run.PatchID != done.PatchID || !slices.Contains(got.Resources, "conductor://runs/"+c.RunID+"/patch") {
		t.Fatalf("get_run = %+v", got)
	}
	rr, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "conductor://runs/" + c.RunID + "/patch"})
	must(t, err)
	if len(rr.Contents) != 1 || rr.Contents[0].Text != helloPatch {
		t.Fatalf("patch resource = %+v", rr.Contents)
	}
	if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "conductor://runs/" + c.RunID + "/transcript"}); err == nil {
		t.Fatal("a transcript that does not exist was served")
	}
	if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "conductor://runs/../bus.db/patch"}); err == nil {
		t.Fatal("a path outside the runs folder was served")
	}

	// list_tasks and list_runs agree; the events are the lifecycle.
	var tasks struct {
		Tasks []struct {
			ID, State, RunID, Outcome string
		} `json:"tasks"`
		Problems []struct{ File, Error string } `json:"problems"`
	}
	mustCall(t, cs, "list_tasks", map[string]any{}, &tasks)
	if fmt.Sprint(tasks.Tasks) != fmt.Sprintf("[{t-1 completed %s succeeded} {t-2 open  }]", c.RunID) {
		t.Fatalf("list_tasks = %+v", tasks.Tasks)
	}
	if len(tasks.Problems) != 1 || tasks.Problems[0].File != "broken.json" || !strings.Contains(tasks.Problems[0].Error, "surprise") {
		t.Fatalf("problems = %+v", tasks.Problems)
	}
	var runs struct{ Runs []bus.RunSummary }
	mustCall(t, cs, "list_runs", map[string]any{"taskId": "t-1"}, &runs)
	if len(runs.Runs) != 1 || runs.Runs[0].ID != c.RunID || runs.Runs[0].Source != "both" {
		t.Fatalf("list_runs = %+v", runs.Runs)
	}
	evs, err := f.store.ListEvents(ctx, bus.EventFilter{RunID: c.RunID})
	must(t, err)
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	if fmt.Sprint(kinds) != "[claimed completed]" || evs[0].Actor != "alice" {
		t.Fatalf("events = %+v", evs)
	}
}

func TestConcurrentClaimsOneWinner(t *testing.T) {
	f := newFixture(t)
	clients := []*sdk.ClientSession{f.client("a"), f.client("b")}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		wins  []string
		texts []string
	)
	for round := range 5 {
		taskID := "t-1"
		if round > 0 {
			// More items, so the race is run several times.
			taskID = fmt.Sprint("t-race-", round)
			must(t, os.WriteFile(filepath.Join(f.root, "backlog", taskID+".json"), []byte(task(taskID)), 0o644))
		}
		wins, texts = nil, nil
		for i, cs := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				agent := fmt.Sprint("agent-", i)
				var c claimed
				ok, text := call(t, cs, "claim_task", map[string]any{"taskId": taskID, "agent": agent}, &c)
				mu.Lock()
				defer mu.Unlock()
				if ok {
					wins = append(wins, agent+" "+c.RunID)
				} else {
					texts = append(texts, text)
				}
			}()
		}
		wg.Wait()
		if len(wins) != 1 || len(texts) != 1 {
			t.Fatalf("%s: winners %v, refusals %v: want exactly one of each", taskID, wins, texts)
		}
		holder, runID, _ := strings.Cut(wins[0], " ")
		if want := fmt.Sprintf("refused (task-claimed): task %s is claimed by %s (run %s) until", taskID, holder, runID); !strings.HasPrefix(texts[0], want) {
			t.Fatalf("refusal %q, want it to start %q", texts[0], want)
		}
		runs, err := f.store.ListRuns(context.Background(), bus.RunFilter{TaskID: taskID})
		must(t, err)
		if len(runs) != 1 || runs[0].ID != runID {
			t.Fatalf("runs of %s: %+v", taskID, runs)
		}
	}
}

func TestExpiredLeaseClaimedAgain(t *testing.T) {
	f := newFixture(t)
	alice, bob := f.client("alice"), f.client("bob")
	var a claimed
	mustCall(t, alice, "claim_task", map[string]any{"taskId": "t-1", "agent": "alice", "leaseSeconds": 60}, &a)
	if ok, text := call(t, bob, "claim_task", map[string]any{"taskId": "t-1", "agent": "bob"}, nil); ok || !strings.Contains(text, "claimed by alice") {
		t.Fatalf("claim of a live lease: ok=%v %q", ok, text)
	}
	// Alice renews with her token; the lease moves on.
	f.clock.Advance(50 * time.Second)
	var renewed claimed
	mustCall(t, alice, "claim_task", map[string]any{"taskId": "t-1", "agent": "alice", "leaseSeconds": 60, "leaseToken": a.LeaseToken}, &renewed)
	if !renewed.Renewed || renewed.RunID != a.RunID || !renewed.ExpiresAt.Equal(f.clock.Now().Add(time.Minute)) {
		t.Fatalf("renew = %+v", renewed)
	}
	f.clock.Advance(61 * time.Second)
	var b claimed
	mustCall(t, bob, "claim_task", map[string]any{"taskId": "t-1", "agent": "bob"}, &b)
	if b.ReclaimedFrom == nil || b.ReclaimedFrom.RunID != a.RunID || b.ReclaimedFrom.Holder != "alice" || b.RunID == a.RunID {
		t.Fatalf("reclaim = %+v", b)
	}
	ctx := context.Background()
	old, err := f.store.GetRun(ctx, a.RunID)
	must(t, err)
	if old.Status != runrec.StatusCancelled || !strings.Contains(old.Outcome, "lease expired") {
		t.Fatalf("the expired lease's run = %+v", old)
	}
	// Alice's late completion is refused; nothing changes; Bob completes.
	before := f.snapshot()
	ok, text := call(t, alice, "complete_task", map[string]any{"runId": a.RunID, "leaseToken": a.LeaseToken, "outcome": "succeeded", "modelAlias": "m"}, nil)
	if ok || !strings.HasPrefix(text, "refused (not-lease-holder): run "+a.RunID+" no longer holds task t-1: it is leased to bob") {
		t.Fatalf("late completion: ok=%v %q", ok, text)
	}
	if after := f.snapshot(); after != before {
		t.Fatalf("refused completion changed the store:\n%s\n---\n%s", before, after)
	}
	mustCall(t, bob, "complete_task", map[string]any{"runId": b.RunID, "leaseToken": b.LeaseToken, "outcome": "failed", "modelAlias": "m", "summary": "could not"}, nil)
	cl, err := f.store.GetClaim(ctx, "t-1")
	must(t, err)
	if cl.Claimant != b.RunID || cl.Completion == nil || cl.Completion.Outcome != "failed" {
		t.Fatalf("claim = %+v", cl)
	}
}

func TestNoResolveDecisionOrLand(t *testing.T) {
	f := newFixture(t)
	cs := f.client("x")
	res, err := cs.ListTools(context.Background(), nil)
	must(t, err)
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if strings.Contains(tool.Name, "resolve") || strings.Contains(tool.Name, "land") {
			t.Errorf("tool %q must not exist", tool.Name)
		}
	}
	slices.Sort(names)
	want := []string{"add_note", "claim_task", "complete_task", "get_run", "list_decisions", "list_runs", "list_tasks", "raise_decision"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	for _, tool := range res.Tools {
		if slices.Contains([]string{"complete_task", "raise_decision", "list_decisions"}, tool.Name) &&
			!strings.Contains(tool.Description, "a decision is a person's act") {
			t.Errorf("%s's description does not state the authority split: %q", tool.Name, tool.Description)
		}
	}
	_, err = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "resolve_decision", Arguments: map[string]any{"id": "d-x", "option": "merge"}})
	if err == nil || !strings.Contains(err.Error(), "resolve_decision") {
		t.Fatalf("calling resolve_decision: %v", err)
	}
}

func TestBadArgumentsGetSchemaErrors(t *testing.T) {
	f := newFixture(t)
	cs := f.client("x")
	before := f.snapshot()
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"claim_task", map[string]any{"taskId": "t-1"}, `missing properties: ["agent"]`},
		{"claim_task", map[string]any{"taskId": "t-1", "agent": "a", "extra": 1}, `unexpected additional properties ["extra"]`},
		{"claim_task", map[string]any{"taskId": "t-1", "agent": "a", "leaseSeconds": 5}, "minimum"},
		{"claim_task", map[string]any{"taskId": "t-1", "agent": "a", "leaseSeconds": "long"}, "type"},
		{"claim_task", map[string]any{"taskId": "../t-1", "agent": "a"}, "pattern"},
		{"claim_task", map[string]any{"taskId": "t-1", "agent": "   "}, "pattern"},
		{"complete_task", map[string]any{"runId": "r-1", "leaseToken": "x", "outcome": "great", "modelAlias": "m"}, "enum"},
		{"complete_task", map[string]any{"runId": "r-1", "leaseToken": "x", "outcome": "failed", "modelAlias": "m", "totalTokens": -1}, "minimum"},
		{"complete_task", map[string]any{"runId": "r-1", "leaseToken": "x", "outcome": "failed", "modelAlias": "m", "commit": "zz"}, "pattern"},
		{"add_note", map[string]any{"runId": "r-1", "text": ""}, "minLength"},
		{"list_runs", map[string]any{"limit": 0.5}, "integer"},
		{"list_tasks", map[string]any{"state": "sideways"}, "enum"},
	} {
		t.Run(tc.tool+" "+fmt.Sprint(tc.args), func(t *testing.T) {
			ok, text := call(t, cs, tc.tool, tc.args, nil)
			if ok || !strings.Contains(text, `validating "arguments"`) || !strings.Contains(text, tc.want) {
				t.Fatalf("ok=%v %q, want a schema error mentioning %q", ok, text, tc.want)
			}
		})
	}
	if after := f.snapshot(); after != before {
		t.Fatalf("schema errors changed the store:\n%s\n---\n%s", before, after)
	}
}

func TestBadInputRefusedNothingChanged(t *testing.T) {
	f := newFixture(t)
	alice, bob := f.client("alice"), f.client("bob")
	var a, b claimed
	mustCall(t, alice, "claim_task", map[string]any{"taskId": "t-1", "agent": "alice"}, &a)
	mustCall(t, bob, "claim_task", map[string]any{"taskId": "t-2", "agent": "bob"}, &b)
	mustCall(t, bob, "complete_task", map[string]any{"runId": b.RunID, "leaseToken": b.LeaseToken, "outcome": "succeeded", "modelAlias": "m"}, nil)

	for _, tc := range []struct {
		name, tool string
		args       map[string]any
		want       string
	}{
		{"claim of a task that does not exist", "claim_task", map[string]any{"taskId": "t-nope", "agent": "bob"},
			`refused (task-not-found): no task "t-nope" in the backlog`},
		{"claim of an invalid task file", "claim_task", map[string]any{"taskId": "t-x", "agent": "bob"},
			`refused (task-not-found)`},
		{"claim of a completed task", "claim_task", map[string]any{"taskId": "t-2", "agent": "alice"},
			"refused (task-completed): task t-2 was already completed by run " + b.RunID},
		{"completion of a run that is not the caller's lease", "complete_task",
			map[string]any{"runId": a.RunID, "leaseToken": b.LeaseToken, "outcome": "succeeded", "modelAlias": "m"},
			"refused (not-lease-holder): the lease token does not match the lease of run " + a.RunID + " on task t-1 (held by alice)"},
		{"completion of a run that does not exist", "complete_task",
			map[string]any{"runId": "r-nope", "leaseToken": b.LeaseToken, "outcome": "succeeded", "modelAlias": "m"},
			"run r-nope: not found"},
		{"a different completion of a completed task", "complete_task",
			map[string]any{"runId": b.RunID, "leaseToken": b.LeaseToken, "outcome": "failed", "modelAlias": "m"},
			"refused (completion-differs)"},
		{"a patch that is not a patch", "complete_task",
			map[string]any{"runId": a.RunID, "leaseToken": a.LeaseToken, "outcome": "succeeded", "modelAlias": "m", "patch": "hello"},
			"complete_task: patch:"},
		{"a note to a finished run", "add_note", map[string]any{"runId": b.RunID, "text": "hurry"},
			"refused (run-not-running): run " + b.RunID + " is succeeded: a note would never be delivered"},
		{"a note to a run that does not exist", "add_note", map[string]any{"runId": "r-nope", "text": "hurry"},
			"add_note: run r-nope not found"},
		{"a renewal with someone else's token", "claim_task", map[string]any{"taskId": "t-1", "agent": "bob", "leaseToken": a.LeaseToken},
			"refused (task-claimed): task t-1 is claimed by alice"},
		{"a run id that escapes", "get_run", map[string]any{"runId": "r..x"}, "run id"},
		{"a decision without a work ref", "raise_decision", map[string]any{"raisedBy": "bob", "commit": strings.Repeat("a", 40), "target": "main"},
			"needs a work ref"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.snapshot()
			decisions, err := f.store.ListDecisions(context.Background(), false)
			must(t, err)
			ok, text := call(t, alice, tc.tool, tc.args, nil)
			if ok || !strings.Contains(text, tc.want) {
				t.Fatalf("ok=%v %q, want a refusal containing %q", ok, text, tc.want)
			}
			if after := f.snapshot(); after != before {
				t.Fatalf("the refusal changed the store:\n%s\n---\n%s", before, after)
			}
			if now, _ := f.store.ListDecisions(context.Background(), false); len(now) != len(decisions) {
				t.Fatal("the refusal raised a decision")
			}
			// The server keeps serving.
			mustCall(t, alice, "list_tasks", map[string]any{}, nil)
		})
	}
	// Alice can still finish her own work.
	mustCall(t, alice, "complete_task", map[string]any{"runId": a.RunID, "leaseToken": a.LeaseToken, "outcome": "succeeded", "modelAlias": "m"}, nil)
}

func TestNotesAndDecisions(t *testing.T) {
	f := newFixture(t)
	cs := f.client("x")
	ctx := context.Background()
	var c claimed
	mustCall(t, cs, "claim_task", map[string]any{"taskId": "t-1", "agent": "x"}, &c)
	var n bus.Note
	mustCall(t, cs, "add_note", map[string]any{"runId": c.RunID, "text": "  also update the docs  "}, &n)
	pending, err := f.store.PendingNotes(ctx, c.RunID)
	must(t, err)
	if len(pending) != 1 || pending[0].Text != "also update the docs" || pending[0].ID != n.ID {
		t.Fatalf("pending notes = %+v", pending)
	}
	var got struct {
		PendingNotes int        `json:"pendingNotes"`
		Notes        []bus.Note `json:"notes"`
	}
	mustCall(t, cs, "get_run", map[string]any{"runId": c.RunID}, &got)
	if got.PendingNotes != 1 || len(got.Notes) != 1 || got.Notes[0].Text != "also update the docs" {
		t.Fatalf("get_run notes = %+v", got)
	}
	var d bus.Decision
	sha := strings.Repeat("ab", 20)
	mustCall(t, cs, "raise_decision", map[string]any{"raisedBy": "x", "workRef": "refs/heads/work/t-1", "commit": sha, "target": "main", "runId": c.RunID}, &d)
	if !d.Open() || d.RaisedBy != "x" || d.Commit != sha || d.Kind != bus.KindMergeProtected {
		t.Fatalf("decision = %+v", d)
	}
	var list struct{ Decisions []bus.DecisionView }
	mustCall(t, cs, "list_decisions", map[string]any{"openOnly": true}, &list)
	if len(list.Decisions) != 1 || list.Decisions[0].ID != d.ID {
		t.Fatalf("list_decisions = %+v", list)
	}
	// A person resolves it (not through mcp); the list shows it.
	if _, err := f.store.ResolveDecision(ctx, d.ID, bus.OptionReject, "a person"); err != nil {
		t.Fatal(err)
	}
	mustCall(t, cs, "list_decisions", map[string]any{"openOnly": true}, &list)
	if len(list.Decisions) != 0 {
		t.Fatalf("open decisions after resolving = %+v", list)
	}
	evs, err := f.store.ListEvents(ctx, bus.EventFilter{RunID: c.RunID})
	must(t, err)
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	if fmt.Sprint(kinds) != "[claimed note_added decision_raised]" {
		t.Fatalf("events %v", kinds)
	}
}

// bearer adds a token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func TestHTTP(t *testing.T) {
	f := newFixture(t)
	hs := httptest.NewServer(f.srv.Handler("s3cret"))
	t.Cleanup(hs.Close) // after the clients' cleanups close their streams

	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	for _, tc := range []struct {
		name, auth string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"not bearer", "Basic czNjcmV0", http.StatusUnauthorized},
		{"wrong token", "Bearer nope", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", hs.URL, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			must(t, err)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
	if runs, _ := f.store.ListRuns(context.Background(), bus.RunFilter{}); len(runs) != 0 {
		t.Fatal("unauthenticated requests changed the store")
	}

	ctx := context.Background()
	connect := func(name string) *sdk.ClientSession {
		tr := &sdk.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: &http.Client{Transport: bearer{"s3cret"}}}
		cs, err := sdk.NewClient(&sdk.Implementation{Name: name, Version: "1"}, nil).Connect(ctx, tr, nil)
		must(t, err)
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	a, b := connect("a"), connect("b")
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins []claimed
	)
	for i, cs := range []*sdk.ClientSession{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c claimed
			if ok, _ := call(t, cs, "claim_task", map[string]any{"taskId": "t-1", "agent": fmt.Sprint("http-", i)}, &c); ok {
				mu.Lock()
				wins = append(wins, c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(wins) != 1 {
		t.Fatalf("winners over HTTP: %+v", wins)
	}
	w := wins[0]
	mustCall(t, a, "complete_task", map[string]any{"runId": w.RunID, "leaseToken": w.LeaseToken, "outcome": "succeeded", "modelAlias": "m", "totalTokens": 7}, nil)
	cl, err := f.store.GetClaim(ctx, "t-1")
	must(t, err)
	if cl.Claimant != w.RunID || cl.Completion == nil || *cl.Completion.TotalTokens != 7 {
		t.Fatalf("claim after HTTP completion = %+v", cl)
	}
	run, err := f.store.GetRun(ctx, w.RunID)
	must(t, err)
	if run.Status != "succeeded" || run.TaskID != "t-1" || *run.TotalTokens != 7 || run.FinishedAt.IsZero() {
		t.Fatalf("run after HTTP completion = %+v", run)
	}
	if runs, _ := f.store.ListRuns(ctx, bus.RunFilter{TaskID: "t-1"}); len(runs) != 1 {
		t.Fatalf("the losing HTTP claim left a run: %+v", runs)
	}
}

func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr, token string
		code        string // "" ok, "usage" a malformed address
	}{
		{"127.0.0.1:8765", "", ""},
		{"[::1]:0", "", ""},
		{"localhost:0", "", ""},
		{"0.0.0.0:8765", "", mcp.CodeListenNeedsToken},
		{":8765", "", mcp.CodeListenNeedsToken},
		{"192.168.1.5:8765", "", mcp.CodeListenNeedsToken},
		{"0.0.0.0:8765", "tok", ""},
		{"no-port", "", "usage"},
	} {
		t.Run(tc.addr+"/"+tc.token, func(t *testing.T) {
			err := mcp.CheckListen(tc.addr, tc.token)
			var r *refusal.Refusal
			switch {
			case tc.code == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.code == "usage" && (err == nil || errorsAs(err, &r)):
				t.Fatalf("malformed address: %v", err)
			case tc.code != "" && tc.code != "usage" && (!errorsAs(err, &r) || string(r.Code) != tc.code):
				t.Fatalf("error %v, want refusal %s", err, tc.code)
			}
		})
	}
}

func errorsAs(err error, target any) bool { return err != nil && errors.As(err, target) }

// TestTwoHostsOnePostgres: two servers (as on two hosts) on one PostgreSQL
// store, one client each, claim the same tasks at once: one winner each
// time, and the winner's completion is seen by the other server.
func TestTwoHostsOnePostgres(t *testing.T) {
	url := testenv.Postgres(t)
	ctx := context.Background()
	root := t.TempDir()
	backlog := filepath.Join(root, "backlog")
	must(t, os.MkdirAll(backlog, 0o755))
	var sessions []*sdk.ClientSession
	for i := range 2 {
		st, err := bus.Open(ctx, bus.Options{DatabaseURL: url})
		must(t, err)
		t.Cleanup(func() { st.Close() })
		srv, err := mcp.New(mcp.Options{Store: st, RunsDir: filepath.Join(root, fmt.Sprint("runs-", i)), BacklogDir: backlog})
		must(t, err)
		f := &fixture{t: t, srv: srv}
		sessions = append(sessions, f.client(fmt.Sprint("host-", i)))
	}
	for round := range 4 {
		taskID := fmt.Sprint("t-pg-", round)
		must(t, os.WriteFile(filepath.Join(backlog, taskID+".json"), []byte(task(taskID)), 0o644))
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			wins []claimed
		)
		for i, cs := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var c claimed
				if ok, text := call(t, cs, "claim_task", map[string]any{"taskId": taskID, "agent": fmt.Sprint("host-", i)}, &c); ok {
					mu.Lock()
					wins = append(wins, c)
					mu.Unlock()
				} else if !strings.Contains(text, "task-claimed") {
					t.Errorf("loser's refusal: %q", text)
				}
			}()
		}
		wg.Wait()
		if len(wins) != 1 {
			t.Fatalf("%s: winners %+v", taskID, wins)
		}
		w := wins[0]
		winner, other := sessions[0], sessions[1]
		if w.Holder == "host-1" {
			winner, other = other, winner
		}
		mustCall(t, winner, "complete_task", map[string]any{"runId": w.RunID, "leaseToken": w.LeaseToken, "outcome": "succeeded", "modelAlias": "m"}, nil)
		var tasks struct {
			Tasks []struct{ ID, State, RunID string } `json:"tasks"`
		}
		mustCall(t, other, "list_tasks", map[string]any{"state": "completed"}, &tasks)
		if !slices.ContainsFunc(tasks.Tasks, func(r struct{ ID, State, RunID string }) bool { return r.ID == taskID && r.RunID == w.RunID }) {
			t.Fatalf("the other host does not see %s completed by %s: %+v", taskID, w.RunID, tasks.Tasks)
		}
	}
}

// TestStdioAnswersEverythingBeforeEOF is a client that writes its requests
// and closes its end at once (`printf … | conductor mcp`): every request is
// answered before the session ends, the claim among them (a claim made but
// not answered would leave the task leased to a client that never learnt
// its lease token).
func TestStdioAnswersEverythingBeforeEOF(t *testing.T) {
	for i := range 20 {
		f := newFixture(t)
		in := strings.Join([]string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"sh","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			`{"jsonrpc":"2.0","id":"claim","method":"tools/call","params":{"name":"claim_task","arguments":{"taskId":"t-1","agent":"pipe"}}}`,
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_tasks","arguments":{}}}`,
			`{"jsonrpc":"2.0","id":4,"method":"no/such/method"}`,
		}, "\n") + "\n"
		var out bytes.Buffer
		must(t, f.srv.ServeStdio(context.Background(), strings.NewReader(in), &out))
		ids := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			must(t, json.Unmarshal([]byte(line), &m))
			ids[string(m.ID)] = string(m.Result) + string(m.Error)
		}
		for _, id := range []string{`1`, `"claim"`, `3`, `4`} {
			if _, ok := ids[id]; !ok {
				t.Fatalf("round %d: request %s was not answered; the output:\n%s", i, id, out.String())
			}
		}
		if !strings.Contains(ids[`"claim"`], "leaseToken") {
			t.Fatalf("round %d: the claim's answer has no lease token: %s", i, ids[`"claim"`])
		}
	}
}
