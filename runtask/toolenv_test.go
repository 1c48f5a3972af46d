package runtask

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/policy"
)

// bwrapForTest returns the real bwrap sandbox, or skips (fails in CI).
func bwrapForTest(t *testing.T) sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.NewWithOptions(sandbox.BackendBwrap, sandbox.Options{})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bwrap sandbox needed in CI: %v", err)
		}
		t.Skipf("bwrap sandbox not available here: %v", err)
	}
	return sb
}

// reachableDir is a temp folder the sandbox uid can traverse.
func reachableDir(t *testing.T) string {
	t.Helper()
	tmp := os.TempDir()
	if (sandbox.Options{}).Reachable(tmp) != nil {
		tmp = "/tmp"
	}
	d, err := os.MkdirTemp(tmp, "conductor-toolenv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// A worker's command writes per-user configuration into the sandbox's HOME
// (the run's scratch folder, which persists across its commands), as a
// Makefile recipe can: $HOME/.config/go/env setting GOFLAGS=-toolexec=…,
// an ~/.npmrc setting script-shell, a user site-packages .pth file. The
// next command must not read any of it.
func TestCommandEnvIgnoresPlantedToolConfig(t *testing.T) {
	sb := bwrapForTest(t)
	base := reachableDir(t)
	wt := filepath.Join(base, "wt")
	scratch := filepath.Join(base, "scratch", "run-1")
	if err := os.MkdirAll(wt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := makeScratch(scratch); err != nil {
		t.Fatal(err)
	}
	env, _ := commandEnv(testEnv(map[string]string{"PATH": os.Getenv("PATH")}), &testRole{}, scratch, nil)
	home := filepath.Join(scratch, "home")
	plant := func(rel, content string) {
		p := filepath.Join(home, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plant(".config/go/env", "GOFLAGS=-toolexec=/tmp/evil\nCC=/tmp/evil-cc\n")
	plant(".npmrc", "script-shell=/tmp/evil-shell\n")
	run := func(argv ...string) string {
		t.Helper()
		res, err := sb.Run(context.Background(), sandbox.Spec{Dir: wt, Argv: argv, Env: env, Scratch: scratch})
		if err != nil {
			t.Fatalf("%q: %v", argv, err)
		}
		if res.ExitCode != 0 {
			t.Fatalf("%q: exit %d (%s): %s", argv, res.ExitCode, res.Outcome, res.Output)
		}
		return strings.TrimSpace(string(res.Output))
	}
	if got := run("go", "env", "GOFLAGS", "CC"); strings.Contains(got, "evil") {
		t.Errorf("go read the planted $HOME/.config/go/env:\n%s", got)
	}
	if _, err := os.Stat("/usr/bin/npm"); err == nil {
		if got := run("npm", "config", "get", "script-shell"); strings.Contains(got, "evil") {
			t.Errorf("npm read the planted ~/.npmrc: script-shell = %s", got)
		}
	}
	if got := run("python3", "-c", "import site, sys; print(site.ENABLE_USER_SITE)"); got != "False" {
		t.Errorf("python's user site-packages (in the sandbox HOME) is enabled: %s", got)
	}
}

// memRole is a role with limits.memoryBytes.
type memRole struct {
	testRole
	mem int64
}

func (r *memRole) MemoryLimit() int64 { return r.mem }

// The role's limits.memoryBytes reaches the sandbox as Spec.MemoryLimit,
// and a command that runs into it is reported to the model by name.
func TestRunCommandMemoryLimit(t *testing.T) {
	tb, _, _ := newToolbox(t)
	role := &memRole{testRole: testRole{commands: [][]string{{"alloc"}}}, mem: 128 << 20}
	tb.role = role
	tb.lim = resolveLimits(Task{}, role, conductor.Config{})
	sb := &fakeResultSandbox{res: sandbox.Result{ExitCode: 2, Outcome: sandbox.OutcomeMemoryExceeded, MemoryExceeded: true,
		Output: []byte("fatal error: runtime: out of memory\n")}}
	tb.sb = sb
	tb.scratch = filepath.Join(t.TempDir(), "scratch", "run")
	r := tb.call(context.Background(), ToolRunCommand, `{"argv":["alloc","1G"]}`)
	if len(sb.specs) != 1 || sb.specs[0].MemoryLimit != 128<<20 {
		t.Fatalf("specs %+v: want one with MemoryLimit 128 MiB", sb.specs)
	}
	if !r.IsError || !strings.Contains(r.Content, "memory limit (128 MiB") {
		t.Fatalf("result %+v", r)
	}
	// A role without the field leaves the sandbox's default (0).
	if l := resolveLimits(Task{}, &testRole{}, conductor.Config{}); l.MemoryLimit != 0 {
		t.Fatalf("MemoryLimit %d without a role limit", l.MemoryLimit)
	}
}

// fakeResultSandbox returns one result for every command and records specs.
type fakeResultSandbox struct {
	res   sandbox.Result
	specs []sandbox.Spec
}

func (s *fakeResultSandbox) Name() string { return "fake" }
func (s *fakeResultSandbox) Run(_ context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	s.specs = append(s.specs, spec)
	return s.res, nil
}

// *policy.Role carries limits.memoryBytes to the worker.
var _ memoryLimiter = (*policy.Role)(nil)

// End to end in the real sandbox: the role's limits.memoryBytes bounds a
// run_command, and the model is told the command failed at the limit.
func TestRunCommandMemoryLimitInBwrap(t *testing.T) {
	dir := reachableDir(t)
	tool := filepath.Join(dir, "escapetool")
	build := exec.Command("go", "build", "-buildvcs=false", "-o", tool, "github.com/conductor-dev/conductor/testdata/escape/escapetool")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build escapetool: %v\n%s", err, out)
	}
	sb, err := sandbox.NewWithOptions(sandbox.BackendBwrap, sandbox.Options{ReadOnly: []string{dir}})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bwrap sandbox needed in CI: %v", err)
		}
		t.Skipf("bwrap sandbox not available here: %v", err)
	}
	tb, _, _ := newToolbox(t)
	wt := filepath.Join(dir, "wt")
	if err := os.MkdirAll(wt, 0o755); err != nil {
		t.Fatal(err)
	}
	tb.dir = wt
	role := &memRole{testRole: testRole{commands: [][]string{{tool}}}, mem: 128 << 20}
	tb.role, tb.sb = role, sb
	tb.lim = resolveLimits(Task{}, role, conductor.Config{})
	tb.scratch = filepath.Join(dir, "scratch", "run")
	tb.env, _ = commandEnv(testEnv(nil), role, tb.scratch, nil)
	r := tb.call(context.Background(), ToolRunCommand, args(map[string]any{"argv": []string{tool, "alloc", "536870912"}}))
	if !r.IsError || !strings.Contains(r.Content, "command failed at its memory limit (128 MiB") {
		t.Fatalf("512 MiB under a 128 MiB role limit: %+v", r)
	}
	r = tb.call(context.Background(), ToolRunCommand, args(map[string]any{"argv": []string{tool, "alloc", "33554432"}}))
	if r.IsError || !strings.Contains(r.Content, "allocated 33554432 bytes") {
		t.Fatalf("32 MiB under a 128 MiB role limit: %+v", r)
	}
}

// TestResolveLimitsPrecedence: the task's limit, else the operator's
// (WORKER_MAX_TOOL_STEPS, WORKER_TOKEN_BUDGET), else the default; the
// role's limits are a ceiling over all three, never an override; the
// checkpoint cadence is the operator's, cut to the step limit.
func TestResolveLimitsPrecedence(t *testing.T) {
	every := func(n int) *int { return &n }
	for _, tc := range []struct {
		name              string
		task              Task
		role              *testRole
		cfg               conductor.Config
		steps, checkpoint int
		budget            int64
	}{
		{"defaults", Task{}, &testRole{}, conductor.Config{}, DefaultMaxSteps, DefaultCheckpointEvery, 0},
		{"the role caps the default", Task{}, &testRole{maxSteps: 30}, conductor.Config{}, 30, DefaultCheckpointEvery, 0},
		{"operator under the role", Task{}, &testRole{maxSteps: 30}, conductor.Config{MaxToolSteps: 5}, 5, 5, 0},
		{"operator over the role", Task{}, &testRole{maxSteps: 30}, conductor.Config{MaxToolSteps: 100}, 30, DefaultCheckpointEvery, 0},
		{"the task replaces the operator's", Task{MaxSteps: 7}, &testRole{}, conductor.Config{MaxToolSteps: 100}, 7, 5, 0},
		{"the role caps the task", Task{MaxSteps: 70}, &testRole{maxSteps: 60}, conductor.Config{}, 60, DefaultCheckpointEvery, 0},
		{"operator's cadence", Task{}, &testRole{}, conductor.Config{CheckpointEvery: every(1)}, DefaultMaxSteps, 1, 0},
		{"cadence never", Task{}, &testRole{}, conductor.Config{CheckpointEvery: every(0)}, DefaultMaxSteps, 0, 0},
		{"cadence cut to the steps", Task{}, &testRole{maxSteps: 3}, conductor.Config{CheckpointEvery: every(10)}, 3, 3, 0},
		{"operator's budget", Task{}, &testRole{}, conductor.Config{TokenBudget: 1000}, DefaultMaxSteps, DefaultCheckpointEvery, 1000},
		{"the role caps the operator's budget", Task{}, &testRole{budget: 500}, conductor.Config{TokenBudget: 1000}, DefaultMaxSteps, DefaultCheckpointEvery, 500},
		{"the role's budget when none is asked", Task{}, &testRole{budget: 500}, conductor.Config{}, DefaultMaxSteps, DefaultCheckpointEvery, 500},
		{"the role caps the task's budget", Task{TokenBudget: 9000}, &testRole{budget: 500}, conductor.Config{}, DefaultMaxSteps, DefaultCheckpointEvery, 500},
		{"the task's budget under the role's", Task{TokenBudget: 200}, &testRole{budget: 500}, conductor.Config{TokenBudget: 1000}, DefaultMaxSteps, DefaultCheckpointEvery, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := resolveLimits(tc.task, tc.role, tc.cfg)
			if l.MaxSteps != tc.steps || l.CheckpointEvery != tc.checkpoint || l.TokenBudget != tc.budget {
				t.Fatalf("steps %d checkpoint %d budget %d; want %d %d %d", l.MaxSteps, l.CheckpointEvery, l.TokenBudget, tc.steps, tc.checkpoint, tc.budget)
			}
		})
	}
}
