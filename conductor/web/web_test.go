package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/queue"
	"github.com/conductor-dev/conductor/conductor/review"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/testenv"
	"github.com/conductor-dev/conductor/conductor/web"
)

const (
	aliceToken = "alice-token-0123456789abcdef"
	bobToken   = "bob-token-0123456789abcdef00"
	commitA    = "1111111111111111111111111111111111111111"
	patchIDA   = "2222222222222222222222222222222222222222"
)

var testOps = []web.Operator{{Name: "alice", Token: aliceToken}, {Name: "bob", Token: bobToken}}

type env struct {
	t       *testing.T
	store   bus.Store
	runsDir string
	srv     *httptest.Server
	// open and done are the fixture's decisions (open, and resolved+landed).
	open, done bus.Decision
}

func i64(v int64) *int64 { return &v }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// newEnv fills a store and run folders through the real APIs and serves
// them. ops nil: a read-only server.
func newEnv(t *testing.T, ops []web.Operator, listen string) *env {
	return newEnvOn(t, ops, listen, "")
}

// newEnvOn is newEnv on PostgreSQL when databaseURL is set.
func newEnvOn(t *testing.T, ops []web.Operator, listen, databaseURL string) *env {
	t.Helper()
	return newEnvFull(t, ops, listen, databaseURL, nil)
}

// newEnvWith is newEnv with the server's options changed by mod.
func newEnvWith(t *testing.T, ops []web.Operator, listen string, mod func(*web.Options)) *env {
	t.Helper()
	return newEnvFull(t, ops, listen, "", mod)
}

func newEnvFull(t *testing.T, ops []web.Operator, listen, databaseURL string, mod func(*web.Options)) *env {
	t.Helper()
	ctx := context.Background()
	root := t.TempDir()
	st, err := bus.Open(ctx, bus.Options{DataRoot: root, DatabaseURL: databaseURL})
	must(t, err)
	t.Cleanup(func() { st.Close() })
	e := &env{t: t, store: st, runsDir: filepath.Join(root, "runs")}
	e.fill()
	o := web.Options{Store: st, RunsDir: e.runsDir, Listen: listen, Operators: ops, Poll: 20 * time.Millisecond,
		DeadLetters: &queue.Embedded{Store: st, Key: "tasks"}, QueueName: "embedded tasks",
		ModelSlots: st.(queue.SlotStore).SlotsInUse}
	if mod != nil {
		mod(&o)
	}
	s, err := web.New(o)
	must(t, err)
	e.srv = httptest.NewServer(s)
	t.Cleanup(e.srv.Close)
	t.Cleanup(s.Close)
	return e
}

