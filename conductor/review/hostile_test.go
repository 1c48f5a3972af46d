package review_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor/review"
	"github.com/conductor-dev/conductor/conductor/runrec"
)

// check returns the named check of a report.
func check(rep review.Report, name string) review.Check {
	for _, c := range rep.Checks {
		if c.Name == name {
			return c
		}
	}
	return review.Check{}
}

// TestRoleWritesCheckedOnTheDiff: a command (not a write tool) rewrote the
// role contract and a workflow; review refuses with role-write-denied naming
// each path and the rule, even when the landing policy itself would let the
// paths through (issue 14 item 4).
func TestRoleWritesCheckedOnTheDiff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeFile(t, e.wt, "roles/implementer.json", `{"sandbox": "none"}`+"\n")
	writeFile(t, e.wt, "pkg/.github/ok.txt", "nested .github is not the root one\n")
	writeFile(t, e.wt, ".GitHub/workflows/ci.yml", "on: push\n")
	dir := e.run("r-1", runrec.StatusSucceeded)
	// A policy that forbids nothing the run touches and allows policy
	// changes: only the role's write rules stand in the way.
	pol := policyWith(t, `{"landing":{"forbiddenPaths":["src/**"],"noNewTopLevelDirs":false,"policyChanges":true,
		"gate":[{"name":"g","argv":["sh","-c","echo GATE-RAN"],"timeoutSeconds":30}]}}`)
	for _, approve := range []bool{false, true} {
		o := e.opts(dir, pol)
		o.Approve = approve
		rep, err := review.Run(context.Background(), o)
		if got := refusalCode(err); got != "role-write-denied" {
			t.Fatalf("approve=%v: refusal %q (%v), want role-write-denied", approve, got, err)
		}
		all := strings.Join(rep.Findings, "\n")
		for _, w := range []string{
			`role-write-denied: role implementer may not write roles/implementer.json (write.deny "roles/**")`,
			`role-write-denied: role implementer may not write .GitHub/workflows/ci.yml (write.deny ".github/**")`,
		} {
			if !strings.Contains(all, w) {
				t.Errorf("findings lack %q:\n%s", w, all)
			}
		}
		if strings.Contains(all, "pkg/.github") {
			t.Errorf("a nested .github folder is not denied:\n%s", all)
		}
		if c := check(rep, "writes"); c.Status != review.StatusFail {
			t.Errorf("writes check %+v", c)
		}
		// Nothing of the run is executed once it is refused for a breach.
		if len(rep.Gate) != 0 || check(rep, "syntax").Status != review.StatusSkip {
			t.Errorf("gate %+v / syntax %+v ran for a refused run", rep.Gate, check(rep, "syntax"))
		}
		if e.refExists("refs/heads/work/t-demo") {
			t.Error("refused review moved the work branch")
		}
		e.noVerdict(rep.WorkRef)
	}
	// With the default policy the same change is also forbidden-path and
	// policy-change.
	o := e.opts(dir, policyWith(t, passGate))
	rep, _ := review.Run(context.Background(), o)
	all := strings.Join(rep.Findings, "\n")
	for _, w := range []string{"forbidden-path: changing roles/implementer.json", "policy-change: ", "role-write-denied: "} {
		if !strings.Contains(all, w) && !strings.Contains(all, strings.Replace(w, "changing", "adding", 1)) {
			t.Errorf("default policy: findings lack %q:\n%s", w, all)
		}
	}
}

// TestHazardsRefuse: a run whose record lists a worktree hazard is refused
// with the hazard's code, naming the path (issue 14, bad input).
func TestHazardsRefuse(t *testing.T) {
	t.Parallel()
	for _, h := range []runrec.Hazard{
		{Code: runrec.HazardNestedRepo, Path: "vendor/lib/.git", Detail: "a .git folder"},
		{Code: runrec.HazardSpecialFile, Path: "pkg/nest/.git/HEAD", Detail: "a FIFO"},
		{Code: runrec.HazardUnsafeName, Path: `pkg/a\x1b]52;c;x\x07`, Detail: "control characters"},
	} {
		t.Run(h.Code, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			writeFile(t, e.wt, "pkg/ok.go", "package pkg\n")
			dir := e.run("r-1", runrec.StatusSucceeded)
			res, err := dir.ReadResult()
			if err != nil {
				t.Fatal(err)
			}
			res.Hazards = []runrec.Hazard{h}
			if err := dir.WriteResult(res); err != nil {
				t.Fatal(err)
			}
			o := e.opts(dir, policyWith(t, passGate))
			o.Approve = true
			rep, err := review.Run(context.Background(), o)
			if got := refusalCode(err); got != h.Code {
				t.Fatalf("refusal %q (%v), want %s", got, err, h.Code)
			}
			if !strings.Contains(err.Error(), h.Path) || !strings.Contains(strings.Join(rep.Findings, "\n"), h.Code+": "+h.Path) {
				t.Errorf("the refusal does not name %s: %v\n%v", h.Path, err, rep.Findings)
			}
			if e.refExists("refs/heads/work/t-demo") {
				t.Error("refused review moved the work branch")
			}
			e.noVerdict(rep.WorkRef)
		})
	}
}

