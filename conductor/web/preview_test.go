package web_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/review"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/conductor/web"
	"github.com/conductor-dev/conductor/land"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// gatedRules is the browser env's landing policy with a gate.
type gatedRules struct {
	land.Rules
	gate []policy.GateCommand
}

func (r gatedRules) Gate() []policy.GateCommand { return r.gate }

// heldGate is a gate that waits for the file release, then checks the
// squashed tree: a preview stays running for as long as the test wants.
func heldGate(release string) []policy.GateCommand {
	return []policy.GateCommand{{Name: "unit", NeedsFiles: true, Timeout: 10 * time.Minute,
		Argv: []string{"sh", "-c", "while [ ! -e '" + release + "' ]; do sleep 0.05; done; grep -q 'Answer = 42' lib/util.go && echo unit-ok"}}}
}

// preview is land.Preview as `conductor serve` wires it (cmd/conductor's
// servePreview), on the browser env's store and repository.
func (e *browserEnv) preview(rules land.Rules) func(ctx context.Context, id, operator string) (web.Preview, error) {
	return func(ctx context.Context, id, operator string) (web.Preview, error) {
		out, err := land.Preview(ctx, land.Options{Store: e.store, Rules: rules, DecisionID: id, DataRoot: e.data,
			Getenv: e.getenv, Sandbox: e.sb}, operator)
		p := web.Preview{Status: out.Status, Target: out.Target, Parent: out.Parent, Tree: out.Tree, ReviewedCommit: out.ReviewedCommit,
			PatchID: out.PatchID, Mode: out.Mode, Message: out.Message, Files: out.Files, Refusal: out.Refusal}
		p.Gate = out.Gate
		return p, err
	}
}

// reviewed plays a finished run, reviews and approves it, and raises its
// merge decision (left open).
func (e *browserEnv) reviewed(ctx context.Context) (runrec.Result, review.Report) {
	t := e.t
	t.Helper()
	done, err := e.run(ctx, "s-done", nil,
		fakellm.Turn{Name: "read", ToolCalls: []fakellm.ToolCall{{ID: "call_1", Name: "read_file", Arguments: args(t, map[string]any{"path": "lib/util.go"})}}},
		fakellm.Turn{Name: "write", ToolCalls: []fakellm.ToolCall{{ID: "call_2", Name: "write_file", Arguments: args(t, map[string]any{"path": "lib/util.go", "content": "package lib\n\nconst Answer = 42\n"})}}},
		fakellm.Turn{Name: "done", Content: "The answer is 42 now.", Usage: &fakellm.Usage{PromptTokens: 120, CompletionTokens: 30, TotalTokens: 150}})
	must(t, err)
	if done.Status != runrec.StatusSucceeded {
		t.Fatalf("scripted run: %s (%s)", done.Status, done.Error)
	}
	rep, err := review.Run(ctx, review.Options{Store: e.store, Policy: e.pol, RunDir: runrec.Dir(e.cfg.RunDir(done.RunID)),
		Approve: true, Raise: "main", Reviewer: "conductor-review", Sandbox: e.sb, ScratchDir: t.TempDir(), Getenv: e.getenv})
	must(t, err)
	if rep.Decision == nil {
		t.Fatalf("review raised no decision: %+v", rep)
	}
	return done, rep
}