func (e *env) fill() {
	t, ctx := e.t, context.Background()
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	// A finished run: store row, folder, checkpoints, a review, a verdict.
	done := bus.Run{ID: "r-done", TaskID: "t-answer", Session: "s1", Role: "implementer", Status: runrec.StatusSucceeded,
		ModelAlias: "ollama-qwen", Model: "qwen2.5-coder:14b", PromptTokens: i64(100), CompletionTokens: i64(23), TotalTokens: i64(123),
		Steps: 4, PatchID: patchIDA, StartedAt: start, FinishedAt: start.Add(95 * time.Second)}
	must(t, e.store.PutRun(ctx, done))
	dir := runrec.Dir(filepath.Join(e.runsDir, "r-done"))
	must(t, dir.WriteResult(runrec.Result{RunID: "r-done", TaskID: "t-answer", Session: "s1", Role: "implementer",
		Status: runrec.StatusSucceeded, ModelAlias: "ollama-qwen", Steps: 4, StartedAt: start, FinishedAt: done.FinishedAt, PatchID: patchIDA}))
	must(t, runrec.WriteFileAtomic(dir.Path(runrec.TaskFile), []byte(`{"taskVersion":1,"id":"t-answer","runtime":"pi","harness":"code","maxSteps":12}`), 0o644))
	writeTranscript(t, dir, `{"type":"model","time":"2026-12-01T10:00:05Z","step":1,"message":{"role":"assistant","content":"I will read the file <script>alert(1)</script>","tool_calls":[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"lib/util.go\"}"}}]},"finishReason":"tool_calls"}`,
		`{"type":"tool_result","time":"2026-12-01T10:00:06Z","step":1,"tool":"read_file","content":"package lib\nconst Answer = 41"}`)
	must(t, runrec.WriteFileAtomic(dir.Path(runrec.PatchFile), []byte("diff --git a/lib/util.go b/lib/util.go\nindex 1..2 100644\n--- a/lib/util.go\n+++ b/lib/util.go\n@@ -1,3 +1,3 @@\n package lib\n-const Answer = 41\n+const Answer = 42\n"), 0o644))
	rep := review.Report{RunID: "r-done", WorkRef: "work/answer", Commit: commitA, PatchID: patchIDA, Clean: true,
		Files:  []review.FileStat{{Status: "M", Path: "lib/util.go", Added: 1, Deleted: 1}},
		Checks: []review.Check{{Name: "policy", Status: "pass", Summary: "paths allowed"}}}
	b, _ := json.Marshal(rep)
	must(t, runrec.WriteFileAtomic(dir.Path(review.RecordFile), b, 0o644))
	for step := 1; step <= 2; step++ {
		must(t, e.store.PutCheckpoint(ctx, bus.Checkpoint{RunID: "r-done", Step: step * 2, CreatedAt: start.Add(time.Duration(step) * 30 * time.Second)}))
	}
	_, err := e.store.PutVerdict(ctx, bus.Verdict{RunID: "r-done", WorkRef: "work/answer", Commit: commitA, PatchID: patchIDA, Verdict: bus.VerdictApprove, Reviewer: "conductor-review"})
	must(t, err)
	e.open, err = e.store.RaiseDecision(ctx, bus.Decision{Kind: bus.KindMergeProtected, WorkRef: "work/answer", Commit: commitA, Target: "main", RunID: "r-done", RaisedBy: "conductor-review"})
	must(t, err)
	// An earlier decision, resolved and landed.
	e.done, err = e.store.RaiseDecision(ctx, bus.Decision{Kind: bus.KindMergeProtected, WorkRef: "work/old", Commit: commitA, Target: "main"})
	must(t, err)
	_, err = e.store.ResolveDecision(ctx, e.done.ID, bus.OptionMerge, "carol")
	must(t, err)
	must(t, e.store.PutLanding(ctx, bus.Landing{DecisionID: e.done.ID, Commit: "3333333333333333333333333333333333333333", Target: "main", PatchID: patchIDA, Gate: "passed: go test"}))

	// A running run: a store row and a transcript being written.
	must(t, e.store.PutRun(ctx, bus.Run{ID: "r-live", TaskID: "t-live", Session: "s2", Role: "implementer", Status: runrec.StatusRunning, ModelAlias: "ollama-qwen", Steps: 1, StartedAt: start.Add(time.Hour)}))
	writeTranscript(t, runrec.Dir(filepath.Join(e.runsDir, "r-live")), `{"type":"user","time":"2026-12-01T11:00:00Z","text":"Make the answer 42."}`)

	_, err = e.store.Enqueue(ctx, "tasks", []byte(`{"id":"t-queued"}`))
	must(t, err)
	// A dead letter, a live and a silent worker, a model slot held.
	_, err = e.store.Enqueue(ctx, "tasks", []byte(deadPayload))
	must(t, err)
	// Take both jobs (oldest first), bury the dead one, hand the other back.
	var taken []bus.Job
	for range 2 {
		j, ok, err := e.store.TakeJob(ctx, "tasks", "w1", time.Minute)
		must(t, err)
		if !ok {
			t.Fatal("no job to take")
		}
		taken = append(taken, j)
	}
	j := taken[1]
	must(t, e.store.FinishJob(ctx, taken[0].ID, "w1", bus.JobRelease, ""))
	must(t, e.store.FinishJob(ctx, j.ID, "w1", bus.JobDead, "role <b>nobody</b> has no contract"))
	ws := e.store.(bus.Workers)
	must(t, ws.PutHeartbeat(ctx, bus.Heartbeat{Consumer: "gpu1:4242:1", Host: "gpu1", PID: 4242, Queue: "embedded tasks", Concurrency: 4, InFlight: 3, Finishing: 2, Waiting: 1, TTL: time.Hour}))
	must(t, ws.PutHeartbeat(ctx, bus.Heartbeat{Consumer: "gpu2:77:1", Host: "gpu2", PID: 77, Queue: "embedded tasks", Concurrency: 2, TTL: time.Second,
		SeenAt: time.Now().Add(-10 * time.Minute)}))
	got, err := e.store.(queue.SlotStore).TryAcquireSlot(ctx, "qwen-coder-mlx", "gpu1:4242:7:ab", 2, time.Hour)
	must(t, err)
	if !got {
		t.Fatal("no model slot")
	}
}

// deadPayload is the fixture's dead-lettered job; deadID its payload id.
const deadPayload = `{"runId":"r-deadjob","task":{"taskVersion":1,"id":"t-dead"}}`

var deadID = queue.PayloadID([]byte(deadPayload))

