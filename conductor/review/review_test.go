package review_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/review"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
)

var fixedNow = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }

// env is one test's world: an operator repository, a worker worktree, a run
// folder and a store.
type env struct {
	t       *testing.T
	repo    string // the operator's repository (work tree; git dir repo/.git)
	wt      string // the worker's linked worktree
	base    string
	runs    string
	store   bus.Store
	scratch string
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=T", "GIT_AUTHOR_EMAIL=t@example.test",
		"GIT_COMMITTER_NAME=T", "GIT_COMMITTER_EMAIL=t@example.test",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

func writeFile(t *testing.T, dir, name, body string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, repo: filepath.Join(t.TempDir(), "repo"), runs: t.TempDir(), scratch: reachableTempDir(t)}
	if err := os.MkdirAll(e.repo, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, e.repo, "init", "-q", "-b", "main")
	writeFile(t, e.repo, "README.md", "# demo\n")
	writeFile(t, e.repo, "pkg/a.go", "package pkg\n\nfunc A() int { return 1 }\n")
	writeFile(t, e.repo, "src/legacy.c", "int legacy;\n")
	git(t, e.repo, "add", "-A")
	git(t, e.repo, "commit", "-q", "-m", "base")
	e.base = git(t, e.repo, "rev-parse", "HEAD")
	e.wt = filepath.Join(t.TempDir(), "wt")
	git(t, e.repo, "worktree", "add", "-q", "--detach", e.wt, e.base)
	s, err := bus.Open(context.Background(), bus.Options{DataRoot: t.TempDir(), Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	e.store = s
	return e
}

// run extracts the worker worktree's diff into a new run folder.
func (e *env) run(id, status string) runrec.Dir {
	e.t.Helper()
	dir := runrec.Dir(filepath.Join(e.runs, id))
	if err := os.MkdirAll(string(dir), 0o755); err != nil {
		e.t.Fatal(err)
	}
	var diff bytes.Buffer
	ex, err := patch.Extract(context.Background(), patch.ExtractOptions{
		Repo: patch.Git{GitDir: filepath.Join(e.repo, ".git")}, WorkTree: e.wt, Base: e.base, Out: &diff})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := runrec.WriteFileAtomic(dir.Path(runrec.PatchFile), diff.Bytes(), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := dir.WriteResult(runrec.Result{RunID: id, TaskID: "t-demo", Session: "s1", Role: "implementer",
		Status: status, ModelAlias: "fake", Model: "fake-model", Repo: filepath.Join(e.repo, ".git"),
		BaseCommit: e.base, PatchID: ex.PatchID, FilesChanged: ex.Files}); err != nil {
		e.t.Fatal(err)
	}
	return dir
}

// policyWith returns the default policy with a conductor-policy.json
// override.
func policyWith(t *testing.T, override string) *policy.Policy {
	t.Helper()
	repo := fstest.MapFS{}
	if override != "" {
		repo["conductor-policy.json"] = &fstest.MapFile{Data: []byte(override)}
	}
	p, err := policy.LoadFS(roles.FS, repo, "repo")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const passGate = `{"landing":{"gate":[{"name":"check","argv":["sh","-c","test -f README.md && echo gate-ok"],"timeoutSeconds":30,"needsFiles":true}]}}`

func (e *env) opts(dir runrec.Dir, pol *policy.Policy) review.Options {
	return review.Options{Store: e.store, Policy: pol, RunDir: dir, Reviewer: "alice", Now: fixedNow,
		ScratchDir: e.scratch, Getenv: func(string) string { return "" }}
}

func refusalCode(err error) string {
	var r *refusal.Refusal
	if errors.As(err, &r) {
		return string(r.Code)
	}
	return ""
}

func (e *env) refExists(ref string) bool {
	cmd := exec.Command("git", "--git-dir", filepath.Join(e.repo, ".git"), "rev-parse", "--verify", "--quiet", ref)
	return cmd.Run() == nil
}

func (e *env) noVerdict(ref string) {
	e.t.Helper()
	if v, err := e.store.LatestVerdict(context.Background(), ref); !errors.Is(err, bus.ErrNotFound) {
		e.t.Errorf("want no verdict on %s, got %+v, %v", ref, v, err)
	}
}

func (e *env) scratchEmpty() {
	e.t.Helper()
	ents, err := os.ReadDir(e.scratch)
	if err != nil || len(ents) != 0 {
		e.t.Errorf("scratch folder not cleaned: %v %v", ents, err)
	}
}

func TestApproveHappyPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeFile(t, e.wt, "pkg/a.go", "package pkg\n\nfunc A() int { return 2 }\n")
	writeFile(t, e.wt, "pkg/b.go", "package pkg\n\nfunc B() {}\n")
	wtStatus := git(t, e.wt, "status", "--porcelain")
	dir := e.run("r-1", runrec.StatusSucceeded)
	res, _ := dir.ReadResult()

	o := e.opts(dir, policyWith(t, passGate))
	o.Approve, o.Raise = true, "main"
	rep, err := review.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("review: %v", err)
	}
	if !rep.Clean || rep.PatchID != res.PatchID || rep.Parent != e.base || rep.WorkRef != "refs/heads/work/t-demo" {
		t.Fatalf("report %+v", rep)
	}
	if len(rep.Gate) != 1 || rep.Gate[0].Status != review.StatusPass {
		t.Errorf("gate %+v", rep.Gate)
	}
	v, err := e.store.LatestVerdict(context.Background(), rep.WorkRef)
	if err != nil {
		t.Fatal(err)
	}
	if v.Verdict != bus.VerdictApprove || v.Commit != rep.Commit || v.PatchID != res.PatchID || v.Reviewer != "alice" || v.RunID != "r-1" {
		t.Errorf("verdict %+v", v)
	}
	if tip := git(t, e.repo, "rev-parse", "work/t-demo"); tip != rep.Commit {
		t.Errorf("work branch at %s, want %s", tip, rep.Commit)
	}
	msg := git(t, e.repo, "log", "-1", "--format=%an <%ae>%n%B", rep.Commit)
	for _, want := range []string{"conductor <conductor@localhost>", "Run-Id: r-1", "Task-Id: t-demo", "Patch-Id: " + res.PatchID, "Model: fake (fake-model)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("commit message lacks %q:\n%s", want, msg)
		}
	}
	// The commit's tree is the worker's tree.
	if got, want := git(t, e.repo, "rev-parse", rep.Commit+"^{tree}"), git(t, e.repo, "rev-parse", "HEAD^{tree}"); got == want {
		t.Error("commit tree equals the base tree")
	}
	if git(t, e.repo, "show", rep.Commit+":pkg/b.go") != "package pkg\n\nfunc B() {}" {
		t.Error("pkg/b.go missing from the work commit")
	}
	// No worktree was touched: the main worktree is clean, the worker's
	// unchanged, and git knows no extra worktree.
	if s := git(t, e.repo, "status", "--porcelain"); s != "" {
		t.Errorf("main worktree dirty: %q", s)
	}
	if s := git(t, e.wt, "status", "--porcelain"); s != wtStatus {
		t.Errorf("worker worktree changed: %q, was %q", s, wtStatus)
	}
	if n := strings.Count(git(t, e.repo, "worktree", "list", "--porcelain"), "worktree "); n != 2 {
		t.Errorf("%d worktrees", n)
	}
	if rep.Decision == nil || rep.Decision.Target != "main" || rep.Decision.Commit != rep.Commit || rep.Decision.WorkRef != rep.WorkRef {
		t.Errorf("decision %+v", rep.Decision)
	}
	d, err := e.store.GetDecision(context.Background(), rep.Decision.ID)
	if err != nil || d.Kind != bus.KindMergeProtected || !d.Open() {
		t.Errorf("stored decision %+v %v", d, err)
	}
	if _, err := os.Stat(dir.Path(review.RecordFile)); err != nil {
		t.Errorf("no review record: %v", err)
	}
	e.scratchEmpty()
	// The report holds what cmd renders (Run itself prints nothing).
	var files, checks, gate []string
	for _, f := range rep.Files {
		files = append(files, f.Status+" "+f.Path)
	}
	for _, c := range rep.Checks {
		checks = append(checks, c.Status+" "+c.Name)
	}
	for _, g := range rep.Gate {
		gate = append(gate, g.Status+" "+g.Name)
	}
	if got, want := strings.Join(files, ","), "M pkg/a.go,A pkg/b.go"; got != want {
		t.Errorf("files %q, want %q", got, want)
	}
	if !slices.Contains(checks, "pass paths") || strings.Join(gate, ",") != "pass check" {
		t.Errorf("checks %q, gate %q", checks, gate)
	}
	if !rep.Complete() || rep.Verdict == nil || rep.Verdict.Verdict != bus.VerdictApprove {
		t.Errorf("complete %v, verdict %+v", rep.Complete(), rep.Verdict)
	}

	// Reviewing the same run again reuses the commit.
	o2 := e.opts(dir, policyWith(t, passGate))
	o2.Approve = true
	rep2, err := review.Run(context.Background(), o2)
	if err != nil || rep2.Commit != rep.Commit {
		t.Errorf("second review: commit %s (first %s), %v", rep2.Commit, rep.Commit, err)
	}
}

func TestReportOnlyChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeFile(t, e.wt, "pkg/a.go", "package pkg\n\nfunc A() int { return 3 }\n")
	dir := e.run("r-1", runrec.StatusSucceeded)
	o := e.opts(dir, policyWith(t, passGate))
	rep, err := review.Run(context.Background(), o)
	if err != nil || !rep.Clean {
		t.Fatalf("clean review: %v %+v", err, rep)
	}
	if e.refExists("refs/heads/work/t-demo") || rep.WorkRefUpdated {
		t.Error("report-only review moved the work branch")
	}
	e.noVerdict(rep.WorkRef)
	if !rep.Complete() || rep.Verdict != nil || rep.Decision != nil {
		t.Errorf("report-only review: complete %v, verdict %+v, decision %+v", rep.Complete(), rep.Verdict, rep.Decision)
	}
}