// state is what a landing must not change: every ref of the repository,
// its worktrees, and the decision's row and landing.
func (e *browserEnv) state(id string) string {
	e.t.Helper()
	refs := gitT(e.t, e.repo, "for-each-ref", "--format=%(refname) %(objectname)")
	wts := gitT(e.t, e.repo, "worktree", "list", "--porcelain")
	d, err := e.store.GetDecision(context.Background(), id)
	must(e.t, err)
	_, lerr := e.store.GetLanding(context.Background(), id)
	return refs + "\n" + wts + "\n" + strings.Join([]string{d.ID, d.Option, d.ResolvedBy, d.ResolvedAt.String(), d.Commit, d.Target}, "|") +
		"\nlanding: " + errString(lerr)
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestPreview: the Preview landing button is a mutation (token and CSRF),
// runs land --preview in the background once per decision, shows its
// result, age, target tip and staleness, refuses a decision that does not
// exist or is resolved, and changes nothing; the server keeps serving.
func TestPreview(t *testing.T) {
	e := newBrowserEnv(t)
	ctx := context.Background()
	_, rep := e.reviewed(ctx)
	id := rep.Decision.ID
	release := filepath.Join(t.TempDir(), "release")
	s, err := web.New(web.Options{Store: e.store, RunsDir: e.cfg.RunsDir(), Listen: "127.0.0.1:0", Poll: 20 * time.Millisecond,
		Operators: testOps, Preview: e.preview(gatedRules{Rules: e.pol.Landing(), gate: heldGate(release)})})
	must(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Cleanup(s.Close) // runs first: a preview still running is cancelled
	w := &env{t: t, store: e.store, srv: srv}
	tab1, tab2, anon := w.client(), w.client(), w.client()
	csrf1, csrf2 := w.login(tab1, aliceToken), w.login(tab2, bobToken)
	path := "/decisions/" + id + "/preview"
	before := e.state(id)
	dec0, err := e.store.GetDecision(ctx, id)
	must(t, err)

	// Refused before anything runs.
	for _, tc := range []struct {
		name   string
		client *http.Client
		form   url.Values
		status int
		want   string
	}{
		{"no token", anon, url.Values{"csrf": {csrf1}}, http.StatusForbidden, "operator token is required"},
		{"missing csrf", tab1, url.Values{}, http.StatusForbidden, "CSRF token is missing or wrong"},
		{"forged csrf", tab1, url.Values{"csrf": {strings.Repeat("A", len(csrf1))}}, http.StatusForbidden, "CSRF token is missing or wrong"},
		{"other tab's csrf", tab1, url.Values{"csrf": {csrf2}}, http.StatusForbidden, "CSRF token is missing or wrong"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantIn(t, w.do(tc.client, "POST", path, tc.form, nil), tc.status, tc.want)
		})
	}
	r := w.do(tab1, "POST", "/decisions/d-nosuch/preview", url.Values{"csrf": {csrf1}}, nil)
	wantIn(t, r, http.StatusNotFound, "there is no decision d-nosuch", "nothing was run")
	r = w.do(tab1, "POST", "/decisions/"+strings.Repeat("x", 200)+"/preview", url.Values{"csrf": {csrf1}}, nil)
	wantIn(t, r, http.StatusBadRequest, "decision id")
	if page := w.get(tab1, "/decisions").body; strings.Contains(page, `data-preview="`) {
		t.Fatal("a refused request started a preview")
	}

	// Alice previews; Bob's tab clicks too while it runs: refused, saying so.
	r = w.do(tab1, "POST", path, url.Values{"csrf": {csrf1}}, nil)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/decisions#"+id {
		t.Fatalf("preview: %d %q\n%s", r.status, r.header.Get("Location"), r.body)
	}
	r = w.do(tab2, "POST", path, url.Values{"csrf": {csrf2}}, nil)
	wantIn(t, r, http.StatusConflict, "already running", "started by alice", "nothing new was started")
	wantIn(t, w.get(tab2, "/decisions"), http.StatusOK, `data-state="running"`, "Landing preview running", "disabled")

	// Its gate ends: the card shows what it would land.
	must(t, os.WriteFile(release, nil, 0o644))
	page := waitPage(t, w, tab1, `data-state="would-land"`)
	tip := gitT(t, e.repo, "rev-parse", "refs/heads/main")
	words := strings.Join(strings.Fields(page), " ") // the message is wrapped at 72 columns
	for _, want := range []string{"Landing preview: would land", "gate unit passed", "patch-id binding", rep.PatchID,
		"alice chose merge in decision " + id, "Made less than a minute ago", "by alice", tip[:12], "Decision-Id: " + id} {
		if !strings.Contains(words, want) {
			t.Errorf("the card lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "Stale") {
		t.Error("a fresh preview says it is stale")
	}
	if after := e.state(id); after != before {
		t.Fatalf("the preview changed the repository or the store:\nbefore\n%s\nafter\n%s", before, after)
	}
	if dec, err := e.store.GetDecision(ctx, id); err != nil || !reflect.DeepEqual(dec, dec0) || !dec.Open() {
		t.Fatalf("the preview changed the decision row: %+v (%v), was %+v", dec, err, dec0)
	}
	// What it did wrote one lifecycle event: who, and what it said.
	evs := previewEvents(t, e.store)
	if len(evs) != 1 || evs[0].Actor != "alice" || !strings.Contains(string(evs[0].Metadata), `"status":"preview"`) ||
		!strings.Contains(string(evs[0].Metadata), `"decision":"`+id+`"`) || !strings.Contains(string(evs[0].Metadata), rep.PatchID) {
		t.Fatalf("land_previewed events: %+v", evs)
	}

	// The target moves: the preview says it is stale, and the tip it saw.
	gitT(t, e.repo, "commit", "-q", "--allow-empty", "-m", "elsewhere")
	page = waitPage(t, w, tab2, "Stale:")
	if moved := gitT(t, e.repo, "rev-parse", "refs/heads/main"); !strings.Contains(page, moved[:12]) || !strings.Contains(page, tip[:12]) {
		t.Errorf("the stale card names neither the new tip %s nor the old %s:\n%s", moved[:12], tip[:12], page)
	}

	// Once resolved, a preview is refused (Bob's tab still shows the button).
	r = w.do(tab1, "POST", "/decisions/"+id+"/resolve", url.Values{"option": {"reject"}, "csrf": {csrf1}}, nil)
	if r.status != http.StatusSeeOther {
		t.Fatalf("resolve: %d %s", r.status, r.body)
	}
	resolved := e.state(id)
	r = w.do(tab2, "POST", path, url.Values{"csrf": {csrf2}}, nil)
	wantIn(t, r, http.StatusConflict, "already resolved", "reject by alice", "nothing was run")
	if e.state(id) != resolved {
		t.Fatal("a refused preview changed something")
	}
	wantIn(t, w.get(tab2, "/decisions"), http.StatusOK, "No open decisions.")
	if n := len(previewEvents(t, e.store)); n != 1 {
		t.Fatalf("%d land_previewed events after refused previews, want the one that ran", n)
	}
}

func previewEvents(t *testing.T, s bus.Store) []bus.Event {
	t.Helper()
	all, err := s.(bus.AgentStore).ListEvents(context.Background(), bus.EventFilter{})
	must(t, err)
	var out []bus.Event
	for _, ev := range all {
		if ev.Kind == bus.EventLandPreviewed {
			out = append(out, ev)
		}
	}
	return out
}

// waitPage polls /decisions until it contains want (the deadline is only
// a hang guard).
func waitPage(t *testing.T, w *env, c *http.Client, want string) string {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		r := w.get(c, "/decisions")
		if r.status == http.StatusOK && strings.Contains(r.body, want) {
			return r.body
		}
		if time.Now().After(deadline) {
			t.Fatalf("the decisions page never showed %q:\n%s", want, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPreviewShowsRefusal: a preview that would be refused shows the code,
// the reason, the fix and the failing gate's output tail; an error is
// shown as such; without a Preview function there is no button and the
// POST is refused.
func TestPreviewShowsRefusal(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  web.Preview
		err  error
		want []string
	}{
		{"gate failed", web.Preview{Status: "refused", Target: "main", Parent: "4444444444444444444444444444444444444444",
			Gate: []sandbox.GateResult{{Name: "unit", Status: sandbox.GatePass, Duration: 1500 * time.Millisecond}, {Name: "vet", Status: sandbox.GateFail, Duration: 200 * time.Millisecond, OutputTail: "lib/x.go:3: boom <tail>"}}},
			refusal.New("gate-failed", `gate command "vet" exited non-zero on the squashed tree`, "fix the change"),
			[]string{`data-state="refused"`, "would be refused", "gate-failed", `gate command &#34;vet&#34; exited non-zero`, "Fix: fix the change",
				"gate unit passed", "gate vet failed", "lib/x.go:3: boom &lt;tail&gt;", "444444444444"}},
		{"work ref moved", web.Preview{Status: "refused", Target: "main"},
			refusal.New("work-ref-moved", "work ref work/answer is at 5555, the approved commit is 1111", "review the new commit"),
			[]string{"work-ref-moved", "work ref work/answer is at 5555"}},
		{"error", web.Preview{}, errors.New("read verdict: disk on fire"), []string{`data-state="error"`, "could not run: read verdict: disk on fire"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvWith(t, testOps, "127.0.0.1:0", func(o *web.Options) {
				o.Preview = func(ctx context.Context, id, operator string) (web.Preview, error) { return tc.res, tc.err }
			})
			c := e.client()
			csrf := e.login(c, aliceToken)
			r := e.do(c, "POST", "/decisions/"+e.open.ID+"/preview", url.Values{"csrf": {csrf}}, nil)
			if r.status != http.StatusSeeOther {
				t.Fatalf("preview: %d\n%s", r.status, r.body)
			}
			page := waitPage(t, e, c, `data-preview="`+e.open.ID+`" data-state="`+map[bool]string{true: "error", false: "refused"}[tc.res.Status == ""])
			for _, want := range tc.want {
				if !strings.Contains(page, want) {
					t.Errorf("the card lacks %q:\n%s", want, page)
				}
			}
			if !e.decisionOpen() {
				t.Fatal("the preview resolved the decision")
			}
		})
	}
	t.Run("no preview configured", func(t *testing.T) {
		e := newEnv(t, testOps, "127.0.0.1:0")
		c := e.client()
		csrf := e.login(c, aliceToken)
		if strings.Contains(e.get(c, "/decisions").body, "data-preview-button") {
			t.Fatal("a preview button without a Preview function")
		}
		r := e.do(c, "POST", "/decisions/"+e.open.ID+"/preview", url.Values{"csrf": {csrf}}, nil)
		wantIn(t, r, http.StatusNotImplemented, "runs no landing previews")
		wantIn(t, e.get(c, "/decisions"), http.StatusOK, "as alice")
	})
}
