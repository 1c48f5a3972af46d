// Package bustest is the conformance suite of bus.Store: every backend (and
// any fake another package builds) must pass Run. It checks the semantics
// the Store comments promise, the refusals and "nothing changed" after them,
// and atomicity under 50 concurrent goroutines.
package bustest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
)

// Factory opens a new, empty store whose clock is now. The store is closed
// by the suite.
type Factory func(t *testing.T, now func() time.Time) bus.Store

// Clock is a settable test clock.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts a clock at a fixed instant.
func NewClock() *Clock { return &Clock{t: time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func i64(v int64) *int64 { return &v }

// Run runs the whole suite.
func Run(t *testing.T, open Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s bus.Store, c *Clock)
	}{
		{"runs", testRuns},
		{"checkpoints", testCheckpoints},
		{"verdicts", testVerdicts},
		{"decisions", testDecisions},
		{"decision refusals change nothing", testDecisionRefusals},
		{"landings", testLandings},
		{"notes", testNotes},
		{"claims", testClaims},
		{"jobs", testJobs},
		{"job leases", testJobLeases},
		{"concurrent claims", testConcurrentClaims},
		{"concurrent takes", testConcurrentTakes},
		{"concurrent resolves", testConcurrentResolves},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewClock()
			s := open(t, c.Now)
			t.Cleanup(func() { s.Close() })
			tc.fn(t, s, c)
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want %v", err, target)
	}
}

func wantRefusal(t *testing.T, err error, code string) {
	t.Helper()
	wantErr(t, err, bus.ErrConflict)
	var r *refusal.Refusal
	if !errors.As(err, &r) {
		t.Fatalf("error %v is not a refusal", err)
	}
	if string(r.Code) != code || r.Fix == "" {
		t.Fatalf("refusal code %q fix %q, want code %q and a fix", r.Code, r.Fix, code)
	}
}

func testRuns(t *testing.T, s bus.Store, c *Clock) {
	ctx := context.Background()
	start := c.Now()
	r1 := bus.Run{
		ID: "r-1", TaskID: "t-a", Session: "worker-1", Role: "worker", Status: "running",
		ModelAlias: "local", HarnessAlias: "doc-writer", Model: "qwen", Steps: 0, Repo: "/repo/.git", BaseCommit: "abc",
		Worktree: "/wt/1", Branch: "work/1", StartedAt: start,
	}
	must(t, s.PutRun(ctx, r1))
	got, err := s.GetRun(ctx, "r-1")
	must(t, err)
	if !equalRun(got, r1) {
		t.Fatalf("GetRun = %+v, want %+v", got, r1)
	}
	if got.PromptTokens != nil || got.TotalTokens != nil {
		t.Fatalf("unknown tokens came back as %v/%v, want nil", got.PromptTokens, got.TotalTokens)
	}
	// Replace by id: the finished run.
	r1.Status, r1.Steps, r1.PatchID, r1.Outcome = "succeeded", 7, "pid", "done"
	r1.PromptTokens, r1.CompletionTokens, r1.TotalTokens = i64(100), i64(0), i64(100)
	r1.FinishedAt = start.Add(time.Minute)
	must(t, s.PutRun(ctx, r1))
	got, err = s.GetRun(ctx, "r-1")
	must(t, err)
	if !equalRun(got, r1) {
		t.Fatalf("after replace GetRun = %+v, want %+v", got, r1)
	}
	if got.CompletionTokens == nil || *got.CompletionTokens != 0 {
		t.Fatalf("a zero token count must stay 0, not unknown: %v", got.CompletionTokens)
	}
	for i, id := range []string{"r-2", "r-3", "r-4"} {
		must(t, s.PutRun(ctx, bus.Run{ID: id, TaskID: "t-b", Session: "worker-2", Status: "failed",
			StartedAt: start.Add(time.Duration(i+1) * time.Second)}))
	}
	for _, tc := range []struct {
		name string
		f    bus.RunFilter
		want []string
	}{
		{"all newest first", bus.RunFilter{}, []string{"r-4", "r-3", "r-2", "r-1"}},
		{"by task", bus.RunFilter{TaskID: "t-a"}, []string{"r-1"}},
		{"by session", bus.RunFilter{Session: "worker-2"}, []string{"r-4", "r-3", "r-2"}},
		{"by status", bus.RunFilter{Status: "succeeded"}, []string{"r-1"}},
		{"limit", bus.RunFilter{Limit: 2}, []string{"r-4", "r-3"}},
		{"no match", bus.RunFilter{TaskID: "nope"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs, err := s.ListRuns(ctx, tc.f)
			must(t, err)
			var ids []string
			for _, r := range runs {
				ids = append(ids, r.ID)
			}
			if !slices.Equal(ids, tc.want) {
				t.Fatalf("ListRuns(%+v) = %v, want %v", tc.f, ids, tc.want)
			}
		})
	}
	_, err = s.GetRun(ctx, "r-nope")
	wantErr(t, err, bus.ErrNotFound)
	if err := s.PutRun(ctx, bus.Run{}); err == nil {
		t.Fatal("PutRun with no id succeeded")
	}
}