// dead counts the dead letters; queued the jobs waiting.
func (e *env) dead() (dead, queued int) {
	jobs, err := e.store.(bus.Views).ListJobs(context.Background())
	must(e.t, err)
	for _, j := range jobs {
		switch j.State() {
		case "dead":
			dead++
		case "queued":
			queued++
		}
	}
	return dead, queued
}

func writeTranscript(t *testing.T, dir runrec.Dir, lines ...string) {
	t.Helper()
	must(t, os.MkdirAll(string(dir), 0o755))
	f, err := os.OpenFile(dir.Path(runrec.TranscriptFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(t, err)
	defer f.Close()
	for _, l := range lines {
		_, err := f.WriteString(l + "\n")
		must(t, err)
	}
}

// client is one browser tab's cookies.
func (e *env) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type resp struct {
	status int
	body   string
	header http.Header
}

func (e *env) do(c *http.Client, method, path string, form url.Values, hdr map[string]string) resp {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	must(e.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", e.srv.URL)
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	res, err := c.Do(req)
	must(e.t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, body: string(b), header: res.Header}
}

func (e *env) get(c *http.Client, path string) resp { return e.do(c, "GET", path, nil, nil) }

// login opens a session with token and returns the page's CSRF token.
func (e *env) login(c *http.Client, token string) string {
	e.t.Helper()
	r := e.do(c, "POST", "/login", url.Values{"token": {token}, "next": {"/decisions"}}, nil)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/decisions" {
		e.t.Fatalf("login: %d %s", r.status, r.header.Get("Location"))
	}
	return csrfOf(e.t, e.get(c, "/decisions").body)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in the page")
	}
	return m[1]
}

func wantIn(t *testing.T, r resp, status int, parts ...string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body:\n%s", r.status, status, r.body)
	}
	for _, p := range parts {
		if !strings.Contains(r.body, p) {
			t.Errorf("the page lacks %q; body:\n%s", p, r.body)
		}
	}
}

func TestPages(t *testing.T) {
	e := newEnv(t, testOps, "127.0.0.1:0")
	c := e.client()
	e.login(c, aliceToken)
	for _, tc := range []struct {
		path  string
		parts []string
	}{
		{"/runs", []string{`data-run="r-done"`, `data-run="r-live"`, "st-succeeded", "st-running", "ollama-qwen", "implementer",
			">123<", "1m35s", `data-label="runtime">pi<`, `data-label="steps" class="num">4/12<`, `data-label="runtime">–<`, `data-label="checkpoints" class="num">2<`, "2026-12-01 10:01:00Z"}},
		{"/runs/r-done", []string{"I will read the file &lt;script&gt;alert(1)&lt;/script&gt;", "read_file({&#34;path&#34;:&#34;lib/util.go&#34;})",
			`<span class="d-add">&#43;<span class="k-kw">const</span> Answer = <span class="k-num">42</span></span>`,
			`<span class="d-del">-<span class="k-kw">const</span> Answer = <span class="k-num">41</span></span>`, `<span class="d-hunk">@@`,
			patchIDA, "files touched", "policy: paths allowed", "conductor-review", e.open.ID, "a note would never be delivered"}},
		{"/runs/r-live", []string{"Make the answer 42.", `name="text"`, "Add note", `data-offset="`}},
		{"/decisions", []string{e.open.ID, "work/answer", "lib/util.go", "+1", "review record", patchIDA, `data-option="merge"`, `data-option="reject"`,
			"as alice", e.done.ID, "carol", "333333333333", "conductor land " + e.open.ID + " --preview"}},
		{"/queue", []string{"tasks", "1 queued", "st-queued"}},
		{"/landed", []string{"3333333333333333333333333333333333333333", e.done.ID, "carol", "passed: go test", "not audited here"}},
		{"/login", []string{"Operator token"}},
	} {
		t.Run(strings.Trim(tc.path, "/"), func(t *testing.T) {
			r := e.get(c, tc.path)
			wantIn(t, r, http.StatusOK, tc.parts...)
			if strings.Contains(r.body, "<script>alert") {
				t.Errorf("transcript text is not escaped")
			}
			for _, tok := range []string{aliceToken, bobToken} {
				if strings.Contains(r.body, tok) {
					t.Errorf("the page shows an operator token")
				}
			}
			if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
				t.Errorf("CSP %q", csp)
			}
		})
	}
	// Static assets are embedded.
	wantIn(t, e.get(c, "/static/app.js"), http.StatusOK, "EventSource")
	wantIn(t, e.get(c, "/static/style.css"), http.StatusOK, "@media")
	// Bad input: the server answers and keeps serving.
	wantIn(t, e.get(c, "/runs/..%2Fetc"), http.StatusBadRequest, "run id")
	wantIn(t, e.get(c, "/runs/r-missing"), http.StatusNotFound, "r-missing")
	wantIn(t, e.get(c, "/events?view=nope"), http.StatusBadRequest, "no live view")
	wantIn(t, e.get(c, "/events?view=run&id=..."), http.StatusBadRequest, "run id")
	wantIn(t, e.get(c, "/nothing"), http.StatusNotFound)
	wantIn(t, e.get(c, "/runs"), http.StatusOK)
}