// TestUnsafePathNameRefused: a diff path with control characters is refused
// by review's path checks (unsafe-path-name), and the report carries no raw
// escape byte.
func TestUnsafePathNameRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeFile(t, e.wt, "pkg/a\x1b]0;owned\x07.txt", "x\n")
	dir := e.run("r-1", runrec.StatusSucceeded)
	o := e.opts(dir, policyWith(t, passGate))
	rep, err := review.Run(context.Background(), o)
	if got := refusalCode(err); got != "unsafe-path-name" {
		t.Fatalf("refusal %q (%v), want unsafe-path-name", got, err)
	}
	if !strings.Contains(strings.Join(rep.Findings, "\n"), `unsafe-path-name: adding "pkg/a\x1b]0;owned\a.txt"`) {
		t.Errorf("findings %q", rep.Findings)
	}
	if strings.Contains(err.Error(), "\x1b") {
		t.Errorf("refusal carries a raw ESC: %q", err)
	}
}

// TestSyntaxChecksTakeNoOptions: a changed file named like an option is
// passed as a file, never as an option, and a Python check runs isolated
// from the tree's modules (issue 14, "review checks pass file names where
// options go").
func TestSyntaxChecksTakeNoOptions(t *testing.T) {
	t.Parallel()
	t.Run("node --require", func(t *testing.T) {
		t.Parallel()
		if _, err := exec.LookPath("node"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("node not installed (required when CI=true)")
			}
			t.Skip("node not installed")
		}
		e := newEnv(t)
		// The path "--require=./evil.js" is the folder "--require=." holding
		// evil.js: as an argument it is node's --require option.
		writeFile(t, e.wt, "evil.js", "console.log('EVIL-RAN'); process.exit(0);\n")
		writeFile(t, e.wt, "--require=./evil.js", "var ok = 1;\n")
		dir := e.run("r-1", runrec.StatusSucceeded)
		o := e.opts(dir, policyWith(t, `{"landing":{"gate":[],"noNewRootFiles":false,"noNewTopLevelDirs":false},"review":{"syntaxChecks":[
			{"glob":"**/*.js","argv":["node","--check"],"timeoutSeconds":60,"failOnOutput":true}]}}`))
		rep, err := review.Run(context.Background(), o)
		if err != nil {
			t.Fatalf("%v", err)
		}
		if c := check(rep, "syntax"); c.Status != review.StatusPass || !strings.Contains(c.Summary, "2 file check(s) passed") {
			t.Errorf("syntax %+v", c)
		}
		b, _ := json.Marshal(rep)
		if strings.Contains(string(b), "EVIL-RAN") {
			t.Errorf("evil.js ran: %s", b)
		}
	})
	t.Run("python json shadowed", func(t *testing.T) {
		t.Parallel()
		// The system's interpreter (a pyenv shim under /root is out of the
		// sandbox's reach).
		py := "/usr/bin/python3"
		if _, err := os.Stat(py); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("/usr/bin/python3 not installed (required when CI=true)")
			}
			t.Skip("/usr/bin/python3 not installed")
		}
		e := newEnv(t)
		writeFile(t, e.wt, "json/__init__.py", "")
		writeFile(t, e.wt, "json/tool.py", "print('EVIL-RAN')\nraise SystemExit(0)\n")
		writeFile(t, e.wt, "pkg/data.json", "{not json\n")
		dir := e.run("r-1", runrec.StatusSucceeded)
		// A repository policy that does not say -I itself: review adds it.
		o := e.opts(dir, policyWith(t, `{"landing":{"gate":[],"noNewTopLevelDirs":false},"review":{"syntaxChecks":[
			{"glob":"**/*.json","argv":["`+py+`","-m","json.tool"],"timeoutSeconds":60}]}}`))
		rep, err := review.Run(context.Background(), o)
		c := check(rep, "syntax")
		if refusalCode(err) != "review-failed" || c.Status != review.StatusFail {
			t.Fatalf("want the broken JSON found by the real json.tool: %v %+v", err, c)
		}
		all := strings.Join(c.Findings, "\n")
		if !strings.Contains(all, "-I -m json.tool ./pkg/data.json") {
			t.Errorf("findings %s", all)
		}
		if b, _ := json.Marshal(rep); strings.Contains(string(b), "EVIL-RAN") {
			t.Errorf("the tree's json module ran: %s", all)
		}
	})
}

// TestSymlinkChainThroughBase: the base holds docs/srclink -> ../src; a new
// link through it into src/ is forbidden-path (issue 16 item 6).
func TestSymlinkChainThroughBase(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := os.MkdirAll(filepath.Join(e.repo, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../src", filepath.Join(e.repo, "docs/srclink")); err != nil {
		t.Fatal(err)
	}
	git(t, e.repo, "add", "-A")
	git(t, e.repo, "commit", "-q", "-m", "srclink")
	e.base = git(t, e.repo, "rev-parse", "HEAD")
	git(t, e.wt, "checkout", "-q", "--detach", e.base)
	if err := os.Symlink("srclink/legacy.c", filepath.Join(e.wt, "docs/l")); err != nil {
		t.Fatal(err)
	}
	dir := e.run("r-1", runrec.StatusSucceeded)
	o := e.opts(dir, policyWith(t, passGate))
	rep, err := review.Run(context.Background(), o)
	if refusalCode(err) != "review-failed" {
		t.Fatalf("%v", err)
	}
	if all := strings.Join(rep.Findings, "\n"); !strings.Contains(all, "forbidden-path: symlink docs/l points into forbidden path src/** (src/legacy.c)") {
		t.Errorf("findings:\n%s", all)
	}
}