func equalRun(a, b bus.Run) bool {
	eq := func(x, y *int64) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	if !eq(a.PromptTokens, b.PromptTokens) || !eq(a.CompletionTokens, b.CompletionTokens) || !eq(a.TotalTokens, b.TotalTokens) {
		return false
	}
	if !a.StartedAt.Equal(b.StartedAt) || !a.FinishedAt.Equal(b.FinishedAt) {
		return false
	}
	a.PromptTokens, a.CompletionTokens, a.TotalTokens = nil, nil, nil
	b.PromptTokens, b.CompletionTokens, b.TotalTokens = nil, nil, nil
	a.StartedAt, a.FinishedAt, b.StartedAt, b.FinishedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return a == b
}

func testCheckpoints(t *testing.T, s bus.Store, c *Clock) {
	ctx := context.Background()
	_, err := s.LatestCheckpoint(ctx, "r-1")
	wantErr(t, err, bus.ErrNotFound)
	for step := 1; step <= 3; step++ {
		c.Advance(time.Second)
		must(t, s.PutCheckpoint(ctx, bus.Checkpoint{
			RunID: "r-1", Step: step, History: []byte(fmt.Sprintf(`[{"step":%d}]`, step)),
			Files:    []bus.FileHash{{Path: "a.go", Hash: fmt.Sprint("h", step)}, {Path: "gone.txt", Hash: ""}},
			Worktree: "/wt", Branch: "work/1", Workspace: "stack-repo", HarnessAlias: "code-harness",
		}))
	}
	must(t, s.PutCheckpoint(ctx, bus.Checkpoint{RunID: "r-other", Step: 9}))
	got, err := s.LatestCheckpoint(ctx, "r-1")
	must(t, err)
	if got.Step != 3 || string(got.History) != `[{"step":3}]` || got.Worktree != "/wt" || got.Branch != "work/1" || got.Workspace != "stack-repo" || got.HarnessAlias != "code-harness" {
		t.Fatalf("LatestCheckpoint = %+v", got)
	}
	if len(got.Files) != 2 || got.Files[0] != (bus.FileHash{Path: "a.go", Hash: "h3"}) || got.Files[1].Hash != "" {
		t.Fatalf("files = %+v", got.Files)
	}
	if !got.CreatedAt.Equal(c.Now()) {
		t.Fatalf("created %v, want the store clock %v", got.CreatedAt, c.Now())
	}
	other, err := s.LatestCheckpoint(ctx, "r-other")
	must(t, err)
	if other.Step != 9 || other.Files == nil || len(other.Files) != 0 || len(other.History) != 0 {
		t.Fatalf("other run's checkpoint = %+v", other)
	}
	if err := s.PutCheckpoint(ctx, bus.Checkpoint{RunID: "r-1", Step: 4, History: []byte("{not json")}); err == nil {
		t.Fatal("a checkpoint with history that is not JSON was stored")
	}
	if got, _ := s.LatestCheckpoint(ctx, "r-1"); got.Step != 3 {
		t.Fatalf("after a rejected checkpoint the latest step is %d", got.Step)
	}
}