// decisionOpen says whether the fixture's open decision is still open.
func (e *env) decisionOpen() bool {
	d, err := e.store.GetDecision(context.Background(), e.open.ID)
	must(e.t, err)
	return d.Open()
}

func (e *env) notes(run string) int {
	v, err := bus.ViewsOf(e.store)
	must(e.t, err)
	ns, err := v.ListNotes(context.Background(), run)
	must(e.t, err)
	return len(ns)
}

func TestMutationsRefused(t *testing.T) {
	e := newEnv(t, testOps, "127.0.0.1:0")
	tab := e.client()
	csrf := e.login(tab, aliceToken)
	anon := e.client()
	mutations := []struct {
		name string
		path string
		form url.Values
	}{
		{"resolve", "/decisions/" + e.open.ID + "/resolve", url.Values{"option": {"merge"}}},
		{"note", "/runs/r-live/notes", url.Values{"text": {"look at lib/"}}},
		{"dead retry", "/queue/dead/" + deadID + "/retry", url.Values{}},
		{"dead drop", "/queue/dead/" + deadID + "/drop", url.Values{}},
		{"logout", "/logout", url.Values{}},
	}
	with := func(f url.Values, k, v string) url.Values {
		g := url.Values{}
		for a, b := range f {
			g[a] = b
		}
		if v != "" {
			g.Set(k, v)
		}
		return g
	}
	for _, m := range mutations {
		for _, tc := range []struct {
			name   string
			client *http.Client
			form   url.Values
			hdr    map[string]string
			want   string
		}{
			{"no token", anon, with(m.form, "csrf", csrf), nil, "operator token is required"},
			{"missing csrf", tab, m.form, nil, "CSRF token is missing or wrong"},
			{"forged csrf", tab, with(m.form, "csrf", strings.Repeat("A", len(csrf))), nil, "CSRF token is missing or wrong"},
			{"cross-origin", tab, with(m.form, "csrf", csrf), map[string]string{"Origin": "http://evil.example"}, "cross-origin"},
			{"cross-site fetch", tab, with(m.form, "csrf", csrf), map[string]string{"Sec-Fetch-Site": "cross-site"}, "cross-origin"},
			{"wrong bearer", anon, m.form, map[string]string{"Authorization": "Bearer not-a-token-at-all-000"}, "operator token is required"},
		} {
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				r := e.do(tc.client, "POST", m.path, tc.form, tc.hdr)
				wantIn(t, r, http.StatusForbidden, tc.want)
				if dead, _ := e.dead(); !e.decisionOpen() || e.notes("r-live") != 0 || dead != 1 {
					t.Fatal("a refused mutation changed the store")
				}
			})
		}
	}
	// The session still works after all that.
	wantIn(t, e.get(tab, "/decisions"), http.StatusOK, "as alice")

	t.Run("read-only server", func(t *testing.T) {
		ro := newEnv(t, nil, "127.0.0.1:0")
		c := ro.client()
		wantIn(t, ro.get(c, "/decisions"), http.StatusOK, "Read-only")
		r := ro.do(c, "POST", "/decisions/"+ro.open.ID+"/resolve", url.Values{"option": {"merge"}}, nil)
		wantIn(t, r, http.StatusForbidden, "no operator token is configured")
		r = ro.do(c, "POST", "/login", url.Values{"token": {aliceToken}}, nil)
		wantIn(t, r, http.StatusForbidden, "no operator token is configured")
		if !ro.decisionOpen() {
			t.Fatal("resolved without a token")
		}
	})
	t.Run("wrong login", func(t *testing.T) {
		c := e.client()
		r := e.do(c, "POST", "/login", url.Values{"token": {"nope-nope-nope-nope-nope"}}, nil)
		wantIn(t, r, http.StatusForbidden, "not an operator")
		if strings.Contains(r.body, "nope-nope") {
			t.Error("the login page echoes the token")
		}
	})
	t.Run("login redirect stays local", func(t *testing.T) {
		c := e.client()
		r := e.do(c, "POST", "/login", url.Values{"token": {bobToken}, "next": {"//evil.example/x"}}, nil)
		if r.status != http.StatusSeeOther || r.header.Get("Location") != "/runs" {
			t.Fatalf("%d %q", r.status, r.header.Get("Location"))
		}
		if sc := r.header.Get("Set-Cookie"); !strings.Contains(sc, "HttpOnly") || !strings.Contains(sc, "SameSite=Strict") {
			t.Fatalf("session cookie %q", sc)
		}
	})
}

