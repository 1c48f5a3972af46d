package bus

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/runrec"
)

// git runs the real git CLI with an isolated environment and fixed
// identities and dates; every failure fails the test.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=A", "GIT_AUTHOR_EMAIL=a@example.test", "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z",
		"GIT_COMMITTER_NAME=C", "GIT_COMMITTER_EMAIL=c@example.test", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestRaise(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("git not installed (required when CI=true)")
		}
		t.Skip("git not installed")
	}
	ctx := context.Background()
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	git(t, root, "init", "-q", "-b", "main", repo)
	git(t, repo, "commit", "-q", "--allow-empty", "-m", "base")
	head := git(t, repo, "rev-parse", "HEAD")
	git(t, repo, "branch", "work/a")
	wt := filepath.Join(root, "wt")
	git(t, repo, "worktree", "add", "-q", wt, "work/a")
	sub := filepath.Join(repo, "deep", "er")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	realRepo, _ := filepath.EvalSymlinks(repo)
	gitDir := filepath.Join(repo, ".git")
	plain := t.TempDir()

	s, err := Open(ctx, Options{DataRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := RaiseRequest{Kind: KindMergeProtected, WorkRef: "work/a", Target: "main", By: "alice"}
	for _, tc := range []struct {
		name     string
		edit     func(r *RaiseRequest)
		wantRepo string
		wantErr  string
	}{
		{"abbreviated commit from the current directory", func(r *RaiseRequest) { r.Commit = head[:7]; r.Dir = repo }, gitDir, ""},
		{"revision name from a subdirectory", func(r *RaiseRequest) { r.Commit = "work/a"; r.Dir = sub }, gitDir, ""},
		{"linked worktree records the common git dir", func(r *RaiseRequest) { r.Commit = "HEAD"; r.Dir = wt }, gitDir, ""},
		{"explicit --repo wins over the current directory", func(r *RaiseRequest) { r.Commit = "HEAD"; r.RepoDir = repo; r.Dir = plain }, gitDir, ""},
		{"no repository: a full id is kept", func(r *RaiseRequest) { r.Commit = head; r.Dir = plain }, "", ""},
		{"no repository: an abbreviation is refused", func(r *RaiseRequest) { r.Commit = head[:7]; r.Dir = plain }, "", "not a full commit id"},
		{"unknown commit", func(r *RaiseRequest) { r.Commit = "deadbeef"; r.Dir = repo }, "", `commit "deadbeef" not found`},
		{"unknown work ref", func(r *RaiseRequest) { r.Commit = "HEAD"; r.WorkRef = "work/nope"; r.Dir = repo }, "", `work ref "work/nope" does not exist`},
		{"bad target", func(r *RaiseRequest) { r.Commit = "HEAD"; r.Target = "a..b"; r.Dir = repo }, "", "not a valid branch name"},
		{"option-looking commit", func(r *RaiseRequest) { r.Commit = "--all"; r.Dir = repo }, "", "must not start with '-'"},
		{"--repo that is no repository", func(r *RaiseRequest) { r.Commit = head; r.RepoDir = plain }, "", "not inside a git repository"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := base
			tc.edit(&req)
			before, _ := s.ListDecisions(ctx, false)
			d, err := Raise(ctx, s, req)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				after, _ := s.ListDecisions(ctx, false)
				if len(after) != len(before) {
					t.Fatal("a refused raise stored a decision")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Commit != head {
				t.Fatalf("commit %q, want %s", d.Commit, head)
			}
			gotRepo, _ := filepath.EvalSymlinks(d.Repo)
			wantRepo, _ := filepath.EvalSymlinks(tc.wantRepo)
			if gotRepo != wantRepo {
				t.Fatalf("repo %q, want %q (repository %s)", d.Repo, tc.wantRepo, realRepo)
			}
			got, err := s.GetDecision(ctx, d.ID)
			if err != nil || got.Commit != head || got.RaisedBy != "alice" {
				t.Fatalf("stored %+v, %v", got, err)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := func(v int64) *int64 { return &v }
	running := &Run{ID: "r", Status: "running", TaskID: "t", Steps: 2, StartedAt: t0, ModelAlias: "local"}
	done := &Run{ID: "r", Status: "succeeded", TaskID: "t", Steps: 9, TotalTokens: n(90), StartedAt: t0,
		FinishedAt: t0.Add(time.Minute), PatchID: "p-store"}
	failed := &runrec.Result{RunID: "r", Status: "failed", TaskID: "t", Steps: 5, TotalTokens: n(50), StartedAt: t0,
		FinishedAt: t0.Add(30 * time.Second), Error: "boom", Model: "qwen"}
	for _, tc := range []struct {
		name                  string
		run                   *Run
		res                   *runrec.Result
		status, source, model string
		steps                 int
		tokens                int64
		outcome               string
	}{
		{"store only", done, nil, "succeeded", "store", "", 9, 90, ""},
		{"folder only", nil, failed, "failed", "folder", "qwen", 5, 50, "boom"},
		{"store still running, the receipt says how it ended", running, failed, "failed", "both", "qwen", 5, 50, "boom"},
		{"both ended: the store wins", done, failed, "succeeded", "both", "qwen", 9, 90, "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := summarize("r", tc.run, tc.res)
			tok := int64(-1)
			if s.TotalTokens != nil {
				tok = *s.TotalTokens
			}
			if s.Status != tc.status || s.Source != tc.source || s.Model != tc.model || s.Steps != tc.steps ||
				tok != tc.tokens || s.Outcome != tc.outcome || s.TaskID != "t" || !s.StartedAt.Equal(t0) {
				t.Fatalf("summary = %+v", s)
			}
		})
	}
}

// TestReconcileRepairsRunsLeftRunning: the store was down when a run ended,
// so it still says running and the claim is open, while the folder says
// succeeded. Listing already shows the folder's status (and --status
// running agrees); Reconcile rewrites the store row and completes the
// claim, once.
func TestReconcileRepairsRunsLeftRunning(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, err := Open(ctx, Options{DataRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runsDir := filepath.Join(root, "runs")
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, id := range []string{"r-ended", "r-live"} {
		if err := s.PutRun(ctx, Run{ID: id, TaskID: "t-" + id, Status: runrec.StatusRunning, StartedAt: start}); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.ClaimTask(ctx, "t-"+id, id); err != nil || !ok {
			t.Fatal(ok, err)
		}
		dir := runrec.Dir(filepath.Join(runsDir, id))
		os.MkdirAll(string(dir), 0o755)
		status := runrec.StatusSucceeded
		if id == "r-live" {
			status = runrec.StatusRunning
		}
		if err := dir.WriteResult(runrec.Result{RunID: id, TaskID: "t-" + id, Status: status, StartedAt: start,
			FinishedAt: start.Add(time.Minute), Steps: 4}); err != nil {
			t.Fatal(err)
		}
	}
	running, err := ListRunSummaries(ctx, s, runsDir, RunFilter{Status: runrec.StatusRunning})
	if err != nil || len(running) != 1 || running[0].ID != "r-live" {
		t.Fatalf("--status running lists %+v (%v), want r-live only", running, err)
	}
	reps, err := Reconcile(ctx, s, runsDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 1 || reps[0].RunID != "r-ended" || reps[0].Status != runrec.StatusSucceeded || reps[0].Claim != "t-r-ended" {
		t.Fatalf("repairs %+v", reps)
	}
	run, err := s.GetRun(ctx, "r-ended")
	if err != nil || run.Status != runrec.StatusSucceeded || run.Steps != 4 {
		t.Fatalf("store row %+v %v", run, err)
	}
	cl, err := s.GetClaim(ctx, "t-r-ended")
	if err != nil || cl.Completion == nil || cl.Completion.Outcome != runrec.StatusSucceeded {
		t.Fatalf("claim %+v %v", cl, err)
	}
	if cl, _ := s.GetClaim(ctx, "t-r-live"); cl.Completion != nil {
		t.Fatalf("a live run's claim was completed: %+v", cl)
	}
	if reps, err := Reconcile(ctx, s, runsDir); err != nil || len(reps) != 0 {
		t.Fatalf("second reconcile repaired %+v (%v), want nothing", reps, err)
	}
}