func testVerdicts(t *testing.T, s bus.Store, c *Clock) {
	ctx := context.Background()
	_, err := s.LatestVerdict(ctx, "work/a")
	wantErr(t, err, bus.ErrNotFound)
	v1, err := s.PutVerdict(ctx, bus.Verdict{RunID: "r-1", WorkRef: "work/a", Commit: "c1", PatchID: "p1",
		Verdict: bus.VerdictRequestChanges, Reviewer: "review", Findings: []string{"missing test", "gofmt"}})
	must(t, err)
	if v1.ID == 0 || !v1.CreatedAt.Equal(c.Now()) {
		t.Fatalf("PutVerdict did not assign id and time: %+v", v1)
	}
	c.Advance(time.Second)
	v2, err := s.PutVerdict(ctx, bus.Verdict{RunID: "r-2", WorkRef: "work/a", Commit: "c2", PatchID: "p2",
		Verdict: bus.VerdictApprove, Reviewer: "review"})
	must(t, err)
	_, err = s.PutVerdict(ctx, bus.Verdict{WorkRef: "work/b", Commit: "c9", Verdict: bus.VerdictApprove})
	must(t, err)
	if v2.ID <= v1.ID {
		t.Fatalf("verdict ids not increasing: %d then %d", v1.ID, v2.ID)
	}
	got, err := s.LatestVerdict(ctx, "work/a")
	must(t, err)
	if got.ID != v2.ID || got.Commit != "c2" || got.Verdict != bus.VerdictApprove || got.PatchID != "p2" ||
		got.RunID != "r-2" || got.Findings == nil || len(got.Findings) != 0 || !got.CreatedAt.Equal(c.Now()) {
		t.Fatalf("LatestVerdict = %+v, want the approve of c2", got)
	}
	for _, bad := range []bus.Verdict{
		{WorkRef: "work/a", Commit: "c3", Verdict: "maybe"},
		{Commit: "c3", Verdict: bus.VerdictApprove},
		{WorkRef: "work/a", Verdict: bus.VerdictApprove},
	} {
		if _, err := s.PutVerdict(ctx, bad); err == nil {
			t.Fatalf("PutVerdict(%+v) succeeded", bad)
		}
	}
	if got, _ := s.LatestVerdict(ctx, "work/a"); got.ID != v2.ID {
		t.Fatal("a rejected verdict changed the latest verdict")
	}
	// Findings round-trip in order.
	v3, err := s.PutVerdict(ctx, bus.Verdict{WorkRef: "work/c", Commit: "c", Verdict: bus.VerdictRequestChanges,
		Findings: []string{"b", "a"}})
	must(t, err)
	got, err = s.LatestVerdict(ctx, "work/c")
	must(t, err)
	if got.ID != v3.ID || !slices.Equal(got.Findings, []string{"b", "a"}) {
		t.Fatalf("findings = %v", got.Findings)
	}
}

var idPattern = regexp.MustCompile(`^d-[a-z2-7]{8}$`)

func raise(t *testing.T, s bus.Store, ref string) bus.Decision {
	t.Helper()
	d, err := s.RaiseDecision(context.Background(), bus.Decision{
		Kind: bus.KindMergeProtected, RaisedBy: "alice", Repo: "/repo/.git", WorkRef: ref,
		Commit: "0123456789abcdef0123456789abcdef01234567", Target: "main", RunID: "r-1", Issue: 12,
	})
	must(t, err)
	return d
}