func TestResolveTwiceFromTwoTabs(t *testing.T) {
	e := newEnv(t, testOps, "127.0.0.1:0")
	tab1, tab2 := e.client(), e.client()
	csrf1, csrf2 := e.login(tab1, aliceToken), e.login(tab2, bobToken)
	// Both tabs show the open decision; alice merges first.
	r := e.do(tab1, "POST", "/decisions/"+e.open.ID+"/resolve", url.Values{"option": {"merge"}, "csrf": {csrf1}}, nil)
	if r.status != http.StatusSeeOther {
		t.Fatalf("first resolve: %d %s", r.status, r.body)
	}
	d, err := e.store.GetDecision(context.Background(), e.open.ID)
	must(t, err)
	if d.Option != "merge" || d.ResolvedBy != "alice" {
		t.Fatalf("decision %+v: want merge by alice (the token's operator)", d)
	}
	// Bob's tab, still showing the buttons, rejects: refused, nothing changed.
	r = e.do(tab2, "POST", "/decisions/"+e.open.ID+"/resolve", url.Values{"option": {"reject"}, "csrf": {csrf2}}, nil)
	wantIn(t, r, http.StatusConflict, "decision-already-resolved", "already resolved", "alice", "nothing was changed")
	d2, err := e.store.GetDecision(context.Background(), e.open.ID)
	must(t, err)
	if d2.Option != "merge" || d2.ResolvedBy != "alice" || !d2.ResolvedAt.Equal(d.ResolvedAt) {
		t.Fatalf("the second resolve changed the decision: %+v", d2)
	}
	// The server keeps serving, and shows the answer.
	wantIn(t, e.get(tab2, "/decisions"), http.StatusOK, "No open decisions.", "alice")

	// An option the decision does not offer, and a decision that does not exist.
	other, err := e.store.RaiseDecision(context.Background(), bus.Decision{Kind: "ask", Options: []string{"yes", "no"}})
	must(t, err)
	r = e.do(tab2, "POST", "/decisions/"+other.ID+"/resolve", url.Values{"option": {"merge"}, "csrf": {csrf2}}, nil)
	wantIn(t, r, http.StatusConflict, "decision-option-not-offered")
	r = e.do(tab2, "POST", "/decisions/d-nope/resolve", url.Values{"option": {"merge"}, "csrf": {csrf2}}, nil)
	wantIn(t, r, http.StatusNotFound, "no decision d-nope")
	r = e.do(tab2, "POST", "/decisions/"+other.ID+"/resolve", url.Values{"csrf": {csrf2}}, nil)
	wantIn(t, r, http.StatusBadRequest, "an option")
}

func TestNotes(t *testing.T) {
	e := newEnv(t, testOps, "127.0.0.1:0")
	tab := e.client()
	csrf := e.login(tab, aliceToken)
	note := func(run, text string) resp {
		return e.do(tab, "POST", "/runs/"+run+"/notes", url.Values{"text": {text}, "csrf": {csrf}}, nil)
	}
	wantIn(t, note("r-done", "too late"), http.StatusConflict, "run r-done is succeeded: a note would never be delivered")
	if e.notes("r-done") != 0 {
		t.Fatal("a note to a finished run was stored")
	}
	wantIn(t, note("r-nope", "hello"), http.StatusNotFound, "not in the store")
	wantIn(t, note("r-live", "   "), http.StatusBadRequest, "empty")
	wantIn(t, note("r-live", strings.Repeat("x", 9000)), http.StatusBadRequest, "at most")
	if e.notes("r-live") != 0 {
		t.Fatal("a refused note was stored")
	}
	r := note("r-live", "check lib/util.go first")
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/runs/r-live#notes" {
		t.Fatalf("note: %d %s", r.status, r.body)
	}
	if e.notes("r-live") != 1 {
		t.Fatal("the note was not stored")
	}
	wantIn(t, e.get(tab, "/runs/r-live"), http.StatusOK, "check lib/util.go first", "pending")
}

func TestBearer(t *testing.T) {
	e := newEnv(t, testOps, "127.0.0.1:0")
	c := e.client()
	r := e.do(c, "POST", "/decisions/"+e.open.ID+"/resolve", url.Values{"option": {"reject"}},
		map[string]string{"Authorization": "Bearer " + bobToken, "Origin": ""})
	if r.status != http.StatusSeeOther {
		t.Fatalf("bearer resolve: %d %s", r.status, r.body)
	}
	d, err := e.store.GetDecision(context.Background(), e.open.ID)
	must(t, err)
	if d.Option != "reject" || d.ResolvedBy != "bob" {
		t.Fatalf("decision %+v", d)
	}
}