func TestFindings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		change   func(t *testing.T, wt string)
		policy   string
		status   string
		check    string // the failing check, or "gate"
		findings []string
	}{
		{"forbidden path", func(t *testing.T, wt string) { writeFile(t, wt, "src/legacy.c", "int legacy = 2;\n") },
			passGate, runrec.StatusSucceeded, "paths", []string{"forbidden-path: changing src/legacy.c is under forbidden path src/**"}},
		{"rename into src", func(t *testing.T, wt string) {
			if err := os.Rename(filepath.Join(wt, "pkg/a.go"), filepath.Join(wt, "src/a.go")); err != nil {
				t.Fatal(err)
			}
		}, passGate, runrec.StatusSucceeded, "paths", []string{"forbidden-path: adding src/a.go"}},
		{"case-only SRC", func(t *testing.T, wt string) { writeFile(t, wt, "SRC/x.c", "x\n") },
			passGate, runrec.StatusSucceeded, "paths", []string{"forbidden-path: adding SRC/x.c"}},
		{"symlink into src", func(t *testing.T, wt string) {
			if err := os.Symlink("../src/legacy.c", filepath.Join(wt, "pkg/link")); err != nil {
				t.Fatal(err)
			}
		}, passGate, runrec.StatusSucceeded, "paths", []string{"symlink pkg/link points into forbidden path src/**"}},
		{"new root file", func(t *testing.T, wt string) { writeFile(t, wt, "NOTES", "x\n") },
			passGate, runrec.StatusSucceeded, "paths", []string{"adds-root-file: the change adds NOTES at the repository root"}},
		{"new top-level dir", func(t *testing.T, wt string) { writeFile(t, wt, "tools/x.go", "package tools\n") },
			passGate, runrec.StatusSucceeded, "paths", []string{"adds-top-level-dir"}},
		{"quoted name in src", func(t *testing.T, wt string) { writeFile(t, wt, "src/caf\u00e9 \"x\".c", "x\n") },
			passGate, runrec.StatusSucceeded, "paths", []string{"forbidden-path: adding \"src/caf\u00e9 \\\"x\\\".c\""}},
		{"too many files", func(t *testing.T, wt string) {
			writeFile(t, wt, "pkg/x1.go", "package pkg\n")
			writeFile(t, wt, "pkg/x2.go", "package pkg\n")
		}, `{"review":{"sizeLimits":{"maxFiles":1}}}`, runrec.StatusSucceeded, "size", []string{"2 files changed, the limit is 1"}},
		{"file too big", func(t *testing.T, wt string) { writeFile(t, wt, "pkg/big.txt", strings.Repeat("x", 100)) },
			`{"review":{"sizeLimits":{"maxFileBytes":50}}}`, runrec.StatusSucceeded, "size", []string{"pkg/big.txt is 100 bytes, the limit is 50"}},
		{"gofmt", func(t *testing.T, wt string) {
			writeFile(t, wt, "pkg/a.go", "package pkg\nfunc   A() int {return 1}\n")
		},
			passGate, runrec.StatusSucceeded, "syntax", []string{"syntax: pkg/a.go: gofmt -l ./pkg/a.go: reported the file"}},
		{"bash -n", func(t *testing.T, wt string) { writeFile(t, wt, "pkg/x.sh", "if then fi (\n") },
			passGate, runrec.StatusSucceeded, "syntax", []string{"syntax: pkg/x.sh: bash -n ./pkg/x.sh: exit status 2"}},
		{"failed run", func(t *testing.T, wt string) { writeFile(t, wt, "pkg/ok.go", "package pkg\n") },
			passGate, runrec.StatusTimeout, "run", []string{"the run ended timeout"}},
		{"gate fails", func(t *testing.T, wt string) { writeFile(t, wt, "pkg/ok.go", "package pkg\n") },
			`{"landing":{"gate":[{"name":"unit","argv":["sh","-c","echo line-one; echo FAILED: TestX >&2; exit 4"],"timeoutSeconds":30}]}}`,
			runrec.StatusSucceeded, "gate", []string{"gate unit (sh -c echo line-one; echo FAILED: TestX >&2; exit 4) failed: exit status 4", "FAILED: TestX"}},
		{"gate hangs", func(t *testing.T, wt string) { writeFile(t, wt, "pkg/ok.go", "package pkg\n") },
			`{"landing":{"gate":[{"name":"hang","argv":["sh","-c","echo started; sleep 300 & sleep 300"],"timeoutSeconds":1}]}}`,
			runrec.StatusSucceeded, "gate", []string{"gate hang", "timed out after", "and was killed", "started"}},
		{"gate missing binary", func(t *testing.T, wt string) { writeFile(t, wt, "pkg/ok.go", "package pkg\n") },
			`{"landing":{"gate":[{"name":"nope","argv":["conductor-no-such-binary"],"timeoutSeconds":5}]}}`,
			runrec.StatusSucceeded, "gate", []string{"gate nope", "conductor-no-such-binary"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.check == "syntax" && tt.name == "gofmt" {
				if _, err := exec.LookPath("gofmt"); err != nil {
					if os.Getenv("CI") == "true" {
						t.Fatal("gofmt not installed (required when CI=true)")
					}
					t.Skip("gofmt not installed")
				}
			}
			e := newEnv(t)
			tt.change(t, e.wt)
			dir := e.run("r-1", tt.status)
			pol := policyWith(t, tt.policy)
			for _, approve := range []bool{false, true} {
				o := e.opts(dir, pol)
				o.Approve = approve
				rep, err := review.Run(context.Background(), o)
				if refusalCode(err) != "review-failed" {
					t.Fatalf("approve=%v: want refusal review-failed, got %v", approve, err)
				}
				failed := false
				for _, c := range rep.Checks {
					if c.Name == tt.check && c.Status == review.StatusFail {
						failed = true
					}
				}
				for _, g := range rep.Gate {
					if tt.check == "gate" && g.Status == review.StatusFail {
						failed = true
					}
				}
				if !failed || rep.Clean {
					t.Errorf("check %s did not fail: %+v", tt.check, rep)
				}
				all := strings.Join(rep.Findings, "\n")
				for _, w := range tt.findings {
					if !strings.Contains(all, w) {
						t.Errorf("findings lack %q:\n%s", w, all)
					}
				}
				// A refusal changes nothing.
				if e.refExists("refs/heads/work/t-demo") {
					t.Error("refused review moved the work branch")
				}
				e.noVerdict(rep.WorkRef)
				e.scratchEmpty()
			}
		})
	}
}