func testDecisions(t *testing.T, s bus.Store, c *Clock) {
	ctx := context.Background()
	d := raise(t, s, "work/a")
	if !idPattern.MatchString(d.ID) {
		t.Fatalf("decision id %q does not match %s", d.ID, idPattern)
	}
	if !slices.Equal(d.Options, []string{bus.OptionMerge, bus.OptionReject}) {
		t.Fatalf("default options = %v", d.Options)
	}
	if !d.Open() || !d.RaisedAt.Equal(c.Now()) {
		t.Fatalf("raised decision = %+v", d)
	}
	got, err := s.GetDecision(ctx, d.ID)
	must(t, err)
	if fmt.Sprint(got) != fmt.Sprint(d) {
		t.Fatalf("GetDecision = %+v, want %+v", got, d)
	}
	c.Advance(time.Second)
	d2, err := s.RaiseDecision(ctx, bus.Decision{Kind: "deploy.prod", Options: []string{"go", "wait", "abort"}})
	must(t, err)
	ids := map[string]bool{d.ID: true, d2.ID: true}
	for i := range 40 {
		x := raise(t, s, fmt.Sprint("work/many-", i))
		if ids[x.ID] {
			t.Fatalf("decision id %s given twice", x.ID)
		}
		ids[x.ID] = true
	}
	c.Advance(time.Second)
	res, err := s.ResolveDecision(ctx, d.ID, bus.OptionMerge, "bob")
	must(t, err)
	if res.Open() || res.Option != bus.OptionMerge || res.ResolvedBy != "bob" || !res.ResolvedAt.Equal(c.Now()) {
		t.Fatalf("resolved = %+v", res)
	}
	got, err = s.GetDecision(ctx, d.ID)
	must(t, err)
	if got.Option != bus.OptionMerge || got.ResolvedBy != "bob" || !got.ResolvedAt.Equal(c.Now()) ||
		got.WorkRef != "work/a" || got.Issue != 12 || got.RunID != "r-1" || got.Repo != "/repo/.git" {
		t.Fatalf("GetDecision after resolve = %+v", got)
	}
	res2, err := s.ResolveDecision(ctx, d2.ID, "wait", "carol")
	must(t, err)
	if res2.Option != "wait" {
		t.Fatalf("custom option resolve = %+v", res2)
	}
	all, err := s.ListDecisions(ctx, false)
	must(t, err)
	if len(all) != 42 || all[len(all)-1].ID != d.ID || all[len(all)-2].ID != d2.ID {
		t.Fatalf("ListDecisions(all): %d decisions, oldest last = %s", len(all), all[len(all)-1].ID)
	}
	open, err := s.ListDecisions(ctx, true)
	must(t, err)
	if len(open) != 40 {
		t.Fatalf("ListDecisions(open) = %d, want 40", len(open))
	}
	for _, o := range open {
		if !o.Open() {
			t.Fatalf("resolved decision %s listed as open", o.ID)
		}
	}
	for _, bad := range []bus.Decision{
		{},
		{Kind: bus.KindMergeProtected, Commit: "c", Target: "main"},
		{Kind: bus.KindMergeProtected, WorkRef: "w", Target: "main"},
		{Kind: bus.KindMergeProtected, WorkRef: "w", Commit: "c"},
		{Kind: "x", Options: []string{"a", "a"}},
		{Kind: "x", Options: []string{""}},
	} {
		if _, err := s.RaiseDecision(ctx, bad); err == nil {
			t.Fatalf("RaiseDecision(%+v) succeeded", bad)
		}
	}
	if n, _ := s.ListDecisions(ctx, false); len(n) != 42 {
		t.Fatalf("rejected raises stored something: %d decisions", len(n))
	}
}

func testDecisionRefusals(t *testing.T, s bus.Store, c *Clock) {
	ctx := context.Background()
	d := raise(t, s, "work/a")
	// Unknown id.
	_, err := s.ResolveDecision(ctx, "d-unknown1", bus.OptionMerge, "bob")
	wantErr(t, err, bus.ErrNotFound)
	_, err = s.GetDecision(ctx, "d-unknown1")
	wantErr(t, err, bus.ErrNotFound)
	// An option not offered: refused, still open.
	_, err = s.ResolveDecision(ctx, d.ID, "ship-it", "bob")
	wantRefusal(t, err, bus.CodeOptionNotOffered)
	_, err = s.ResolveDecision(ctx, d.ID, "", "bob")
	wantRefusal(t, err, bus.CodeOptionNotOffered)
	got, err := s.GetDecision(ctx, d.ID)
	must(t, err)
	if !got.Open() {
		t.Fatalf("a refused resolve changed the decision: %+v", got)
	}
	// Resolving twice: refused, the first answer stays.
	c.Advance(time.Second)
	_, err = s.ResolveDecision(ctx, d.ID, bus.OptionReject, "bob")
	must(t, err)
	first, err := s.GetDecision(ctx, d.ID)
	must(t, err)
	c.Advance(time.Second)
	for _, opt := range []string{bus.OptionMerge, bus.OptionReject} {
		_, err = s.ResolveDecision(ctx, d.ID, opt, "mallory")
		wantRefusal(t, err, bus.CodeDecisionResolved)
	}
	after, err := s.GetDecision(ctx, d.ID)
	must(t, err)
	if fmt.Sprint(after) != fmt.Sprint(first) {
		t.Fatalf("a refused second resolve changed the decision:\n%+v\n%+v", after, first)
	}
}