func TestListenElsewhere(t *testing.T) {
	st, err := bus.Open(context.Background(), bus.Options{DataRoot: t.TempDir()})
	must(t, err)
	defer st.Close()
	for _, addr := range []string{"0.0.0.0:8377", ":8377", "192.0.2.1:80", "[::]:80"} {
		if _, err := web.New(web.Options{Store: st, Listen: addr}); !errors.Is(err, web.ErrTokenRequired) {
			t.Errorf("%s without a token: %v, want ErrTokenRequired", addr, err)
		}
		if err := web.Run(context.Background(), web.Options{Store: st, Listen: addr}); !errors.Is(err, web.ErrTokenRequired) {
			t.Errorf("Run on %s without a token: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:1", "[::1]:2", "127.1.2.3:4"} {
		if !web.Loopback(addr) {
			t.Errorf("%s is loopback", addr)
		}
	}
	// Bound elsewhere with a token: every page needs it.
	e := newEnv(t, testOps, "0.0.0.0:8377")
	c := e.client()
	r := e.get(c, "/runs")
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/login?next=") {
		t.Fatalf("anonymous read off loopback: %d %q", r.status, r.header.Get("Location"))
	}
	wantIn(t, e.get(c, "/events?view=runs"), http.StatusForbidden)
	wantIn(t, e.get(c, "/login"), http.StatusOK)
	e.login(c, aliceToken)
	wantIn(t, e.get(c, "/runs"), http.StatusOK, "r-done")
}

func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "tokens")
		must(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	ops, err := web.LoadTokenFile(write("# operators\nalice:" + aliceToken + "\n\n bob : " + bobToken + "\n"))
	must(t, err)
	if len(ops) != 2 || ops[1].Name != "bob" || ops[1].Token != bobToken {
		t.Fatalf("%+v", ops)
	}
	for name, body := range map[string]string{
		"no colon":   "alice " + aliceToken,
		"short":      "alice:short",
		"same token": "alice:" + aliceToken + "\nbob:" + aliceToken,
		"bad name":   "al ice:" + aliceToken,
		"empty":      "# nothing\n",
	} {
		_, err := web.LoadTokenFile(write(body))
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), aliceToken) {
			t.Errorf("%s: the error shows the token: %v", name, err)
		}
	}
}

// TestLiveTranscript reads the run page's event stream while the run's
// transcript grows.
func TestLiveTranscript(t *testing.T) {
	e := newEnv(t, testOps, "127.0.0.1:0")
	page := e.get(e.client(), "/runs/r-live").body
	m := regexp.MustCompile(`data-offset="(\d+)"`).FindStringSubmatch(page)
	h := regexp.MustCompile(`data-hash="([0-9a-f]+)"`).FindStringSubmatch(page)
	if m == nil || h == nil {
		t.Fatal("no offset or hash in the run page")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/events?view=run&id=r-live&offset="+m[1]+"&hash="+h[1], nil)
	res, err := http.DefaultClient.Do(req)
	must(t, err)
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	writeTranscript(t, runrec.Dir(filepath.Join(e.runsDir, "r-live")),
		`{"type":"model","time":"2026-12-01T11:00:01Z","step":1,"message":{"role":"assistant","content":"a new turn arrives"}}`)
	events := readEvents(t, res.Body)
	ev := waitEvent(t, events, "transcript")
	if !strings.Contains(ev.data, "a new turn arrives") || strings.Contains(ev.data, "Make the answer 42.") {
		t.Fatalf("transcript event: %q", ev.data)
	}
	// The run ends: the live part changes.
	r, err := e.store.GetRun(context.Background(), "r-live")
	must(t, err)
	r.Status, r.FinishedAt = runrec.StatusSucceeded, r.StartedAt.Add(time.Minute)
	must(t, e.store.PutRun(context.Background(), r))
	for {
		ev := waitEvent(t, events, "live")
		if strings.Contains(ev.data, "st-succeeded") {
			break
		}
	}
}

type sse struct{ event, id, data string }

func readEvents(t *testing.T, body io.Reader) <-chan sse {
	ch := make(chan sse, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 64<<10), 8<<20)
		var cur sse
		var data []string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.event != "" {
					cur.data = strings.Join(data, "\n")
					ch <- cur
				}
				cur, data = sse{}, nil
			case strings.HasPrefix(line, "event: "):
				cur.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				cur.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				data = append(data, strings.TrimPrefix(line, "data: "))
			}
		}
	}()
	return ch
}