func TestRequestChangesAndRefinementRound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeFile(t, e.wt, "pkg/a.go", "package pkg\n\nfunc A() int { return 2 }\n")
	dir1 := e.run("r-1", runrec.StatusSucceeded)
	pol := policyWith(t, passGate)

	o := e.opts(dir1, pol)
	o.RequestChanges = "also add a test"
	rep1, err := review.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	v, err := e.store.LatestVerdict(context.Background(), rep1.WorkRef)
	if err != nil || v.Verdict != bus.VerdictRequestChanges || v.Commit != rep1.Commit || len(v.Findings) != 1 || v.Findings[0] != "also add a test" {
		t.Fatalf("verdict %+v %v", v, err)
	}
	if msg := rep1.FollowUp("also add a test"); !strings.Contains(msg, "Reviewer: also add a test") {
		t.Errorf("follow-up %q", msg)
	}

	// Round two: the worker continues in its worktree; the diff is cumulative
	// against the same base.
	writeFile(t, e.wt, "pkg/a_test.go", "package pkg\n")
	dir2 := e.run("r-2", runrec.StatusSucceeded)
	res2, _ := dir2.ReadResult()
	o2 := e.opts(dir2, pol)
	o2.Approve = true
	rep2, err := review.Run(context.Background(), o2)
	if err != nil {
		t.Fatalf("round two: %v", err)
	}
	if rep2.Parent != rep1.Commit {
		t.Errorf("round two parent %s, want the first round's commit %s", rep2.Parent, rep1.Commit)
	}
	if rep2.PatchID != res2.PatchID {
		t.Errorf("round two patch-id %s, want the run's %s", rep2.PatchID, res2.PatchID)
	}
	v2, err := e.store.LatestVerdict(context.Background(), rep2.WorkRef)
	if err != nil || v2.Verdict != bus.VerdictApprove || v2.Commit != rep2.Commit || v2.PatchID != res2.PatchID {
		t.Errorf("verdict %+v %v", v2, err)
	}
	// The merge base with main is still the run's base: land's patch-id
	// (DiffTrees(merge-base, commit)) equals the verdict's.
	if mb := git(t, e.repo, "merge-base", "main", rep2.Commit); mb != e.base {
		t.Errorf("merge base %s", mb)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeFile(t, e.wt, "pkg/a.go", "package pkg\n\nfunc A() int { return 2 }\n")
	good := e.run("r-good", runrec.StatusSucceeded)
	pol := policyWith(t, passGate)
	ctx := context.Background()

	mk := func(id string, mutate func(d runrec.Dir)) runrec.Dir {
		d := runrec.Dir(filepath.Join(e.runs, id))
		if err := os.MkdirAll(string(d), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{runrec.ResultFile, runrec.PatchFile} {
			b, err := os.ReadFile(good.Path(f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(d.Path(f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		mutate(d)
		return d
	}
	setResult := func(f func(r *runrec.Result)) func(d runrec.Dir) {
		return func(d runrec.Dir) {
			r, err := d.ReadResult()
			if err != nil {
				t.Fatal(err)
			}
			f(&r)
			if err := d.WriteResult(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name string
		dir  runrec.Dir
		opts func(o *review.Options)
		want string
	}{
		{"unknown run", runrec.Dir(filepath.Join(e.runs, "nope")), nil, "no run record at"},
		{"no patch", mk("r-nopatch", func(d runrec.Dir) { os.Remove(d.Path(runrec.PatchFile)) }), nil, "the run has no patch"},
		{"empty patch", mk("r-empty", func(d runrec.Dir) { os.WriteFile(d.Path(runrec.PatchFile), nil, 0o644) }), nil, "the run's patch is empty"},
		{"patch edited", mk("r-edited", func(d runrec.Dir) {
			b, _ := os.ReadFile(d.Path(runrec.PatchFile))
			os.WriteFile(d.Path(runrec.PatchFile), bytes.Replace(b, []byte("return 2"), []byte("return 9"), 1), 0o644)
		}), nil, "the record and the patch disagree"},
		{"bad result json", mk("r-badjson", func(d runrec.Dir) { os.WriteFile(d.Path(runrec.ResultFile), []byte("{"), 0o644) }), nil, "result.json"},
		{"still running", mk("r-running", setResult(func(r *runrec.Result) { r.Status = runrec.StatusRunning })), nil, "still running"},
		{"no repo", mk("r-norepo", setResult(func(r *runrec.Result) { r.Repo = "" })), nil, "lacks repo"},
		{"bad base", mk("r-badbase", setResult(func(r *runrec.Result) { r.BaseCommit = strings.Repeat("1", 40) })), nil, "base commit"},
		{"bad task id", mk("r-badtask", setResult(func(r *runrec.Result) { r.TaskID = "../x" })), nil, "cannot name a work branch"},
		{"run id with a newline", mk("r-badrun", setResult(func(r *runrec.Result) { r.RunID = "r-1\nPatch-Id: forged" })), nil, "letters, digits"},
		{"approve and request", good, func(o *review.Options) { o.Approve, o.RequestChanges = true, "x" }, "exclude each other"},
		{"raise without approve", good, func(o *review.Options) { o.Raise = "main" }, "needs --approve"},
		{"raise to a target not allowed", good, func(o *review.Options) { o.Approve, o.Raise = true, "release" }, "target-not-allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := e.opts(tt.dir, pol)
			if tt.opts != nil {
				tt.opts(&o)
			}
			_, err := review.Run(ctx, o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
			if e.refExists("refs/heads/work/t-demo") {
				t.Error("work branch created")
			}
			e.noVerdict("refs/heads/work/t-demo")
			if ds, _ := e.store.ListDecisions(ctx, false); len(ds) != 0 {
				t.Errorf("decisions %v", ds)
			}
		})
	}
}

func TestWorkBranchCheckedOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeFile(t, e.wt, "pkg/a.go", "package pkg\n\nfunc A() int { return 2 }\n")
	dir := e.run("r-1", runrec.StatusSucceeded)
	git(t, e.repo, "branch", "work/t-demo", e.base)
	git(t, e.repo, "worktree", "add", "-q", filepath.Join(t.TempDir(), "co"), "work/t-demo")
	o := e.opts(dir, policyWith(t, passGate))
	o.Approve = true
	_, err := review.Run(context.Background(), o)
	if refusalCode(err) != "work-branch-checked-out" {
		t.Fatalf("want work-branch-checked-out, got %v", err)
	}
	if tip := git(t, e.repo, "rev-parse", "work/t-demo"); tip != e.base {
		t.Error("branch moved")
	}
	e.noVerdict("refs/heads/work/t-demo")
}

// TestGateEnvironment checks what a gate sees: no credential, a scratch HOME,
// no .git and no way to find the operator's repository.
func TestGateEnvironment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeFile(t, e.wt, "pkg/a.go", "package pkg\n\nfunc A() int { return 2 }\n")
	if err := os.Symlink("a.go", filepath.Join(e.wt, "pkg/alias.go")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.wt, "pkg/run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := e.run("r-1", runrec.StatusSucceeded)
	script := `env; echo "pwd=$(pwd)"; ls -la; { test -d .git || test -f .git || test -L .git; } && echo HAS-DOT-GIT;
git rev-parse --git-dir >/dev/null 2>&1 && echo FOUND-REPO;
test -L pkg/alias.go && echo link-ok; test -x pkg/run.sh && echo exec-ok; exit 1`
	pol := policyWith(t, `{"landing":{"gate":[{"name":"env","argv":["sh","-c",`+jsonString(script)+`],"timeoutSeconds":30}]}}`)
	o := e.opts(dir, pol)
	secrets := map[string]string{"OPENAI_API_KEY": "sk-secret-1", "GITEA_TOKEN": "tok-secret-2", "PATH": os.Getenv("PATH"), "HOME": "/root-home"}
	o.Getenv = func(k string) string { return secrets[k] }
	rep, err := review.Run(context.Background(), o)
	if refusalCode(err) != "review-failed" || len(rep.Gate) != 1 {
		t.Fatalf("%v %+v", err, rep)
	}
	out := rep.Gate[0].OutputTail
	for _, bad := range []string{"sk-secret-1", "tok-secret-2", "HOME=/root-home", "HAS-DOT-GIT", "FOUND-REPO"} {
		if strings.Contains(out, bad) {
			t.Errorf("gate output contains %q:\n%s", bad, out)
		}
	}
	for _, want := range []string{"CONDUCTOR_GATE=1", "link-ok", "exec-ok", "HOME=" + e.scratch} {
		if !strings.Contains(out, want) {
			t.Errorf("gate output lacks %q:\n%s", want, out)
		}
	}
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// TestHangingGateKillsItsChildren checks that a gate killed at its timeout
// takes its whole process group with it: no orphan keeps running.
func TestHangingGateKillsItsChildren(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeFile(t, e.wt, "pkg/ok.go", "package pkg\n")
	dir := e.run("r-1", runrec.StatusSucceeded)
	// The gate runs in the sandbox's own pid namespace: look for the
	// orphan by its command line on the host.
	script := "sleep 3017 & wait"
	pol := policyWith(t, `{"landing":{"gate":[{"name":"hang","argv":["sh","-c",`+jsonString(script)+`],"timeoutSeconds":1}]}}`)
	rep, err := review.Run(context.Background(), e.opts(dir, pol))
	if refusalCode(err) != "review-failed" || len(rep.Gate) != 1 || !rep.Gate[0].TimedOut {
		t.Fatalf("%v %+v", err, rep.Gate)
	}
	for i := 0; ; i++ {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		alive := false
		for _, p := range procs {
			if b, _ := os.ReadFile(p); string(b) == "sleep\x003017\x00" {
				st, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
				alive = alive || !strings.Contains(string(st), ") Z ")
			}
		}
		if !alive {
			break
		}
		if i == 50 {
			t.Fatal("the gate's child `sleep 3017` still runs after the gate was killed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.scratchEmpty()
}

// TestHostileAttributesRunNothing: the worker adds a .gitattributes naming a
// filter and a diff driver the operator's repository configures with
// programs; reviewing (commit, checks, export, gate) must run none of them.
func TestHostileAttributesRunNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	marker := filepath.Join(t.TempDir(), "marker")
	for _, kv := range [][2]string{
		{"filter.evil.clean", "touch " + marker + "; cat"},
		{"filter.evil.smudge", "touch " + marker + "; cat"},
		{"filter.evil.process", "touch " + marker},
		{"diff.evil.textconv", "touch " + marker + "; cat"},
		{"diff.evil.command", "touch " + marker},
		{"core.fsmonitor", "touch " + marker},
		{"core.hooksPath", filepath.Join(e.repo, "hooks")},
	} {
		git(t, e.repo, "config", kv[0], kv[1])
	}
	writeFile(t, e.repo, "hooks/post-checkout", "#!/bin/sh\ntouch "+marker+"\n")
	if err := os.Chmod(filepath.Join(e.repo, "hooks/post-checkout"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.wt, "pkg/.gitattributes", "* filter=evil diff=evil\n")
	writeFile(t, e.wt, "pkg/a.go", "package pkg\n\nfunc A() int { return 5 }\n")
	dir := e.run("r-1", runrec.StatusSucceeded)
	os.Remove(marker) // whatever the fixture's own git calls did
	o := e.opts(dir, policyWith(t, passGate))
	o.Approve = true
	rep, err := review.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a filter, driver, fsmonitor or hook configured by the repository ran during review")
	}
	if got := git(t, e.repo, "show", rep.Commit+":pkg/a.go"); !strings.Contains(got, "return 5") {
		t.Errorf("commit content %q", got)
	}
	// Positive control: a plain checkout of the work commit in the
	// operator's repository does run them (it may fail doing so).
	ctl := exec.Command("git", "checkout", "-q", "--detach", rep.Commit)
	ctl.Dir = e.repo
	_ = ctl.Run()
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("control: the hostile configuration did not run on a plain checkout; the test proves nothing")
	}
}

// reachableTempDir is a temp folder the sandbox uid can traverse (the
// scratch export of checks and gates is handed to it; t.TempDir's parent is
// private to the test's user).
func reachableTempDir(t *testing.T) string {
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}