func testLandings(t *testing.T, s bus.Store, c *Clock) {
	ctx := context.Background()
	d := raise(t, s, "work/a")
	_, err := s.GetLanding(ctx, d.ID)
	wantErr(t, err, bus.ErrNotFound)
	l := bus.Landing{DecisionID: d.ID, Commit: "c-landed", Target: "main", PatchID: "p1", Gate: "ok: 12 tests"}
	must(t, s.PutLanding(ctx, l))
	got, err := s.GetLanding(ctx, d.ID)
	must(t, err)
	if got.Commit != "c-landed" || got.Target != "main" || got.PatchID != "p1" || got.Gate != "ok: 12 tests" ||
		!got.LandedAt.Equal(c.Now()) {
		t.Fatalf("GetLanding = %+v", got)
	}
	c.Advance(time.Second)
	err = s.PutLanding(ctx, bus.Landing{DecisionID: d.ID, Commit: "c-other", Target: "main"})
	wantRefusal(t, err, bus.CodeDecisionLanded)
	again, err := s.GetLanding(ctx, d.ID)
	must(t, err)
	if again != got {
		t.Fatalf("a refused landing changed the record: %+v", again)
	}
	err = s.PutLanding(ctx, bus.Landing{DecisionID: "d-unknown1", Commit: "c"})
	wantErr(t, err, bus.ErrNotFound)
	if err := s.PutLanding(ctx, bus.Landing{DecisionID: d.ID}); err == nil {
		t.Fatal("a landing with no commit was accepted")
	}
}

func testNotes(t *testing.T, s bus.Store, c *Clock) {
	ctx := context.Background()
	pending, err := s.PendingNotes(ctx, "r-1")
	must(t, err)
	if len(pending) != 0 {
		t.Fatalf("pending notes of a new store: %v", pending)
	}
	var notes []bus.Note
	for i, text := range []string{"first", "second", "third"} {
		c.Advance(time.Second)
		n, err := s.AddNote(ctx, bus.Note{RunID: "r-1", Text: text})
		must(t, err)
		if n.ID == 0 || !n.CreatedAt.Equal(c.Now()) || n.DeliveredAt != 0 {
			t.Fatalf("note %d = %+v", i, n)
		}
		notes = append(notes, n)
	}
	_, err = s.AddNote(ctx, bus.Note{RunID: "r-2", Text: "elsewhere"})
	must(t, err)
	pending, err = s.PendingNotes(ctx, "r-1")
	must(t, err)
	if len(pending) != 3 || pending[0].Text != "first" || pending[2].Text != "third" || pending[0].RunID != "r-1" {
		t.Fatalf("pending = %+v", pending)
	}
	must(t, s.MarkNoteDelivered(ctx, notes[0].ID, 4))
	pending, err = s.PendingNotes(ctx, "r-1")
	must(t, err)
	if len(pending) != 2 || pending[0].ID != notes[1].ID {
		t.Fatalf("pending after delivery = %+v", pending)
	}
	wantErr(t, s.MarkNoteDelivered(ctx, notes[0].ID, 5), bus.ErrConflict)
	wantErr(t, s.MarkNoteDelivered(ctx, 999999, 5), bus.ErrNotFound)
	if err := s.MarkNoteDelivered(ctx, notes[1].ID, 0); err == nil {
		t.Fatal("delivered at step 0 was accepted")
	}
	if _, err := s.AddNote(ctx, bus.Note{RunID: "r-1", Text: "  "}); err == nil {
		t.Fatal("an empty note was accepted")
	}
	if _, err := s.AddNote(ctx, bus.Note{Text: "x"}); err == nil {
		t.Fatal("a note without a run was accepted")
	}
}