// waitEvent waits for the next event named name (until the test's deadline).
func waitEvent(t *testing.T, ch <-chan sse, name string) sse {
	t.Helper()
	var deadline <-chan time.Time
	if d, ok := t.Deadline(); ok {
		deadline = time.After(time.Until(d) - 5*time.Second)
	}
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the event stream ended before a %q event", name)
			}
			if ev.event == name {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %q event before the test's deadline", name)
		}
	}
}

// TestRunStops: Run serves on a real port and returns when its context
// ends, even with a live page open.
func TestRunStops(t *testing.T) {
	st, err := bus.Open(context.Background(), bus.Options{DataRoot: t.TempDir()})
	must(t, err)
	defer st.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- web.Run(ctx, web.Options{Store: st, Listen: "127.0.0.1:0", Poll: 10 * time.Millisecond,
			Ready: func(addr string) { ready <- addr }})
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	res, err := http.Get("http://" + addr + "/events?view=runs")
	must(t, err)
	defer res.Body.Close()
	events := readEvents(t, res.Body)
	waitEvent(t, events, "live")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel: %v", err)
	}
	for range events {
	}
}

// TestSecretsRedacted: a credential of the server's environment, or an
// operator token, never leaves the server, even when a run folder holds it.
func TestSecretsRedacted(t *testing.T) {
	const apiKey = "sk-live-SECRET+key/0123456789"
	root := t.TempDir()
	st, err := bus.Open(context.Background(), bus.Options{DataRoot: root})
	must(t, err)
	defer st.Close()
	runs := filepath.Join(root, "runs")
	must(t, st.PutRun(context.Background(), bus.Run{ID: "r-leak", Status: runrec.StatusRunning, Outcome: "key " + apiKey + " and " + aliceToken}))
	dir := runrec.Dir(filepath.Join(runs, "r-leak"))
	writeTranscript(t, dir, `{"type":"tool_result","tool":"run_command","content":"OPENAI_API_KEY=`+apiKey+`"}`)
	s, err := web.New(web.Options{Store: st, RunsDir: runs, Operators: testOps, Secrets: []string{apiKey, "short"}, Poll: 10 * time.Millisecond})
	must(t, err)
	srv := httptest.NewServer(s)
	defer srv.Close()
	e := &env{t: t, store: st, runsDir: runs, srv: srv}
	c := e.client()
	for _, path := range []string{"/runs/r-leak", "/runs"} {
		r := e.get(c, path)
		for _, leak := range []string{apiKey, "sk-live-SECRET&#43;key", aliceToken} {
			if strings.Contains(r.body, leak) {
				t.Errorf("%s shows %q", path, leak)
			}
		}
	}
	wantIn(t, e.get(c, "/runs/r-leak"), http.StatusOK, "OPENAI_API_KEY=[redacted]", "key [redacted] and [redacted]")
	// And over the live stream.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/events?view=run&id=r-leak&offset=0", nil)
	res, err := http.DefaultClient.Do(req)
	must(t, err)
	defer res.Body.Close()
	events := readEvents(t, res.Body)
	for _, name := range []string{"transcript", "live"} {
		ev := waitEvent(t, events, name)
		if strings.Contains(ev.data, "sk-live-SECRET") || strings.Contains(ev.data, aliceToken) || !strings.Contains(ev.data, web.Redacted) {
			t.Errorf("%s event not redacted: %q", name, ev.data)
		}
	}
}

// TestHostCheck: on loopback, a request naming another host (a page of
// another site resolving to 127.0.0.1: DNS rebinding) is refused.
func TestHostCheck(t *testing.T) {
	e := newEnv(t, testOps, "127.0.0.1:0")
	c := e.client()
	for host, want := range map[string]int{
		"evil.example:8377": http.StatusMisdirectedRequest,
		"evil.example":      http.StatusMisdirectedRequest,
		"localhost:8377":    http.StatusOK,
		"127.0.0.1":         http.StatusOK,
		"[::1]:8377":        http.StatusOK,
	} {
		req, err := http.NewRequest("GET", e.srv.URL+"/runs", nil)
		must(t, err)
		req.Host = host
		res, err := c.Do(req)
		must(t, err)
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, res.StatusCode, want)
		}
	}
}

