package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/patch"
)

// TestServePreview: `conductor serve` wires the decision card's Preview
// landing button to land --preview with the policy committed on the
// target: the gate runs, the card shows it would land, and nothing
// changes (refs, the decision, the landings). The gate's sandbox is the
// one `conductor land` would use, with the operator's options: when the
// operator's bwrap is missing (and no Docker engine answers) the card says
// the landing would be refused (sandbox-unavailable), never that it would
// land through another bwrap.
func TestServePreview(t *testing.T) {
	if testing.Short() {
		t.Skip("starts conductor serve")
	}
	t.Run("gate in the configured sandbox", func(t *testing.T) {
		servePreviewCase(t, []string{"CONDUCTOR_GATE_SANDBOX=none"},
			[]string{`data-state="would-land"`, "gate files passed", "Decision-Id: ", "by alice"})
	})
	t.Run("the operator's bwrap missing", func(t *testing.T) {
		servePreviewCase(t, []string{"CONDUCTOR_BWRAP=/nonexistent/conductor-test/bwrap", "DOCKER_HOST=unix:///nonexistent/conductor-test/docker.sock"},
			[]string{`data-state="refused"`, "sandbox-unavailable", "/nonexistent/conductor-test/bwrap"})
	})
}

func servePreviewCase(t *testing.T, extraEnv, wants []string) {
	ctx := context.Background()
	home := t.TempDir()
	dataRoot := filepath.Join(home, "data")
	repo := filepath.Join(home, "repo")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const token = "alice-token-0123456789abcdef"
	env := workerEnv(t, home, append([]string{"CONDUCTOR_SERVE_TOKEN=" + token}, extraEnv...)...)
	must(os.MkdirAll(filepath.Join(repo, "lib"), 0o755))
	must(os.MkdirAll(filepath.Join(repo, "roles"), 0o755))
	must(os.MkdirAll(dataRoot, 0o755))
	must(os.WriteFile(filepath.Join(repo, "lib", "calc.go"), []byte("package lib\n"), 0o644))
	must(os.WriteFile(filepath.Join(repo, "roles", "conductor-policy.json"), []byte(`{"policyVersion": 1, "landing": {"gate": [
  {"name": "files", "argv": ["sh", "-c", "grep -q Sub lib/calc.go && echo served-gate-ok"], "timeoutSeconds": 60, "needsFiles": true}]}}`), 0o644))
	gitT(t, repo, env, "init", "-q", "-b", "main")
	gitT(t, repo, env, "add", "-A")
	gitT(t, repo, env, "commit", "-q", "-m", "initial")
	base := gitT(t, repo, env, "rev-parse", "HEAD")
	gitT(t, repo, env, "checkout", "-q", "-b", "work/a")
	must(os.WriteFile(filepath.Join(repo, "lib", "calc.go"), []byte("package lib\n\nfunc Sub(a, b int) int { return a - b }\n"), 0o644))
	gitT(t, repo, env, "commit", "-q", "-am", "Add Sub")
	work := gitT(t, repo, env, "rev-parse", "HEAD")
	gitT(t, repo, env, "checkout", "-q", "main")
	gitdir := filepath.Join(repo, ".git")
	pid, err := patch.DiffTrees(ctx, patch.Git{GitDir: gitdir}, base, work, io.Discard)
	must(err)

	st, err := bus.Open(ctx, bus.Options{DataRoot: dataRoot})
	must(err)
	_, err = st.PutVerdict(ctx, bus.Verdict{RunID: "run-a", WorkRef: "work/a", Commit: work, PatchID: pid, Verdict: bus.VerdictApprove, Reviewer: "rev"})
	must(err)
	d, err := st.RaiseDecision(ctx, bus.Decision{Kind: bus.KindMergeProtected, RaisedBy: "rev", Repo: gitdir, WorkRef: "work/a", Commit: work, Target: "main"})
	must(err)
	st.Close()
	refs := func() string { return gitT(t, repo, env, "for-each-ref", "--format=%(refname) %(objectname)") }
	before := refs()

	do, errb := startServe(t, env, token, "--poll", "50ms")
	if code, body := do("POST", "/decisions/"+d.ID+"/preview"); code != http.StatusSeeOther {
		t.Fatalf("preview: %d %s\n%s", code, body, errb.String())
	}
	var body string
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		_, body = do("GET", "/decisions")
		if !strings.Contains(body, `data-state="running"`) && strings.Contains(body, `data-preview="`+d.ID+`"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the preview never ended:\n%s\n%s", body, errb.String())
		}
	}
	if strings.Contains(wants[0], "would-land") {
		wants = append(wants, pid, "Decision-Id: "+d.ID)
	}
	for _, want := range wants {
		if !strings.Contains(body, want) {
			t.Errorf("the card lacks %q:\n%s\n%s", want, body, errb.String())
		}
	}
	if after := refs(); after != before {
		t.Errorf("the preview moved refs:\n%s\nwas\n%s", after, before)
	}
	st, err = bus.Open(ctx, bus.Options{DataRoot: dataRoot})
	must(err)
	defer st.Close()
	if got, err := st.GetDecision(ctx, d.ID); err != nil || !got.Open() {
		t.Errorf("the decision after the preview: %+v %v", got, err)
	}
	if _, err := st.GetLanding(ctx, d.ID); err == nil {
		t.Error("the preview wrote a landing")
	}
}