func testClaims(t *testing.T, s bus.Store, c *Clock) {
	ctx := context.Background()
	_, err := s.GetClaim(ctx, "t-1")
	wantErr(t, err, bus.ErrNotFound)
	ok, err := s.ClaimTask(ctx, "t-1", "w1")
	must(t, err)
	if !ok {
		t.Fatal("first claim lost")
	}
	for _, who := range []string{"w2", "w1"} {
		ok, err = s.ClaimTask(ctx, "t-1", who)
		must(t, err)
		if ok {
			t.Fatalf("second claim by %s won", who)
		}
	}
	cl, err := s.GetClaim(ctx, "t-1")
	must(t, err)
	if cl.Claimant != "w1" || !cl.ClaimedAt.Equal(c.Now()) || cl.Completion != nil || !cl.CompletedAt.IsZero() {
		t.Fatalf("claim = %+v", cl)
	}
	wantErr(t, s.CompleteTask(ctx, bus.Completion{TaskID: "t-1", Claimant: "w2"}), bus.ErrConflict)
	wantErr(t, s.CompleteTask(ctx, bus.Completion{TaskID: "t-nope", Claimant: "w2"}), bus.ErrNotFound)
	c.Advance(time.Minute)
	comp := bus.Completion{TaskID: "t-1", Claimant: "w1", RunID: "r-9", Outcome: "succeeded", ModelAlias: "local", HarnessAlias: "doc-writer",
		PromptTokens: i64(10), CompletionTokens: nil, TotalTokens: i64(10)}
	must(t, s.CompleteTask(ctx, comp))
	cl, err = s.GetClaim(ctx, "t-1")
	must(t, err)
	if cl.Completion == nil || !cl.CompletedAt.Equal(c.Now()) {
		t.Fatalf("completed claim = %+v", cl)
	}
	if got := *cl.Completion; got.RunID != "r-9" || got.Outcome != "succeeded" || got.ModelAlias != "local" || got.HarnessAlias != "doc-writer" ||
		got.PromptTokens == nil || *got.PromptTokens != 10 || got.CompletionTokens != nil || *got.TotalTokens != 10 {
		t.Fatalf("completion = %+v", got)
	}
	wantErr(t, s.CompleteTask(ctx, comp), bus.ErrConflict)
	ok, err = s.ClaimTask(ctx, "t-1", "w3")
	must(t, err)
	if ok {
		t.Fatal("a completed task was claimed again")
	}
	// A claim completed as failed (a dead letter) is released: the task
	// can be claimed again, and the new claim starts clean.
	must2 := func(ok bool, err error) bool { must(t, err); return ok }
	if !must2(s.ClaimTask(ctx, "t-2", "r-a")) {
		t.Fatal("claim of t-2 lost")
	}
	must(t, s.CompleteTask(ctx, bus.Completion{TaskID: "t-2", Claimant: "r-a", RunID: "r-a", Outcome: "failed", Reason: "job payload is not JSON"}))
	cl, err = s.GetClaim(ctx, "t-2")
	must(t, err)
	if cl.Completion == nil || cl.Completion.Outcome != "failed" || cl.Completion.Reason != "job payload is not JSON" {
		t.Fatalf("failed claim = %+v", cl)
	}
	if !must2(s.ClaimTask(ctx, "t-2", "r-b")) {
		t.Fatal("a failed claim was not released")
	}
	if must2(s.ClaimTask(ctx, "t-2", "r-c")) {
		t.Fatal("the retried claim was claimed twice")
	}
	cl, err = s.GetClaim(ctx, "t-2")
	must(t, err)
	if cl.Claimant != "r-b" || cl.Completion != nil {
		t.Fatalf("retried claim = %+v", cl)
	}
	if _, err := s.ClaimTask(ctx, "", "w1"); err == nil {
		t.Fatal("claiming an empty task id succeeded")
	}
}