// TestPostgres: the pages and a decision answered twice, on PostgreSQL.
func TestPostgres(t *testing.T) {
	e := newEnvOn(t, testOps, "127.0.0.1:0", testenv.Postgres(t))
	tab1, tab2 := e.client(), e.client()
	csrf1, csrf2 := e.login(tab1, aliceToken), e.login(tab2, bobToken)
	for _, p := range []string{"/runs", "/runs/r-done", "/decisions", "/queue", "/landed"} {
		wantIn(t, e.get(tab1, p), http.StatusOK)
	}
	wantIn(t, e.get(tab1, "/runs"), http.StatusOK, `data-label="checkpoints" class="num">2<`)
	r := e.do(tab1, "POST", "/decisions/"+e.open.ID+"/resolve", url.Values{"option": {"merge"}, "csrf": {csrf1}}, nil)
	if r.status != http.StatusSeeOther {
		t.Fatalf("resolve: %d %s", r.status, r.body)
	}
	r = e.do(tab2, "POST", "/decisions/"+e.open.ID+"/resolve", url.Values{"option": {"reject"}, "csrf": {csrf2}}, nil)
	wantIn(t, r, http.StatusConflict, "already resolved", "alice")
	d, err := e.store.GetDecision(context.Background(), e.open.ID)
	must(t, err)
	if d.Option != "merge" || d.ResolvedBy != "alice" {
		t.Fatalf("decision %+v", d)
	}
}

// TestQueueFleet: the Queue page shows the dead letters with retry and
// drop buttons (for an operator), live and gone workers from their
// heartbeats, and the model slots in use; retry and drop do what `conductor
// queue dead retry|drop` does, once.
func TestQueueFleet(t *testing.T) {
	e := newEnv(t, testOps, "127.0.0.1:0")
	anon := e.client()
	r := e.get(anon, "/queue")
	wantIn(t, r, http.StatusOK, deadID, "r-deadjob", "role &lt;b&gt;nobody&lt;/b&gt; has no contract",
		"gpu1</code> pid 4242", "3 / 4<br><small>2 finishing, 1 waiting</small>", "live", "gpu2</code> pid 77", "gone (silent)",
		"qwen-coder-mlx", "1 / 2", `<th class="num">waiting</th>`, `<td class="num">0</td>`, "gpu1:4242:7:ab", "Log in</a> to retry")
	if strings.Contains(r.body, `data-retry="`) {
		t.Error("retry buttons shown without a login")
	}
	tab := e.client()
	csrf := e.login(tab, aliceToken)
	wantIn(t, e.get(tab, "/queue"), http.StatusOK, `data-retry="`+deadID+`"`, `data-drop="`+deadID+`"`)

	r = e.do(tab, "POST", "/queue/dead/"+deadID+"/retry", url.Values{"csrf": {csrf}}, nil)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/queue#dead" {
		t.Fatalf("retry: %d %s %s", r.status, r.header.Get("Location"), r.body)
	}
	if dead, queued := e.dead(); dead != 0 || queued != 2 {
		t.Fatalf("after retry: %d dead, %d queued; want 0 and 2", dead, queued)
	}
	// Twice (another tab): refused, nothing changed.
	r = e.do(tab, "POST", "/queue/dead/"+deadID+"/retry", url.Values{"csrf": {csrf}}, nil)
	wantIn(t, r, http.StatusNotFound, "no dead letter "+deadID+" on embedded tasks", "nothing was changed")
	if dead, queued := e.dead(); dead != 0 || queued != 2 {
		t.Fatalf("after a second retry: %d dead, %d queued", dead, queued)
	}
	r = e.do(tab, "POST", "/queue/dead/..%2Fx/drop", url.Values{"csrf": {csrf}}, nil)
	if r.status != http.StatusBadRequest && r.status != http.StatusNotFound {
		t.Errorf("a bad id: %d", r.status)
	}

	// Drop, by run id, as the CLI accepts.
	ctx := context.Background()
	_, err := e.store.Enqueue(ctx, "tasks", []byte(`{"runId":"r-gone","task":{"taskVersion":1,"id":"t-gone"}}`))
	must(t, err)
	for {
		j, ok, err := e.store.TakeJob(ctx, "tasks", "w2", time.Minute)
		must(t, err)
		if !ok {
			t.Fatal("the new job was not taken")
		}
		if strings.Contains(string(j.Payload), "r-gone") {
			must(t, e.store.FinishJob(ctx, j.ID, "w2", bus.JobDead, "bad"))
			break
		}
	}
	r = e.do(tab, "POST", "/queue/dead/r-gone/drop", url.Values{"csrf": {csrf}}, nil)
	if r.status != http.StatusSeeOther {
		t.Fatalf("drop: %d %s", r.status, r.body)
	}
	if dead, _ := e.dead(); dead != 0 {
		t.Fatalf("after drop: %d dead", dead)
	}
	if r := e.get(tab, "/queue"); strings.Contains(r.body, "r-gone") {
		t.Error("the dropped dead letter is still shown")
	}
}