func testJobs(t *testing.T, s bus.Store, c *Clock) {
	ctx := context.Background()
	_, ok, err := s.TakeJob(ctx, "q", "c1", 0)
	must(t, err)
	if ok {
		t.Fatal("took a job from an empty queue")
	}
	var jobs []bus.Job
	for i := range 3 {
		j, err := s.Enqueue(ctx, "q", []byte(fmt.Sprintf(`{"n":%d}`, i)))
		must(t, err)
		if j.ID == 0 || j.Queue != "q" || !j.Created.Equal(c.Now()) {
			t.Fatalf("enqueued = %+v", j)
		}
		jobs = append(jobs, j)
	}
	_, err = s.Enqueue(ctx, "other", []byte("x"))
	must(t, err)
	j, ok, err := s.TakeJob(ctx, "q", "c1", 0)
	must(t, err)
	if !ok || j.ID != jobs[0].ID || string(j.Payload) != `{"n":0}` || j.TakenBy != "c1" || j.Attempts != 0 {
		t.Fatalf("took %+v, want the oldest job", j)
	}
	// Requeue: back in the queue, attempts+1, first again (oldest).
	must(t, s.FinishJob(ctx, j.ID, "c1", bus.JobRetry, "flaky"))
	j, ok, err = s.TakeJob(ctx, "q", "c2", 0)
	must(t, err)
	if !ok || j.ID != jobs[0].ID || j.Attempts != 1 || j.TakenBy != "c2" {
		t.Fatalf("after requeue took %+v", j)
	}
	// Only the holder finishes it.
	wantErr(t, s.FinishJob(ctx, j.ID, "c1", bus.JobDone, ""), bus.ErrConflict)
	// Success removes it.
	must(t, s.FinishJob(ctx, j.ID, "c2", bus.JobDone, ""))
	wantErr(t, s.FinishJob(ctx, j.ID, "c2", bus.JobDone, ""), bus.ErrNotFound)
	// Failure without requeue: never taken again.
	j, ok, err = s.TakeJob(ctx, "q", "c1", 0)
	must(t, err)
	if !ok || j.ID != jobs[1].ID {
		t.Fatalf("took %+v, want job 2", j)
	}
	must(t, s.FinishJob(ctx, j.ID, "c1", bus.JobDead, "gave up"))
	wantErr(t, s.FinishJob(ctx, j.ID, "c1", bus.JobRetry, "again"), bus.ErrConflict)
	// An untaken job cannot be finished.
	wantErr(t, s.FinishJob(ctx, jobs[2].ID, "c1", bus.JobDone, ""), bus.ErrConflict)
	j, ok, err = s.TakeJob(ctx, "q", "c1", 0)
	must(t, err)
	if !ok || j.ID != jobs[2].ID {
		t.Fatalf("took %+v, want job 3", j)
	}
	_, ok, err = s.TakeJob(ctx, "q", "c1", 0)
	must(t, err)
	if ok {
		t.Fatal("took a job from a drained queue")
	}
	j, ok, err = s.TakeJob(ctx, "other", "c1", 0)
	must(t, err)
	if !ok || string(j.Payload) != "x" {
		t.Fatalf("other queue gave %+v", j)
	}
	e, err := s.Enqueue(ctx, "q", nil)
	must(t, err)
	j, ok, err = s.TakeJob(ctx, "q", "c1", 0)
	must(t, err)
	if !ok || j.ID != e.ID || j.Payload == nil || len(j.Payload) != 0 {
		t.Fatalf("empty payload job = %+v", j)
	}
	// The dead letter is listed, revived (attempts reset) and taken again.
	dead, err := s.DeadJobs(ctx, "q")
	must(t, err)
	if len(dead) != 1 || dead[0].ID != jobs[1].ID || dead[0].LastError != "gave up" || dead[0].Attempts != 1 || dead[0].DeadAt.IsZero() {
		t.Fatalf("dead letters = %+v", dead)
	}
	must(t, s.ReviveJob(ctx, jobs[1].ID))
	wantErr(t, s.ReviveJob(ctx, jobs[1].ID), bus.ErrNotFound)
	j, ok, err = s.TakeJob(ctx, "q", "c1", 0)
	must(t, err)
	if !ok || j.ID != jobs[1].ID || j.Attempts != 0 {
		t.Fatalf("revived job taken as %+v", j)
	}
	must(t, s.FinishJob(ctx, j.ID, "c1", bus.JobDead, "again"))
	wantErr(t, s.DropJob(ctx, jobs[2].ID), bus.ErrNotFound) // taken, not dead
	must(t, s.DropJob(ctx, jobs[1].ID))
	dead, err = s.DeadJobs(ctx, "q")
	must(t, err)
	if len(dead) != 0 {
		t.Fatalf("dead letters after drop = %+v", dead)
	}
}

// testJobLeases: a job whose lease is not renewed is taken back by another
// consumer (the lost delivery counted); the old holder can no longer finish
// it; renewing keeps a lease; a release does not count an attempt.
func testJobLeases(t *testing.T, s bus.Store, c *Clock) {
	ctx := context.Background()
	const lease = time.Minute
	a, err := s.Enqueue(ctx, "q", []byte("a"))
	must(t, err)
	b, err := s.Enqueue(ctx, "q", []byte("b"))
	must(t, err)
	j, ok, err := s.TakeJob(ctx, "q", "c1", lease)
	must(t, err)
	if !ok || j.ID != a.ID {
		t.Fatalf("took %+v", j)
	}
	j, ok, err = s.TakeJob(ctx, "q", "c1", lease)
	must(t, err)
	if !ok || j.ID != b.ID {
		t.Fatalf("took %+v", j)
	}
	c.Advance(lease / 2)
	n, err := s.RenewJobs(ctx, "q", "c1")
	must(t, err)
	if n != 2 {
		t.Fatalf("renewed %d leases, want 2", n)
	}
	c.Advance(lease / 2)
	if _, ok, err := s.TakeJob(ctx, "q", "c2", lease); err != nil || ok {
		t.Fatalf("took a renewed job: ok=%v err=%v", ok, err)
	}
	// c1 dies: nothing renews; after the lease, c2 takes both back.
	c.Advance(lease + time.Second)
	j, ok, err = s.TakeJob(ctx, "q", "c2", lease)
	must(t, err)
	if !ok || j.ID != a.ID || j.Attempts != 1 || j.TakenBy != "c2" {
		t.Fatalf("reclaimed %+v, want job a with the lost delivery counted", j)
	}
	// The zombie cannot ack, retry, release or bury what it lost.
	for _, end := range []bus.JobEnd{bus.JobDone, bus.JobRetry, bus.JobRelease, bus.JobDead} {
		wantErr(t, s.FinishJob(ctx, a.ID, "c1", end, "late"), bus.ErrConflict)
	}
	must(t, s.FinishJob(ctx, a.ID, "c2", bus.JobRelease, ""))
	j, ok, err = s.TakeJob(ctx, "q", "c3", lease)
	must(t, err)
	if !ok || j.ID != a.ID || j.Attempts != 1 {
		t.Fatalf("after release took %+v, want job a, attempts still 1", j)
	}
	// Without a lease, a held job is never taken back.
	c.Advance(24 * time.Hour)
	j, ok, err = s.TakeJob(ctx, "q", "c4", 0)
	must(t, err)
	if ok {
		t.Fatalf("took %+v with no lease", j)
	}
}

// Workers is how many goroutines the concurrency tests run.
const Workers = 50

// Items is how many backlog items or jobs they compete for.
const Items = 20

func testConcurrentClaims(t *testing.T, s bus.Store, _ *Clock) {
	ctx := context.Background()
	won := make([][]string, Workers)
	var wg sync.WaitGroup
	errs := make(chan error, Workers*Items)
	for w := range Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := rand.Perm(Items)
			for _, i := range order {
				ok, err := s.ClaimTask(ctx, fmt.Sprint("item-", i), fmt.Sprint("worker-", w))
				if err != nil {
					errs <- err
					continue
				}
				if ok {
					won[w] = append(won[w], fmt.Sprint("item-", i))
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("claim error: %v", err)
	}
	CheckExactlyOnce(t, won, Items)
	for w, items := range won {
		for _, item := range items {
			cl, err := s.GetClaim(ctx, item)
			must(t, err)
			if cl.Claimant != fmt.Sprint("worker-", w) {
				t.Fatalf("%s: stored claimant %s, winner worker-%d", item, cl.Claimant, w)
			}
		}
	}
}

// CheckExactlyOnce fails unless the winners together hold item-0..item-(n-1)
// each exactly once.
func CheckExactlyOnce(t *testing.T, won [][]string, n int) {
	t.Helper()
	count := map[string]int{}
	for _, items := range won {
		for _, it := range items {
			count[it]++
		}
	}
	for i := range n {
		if c := count[fmt.Sprint("item-", i)]; c != 1 {
			t.Errorf("item-%d won %d times, want exactly once", i, c)
		}
	}
	if len(count) != n {
		t.Errorf("%d distinct items won, want %d", len(count), n)
	}
}

func testConcurrentTakes(t *testing.T, s bus.Store, _ *Clock) {
	ctx := context.Background()
	for i := range Items {
		_, err := s.Enqueue(ctx, "q", []byte(fmt.Sprint("item-", i)))
		must(t, err)
	}
	won := make([][]string, Workers)
	var wg sync.WaitGroup
	errs := make(chan error, Workers)
	for w := range Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j, ok, err := s.TakeJob(ctx, "q", fmt.Sprint("c", w), time.Hour)
				if err != nil {
					errs <- err
					return
				}
				if !ok {
					return
				}
				won[w] = append(won[w], string(j.Payload))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("take error: %v", err)
	}
	CheckExactlyOnce(t, won, Items)
}

func testConcurrentResolves(t *testing.T, s bus.Store, _ *Clock) {
	ctx := context.Background()
	d := raise(t, s, "work/race")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
	)
	for w := range Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opt := []string{bus.OptionMerge, bus.OptionReject}[w%2]
			_, err := s.ResolveDecision(ctx, d.ID, opt, fmt.Sprint("p", w))
			switch {
			case err == nil:
				mu.Lock()
				winners = append(winners, fmt.Sprint("p", w))
				mu.Unlock()
			case errors.Is(err, bus.ErrConflict):
			default:
				t.Errorf("resolve: %v", err)
			}
		}()
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d resolutions succeeded (%v), want exactly one", len(winners), winners)
	}
	got, err := s.GetDecision(ctx, d.ID)
	must(t, err)
	if got.ResolvedBy != winners[0] {
		t.Fatalf("stored resolver %s, winner %s", got.ResolvedBy, winners[0])
	}
}
