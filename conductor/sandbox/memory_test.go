package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A command that allocates more memory than the limit fails with the named
// outcome memory-exceeded; under the limit it runs. The attack
// (1.5 GiB) fails under the default limit.
func TestBwrapMemoryLimit(t *testing.T) {
	_, et := escapeTool(t)
	wt := worktree(t)
	allocIn := func(t *testing.T, sb Sandbox, spec Spec, how string, n int64) Result {
		t.Helper()
		spec.Dir, spec.Argv, spec.Timeout = wt, []string{et, how, strconv.FormatInt(n, 10)}, time.Minute
		res, err := sb.Run(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	alloc := func(sb Sandbox, spec Spec, n int64) Result {
		t.Helper()
		return allocIn(t, sb, spec, "alloc", n)
	}
	t.Run("option", func(t *testing.T) {
		sb := bwrapBox(t, func(o *Options) { o.MaxMemory = 256 << 20 })
		if res := alloc(sb, Spec{}, 512<<20); res.Outcome != OutcomeMemoryExceeded || res.ExitCode == 0 || !res.MemoryExceeded {
			t.Fatalf("512 MiB under a 256 MiB limit: outcome %s, exit %d, memoryExceeded %v\n%s", res.Outcome, res.ExitCode, res.MemoryExceeded, res.Output)
		}
		if res := alloc(sb, Spec{}, 64<<20); res.ExitCode != 0 || res.Outcome != OutcomeExited || res.MemoryExceeded {
			t.Fatalf("64 MiB under a 256 MiB limit: outcome %s, exit %d\n%s", res.Outcome, res.ExitCode, res.Output)
		}
	})
	t.Run("spec", func(t *testing.T) {
		sb := bwrapBox(t, nil)
		if res := alloc(sb, Spec{MemoryLimit: 128 << 20}, 256<<20); res.Outcome != OutcomeMemoryExceeded {
			t.Fatalf("256 MiB under Spec.MemoryLimit 128 MiB: outcome %s, exit %d\n%s", res.Outcome, res.ExitCode, res.Output)
		}
	})
	t.Run("default", func(t *testing.T) {
		sb := bwrapBox(t, nil)
		if res := alloc(sb, Spec{}, 1536<<20); res.Outcome != OutcomeMemoryExceeded {
			t.Fatalf("1.5 GiB under the default limit (%s): outcome %s, exit %d\n%s", bytesize(DefaultMaxMemory), res.Outcome, res.ExitCode, res.Output)
		}
		// The same on the Go heap: Go's runtime reports "out of memory",
		// or sometimes faults inside its collector instead; either way
		// the command fails.
		if res := allocIn(t, sb, Spec{}, "allocheap", 1536<<20); res.ExitCode == 0 {
			t.Fatalf("1.5 GiB on the Go heap under the default limit: outcome %s, exit 0\n%s", res.Outcome, res.Output)
		}
	})
}

// A cold `go test` (the standard library compiled into an empty build
// cache) works under the default memory limit.
func TestBwrapGoTestUnderDefaultMemoryLimit(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go on PATH")
	}
	out, err := exec.Command(goBin, "env", "GOROOT").Output()
	if err != nil {
		t.Fatal(err)
	}
	goroot := strings.TrimSpace(string(out))
	sb := bwrapBox(t, func(o *Options) {
		if !underAny(goroot, systemPaths) {
			o.ReadOnly = append(o.ReadOnly, goroot)
		}
	})
	wt, scratch := worktree(t), worktree(t)
	writeFile(t, filepath.Join(wt, "go.mod"), "module example.test/x\n\ngo 1.21\n", 0o644)
	writeFile(t, filepath.Join(wt, "x.go"), "package x\n\nfunc Add(a, b int) int { return a + b }\n", 0o644)
	writeFile(t, filepath.Join(wt, "x_test.go"), "package x\n\nimport (\n\t\"fmt\"\n\t\"testing\"\n)\n\nfunc TestAdd(t *testing.T) {\n\tif fmt.Sprint(Add(1, 2)) != \"3\" {\n\t\tt.Fatal(Add(1, 2))\n\t}\n}\n", 0o644)
	env := append([]string{"PATH=" + filepath.Join(goroot, "bin") + ":/usr/bin:/bin", "HOME=" + scratch + "/home",
		"GOCACHE=" + scratch + "/gocache", "GOPATH=" + scratch + "/gopath", "GOPROXY=off", "GOTOOLCHAIN=local"}, ToolConfigEnv()...)
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Scratch: scratch, Argv: []string{"go", "test", "-count=1", "./..."}, Env: env, Timeout: 10 * time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("go test under the default memory limit (%s): %v, outcome %s, exit %d\n%s", bytesize(DefaultMaxMemory), err, res.Outcome, res.ExitCode, res.Output)
	}
}

func TestMemoryOptions(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1073741824", 1 << 30, true}, {"512M", 512 << 20, true}, {"512MiB", 512 << 20, true},
		{"2G", 2 << 30, true}, {"2g", 2 << 30, true}, {"64K", 64 << 10, true},
		{"", 0, false}, {"-1", 0, false}, {"1.5G", 0, false}, {"lots", 0, false},
	} {
		got, err := ParseBytes(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseBytes(%q) = %d, %v", tc.in, got, err)
		}
	}
	o, err := OptionsFromEnv(func(k string) string {
		return map[string]string{EnvMemory: "768M", EnvCgroup: "/sys/fs/cgroup/conductor"}[k]
	})
	if err != nil || o.MaxMemory != 768<<20 || o.Cgroup != "/sys/fs/cgroup/conductor" {
		t.Fatalf("OptionsFromEnv: %+v, %v", o, err)
	}
	for _, bad := range []map[string]string{{EnvMemory: "1M"}, {EnvMemory: "x"}, {EnvCgroup: "relative/cg"}} {
		if _, err := OptionsFromEnv(func(k string) string { return bad[k] }); err == nil {
			t.Errorf("OptionsFromEnv(%v): no error", bad)
		}
	}
	if got := (Options{}).memoryLimit(Spec{}); got != DefaultMaxMemory {
		t.Errorf("default limit %d", got)
	}
	if got := (Options{MaxMemory: 2 << 30}).memoryLimit(Spec{MemoryLimit: 1}); got != MinMemory {
		t.Errorf("a tiny Spec.MemoryLimit gives %d, want MinMemory", got)
	}
	if got := (Options{}).memoryLimit(Spec{MemoryLimit: 8 << 30}); got != DefaultMaxMemory {
		t.Errorf("Spec.MemoryLimit 8 GiB under the default gives %d: a role must not raise the operator's limit", got)
	}
	if got := (Options{MaxMemory: 4 << 30}).memoryLimit(Spec{MemoryLimit: 2 << 30}); got != 2<<30 {
		t.Errorf("Spec.MemoryLimit 2 GiB under 4 GiB gives %d", got)
	}
	if _, err := NewWithOptions(BackendBwrap, Options{Cgroup: t.TempDir()}); err == nil {
		t.Error("a folder that is not a cgroup v2 folder was accepted as Options.Cgroup")
	}
}

func TestClassifyMemory(t *testing.T) {
	for _, tc := range []struct {
		res  Result
		want string
	}{
		{Result{Outcome: OutcomeExited, ExitCode: 2, Output: []byte("fatal error: runtime: out of memory\n")}, OutcomeMemoryExceeded},
		{Result{Outcome: OutcomeExited, ExitCode: 1, Output: []byte("Traceback ...\nMemoryError\n")}, OutcomeMemoryExceeded},
		{Result{Outcome: OutcomeExited, ExitCode: 1, Output: []byte("mmap: cannot allocate memory\n")}, OutcomeMemoryExceeded},
		{Result{Outcome: OutcomeSignaled, ExitCode: -1, Output: []byte("terminate called after throwing an instance of 'std::bad_alloc'")}, OutcomeMemoryExceeded},
		{Result{Outcome: OutcomeExited, ExitCode: 0, Output: []byte("out of memory (a test name)")}, OutcomeExited},
		{Result{Outcome: OutcomeExited, ExitCode: 1, Output: []byte("FAIL\n")}, OutcomeExited},
		{Result{Outcome: OutcomeTimeout, ExitCode: -1, Output: []byte("out of memory")}, OutcomeTimeout},
	} {
		res := tc.res
		classifyMemory(&res, nil)
		if res.Outcome != tc.want || res.MemoryExceeded != (tc.want == OutcomeMemoryExceeded) {
			t.Errorf("%s %d %q: outcome %s (memoryExceeded %v), want %s", tc.res.Outcome, tc.res.ExitCode, tc.res.Output, res.Outcome, res.MemoryExceeded, tc.want)
		}
	}
}

// checkCgroup refuses what is not a delegated cgroup v2 folder with the
// memory controller, naming why.
func TestCheckCgroup(t *testing.T) {
	if err := checkCgroup(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a cgroup v2 folder") {
		t.Errorf("a plain folder: %v", err)
	}
	// A cgroup v2 mount without the memory controller for its children
	// (here: the hybrid layout's unified hierarchy, when there is one).
	for _, d := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.subtree_control"))
		if err != nil || hasWord(string(b), "memory") {
			continue
		}
		if err := checkCgroup(d); err == nil || !strings.Contains(err.Error(), "memory controller is not enabled") {
			t.Errorf("%s: %v", d, err)
		}
		return
	}
}

// With a delegated cgroup v2 folder (CONDUCTOR_TEST_CGROUP: one with
// +memory in its cgroup.subtree_control, which this test may write), a
// command over its limit is killed or fails as memory-exceeded, and its
// child cgroup is gone afterwards. Skipped when no such folder is given.
func TestBwrapCgroupMemoryLimit(t *testing.T) {
	parent := os.Getenv("CONDUCTOR_TEST_CGROUP")
	if parent == "" {
		t.Skip("CONDUCTOR_TEST_CGROUP names no delegated cgroup v2 folder")
	}
	sb := bwrapBox(t, func(o *Options) { o.Cgroup = parent; o.MaxMemory = 128 << 20 })
	_, et := escapeTool(t)
	wt := worktree(t)
	for _, how := range []string{"alloc", "allocheap"} {
		res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, how, strconv.Itoa(512 << 20)}, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if how == "alloc" && res.Outcome != OutcomeMemoryExceeded {
			t.Errorf("%s 512 MiB in a 128 MiB cgroup: outcome %s, exit %d\n%s", how, res.Outcome, res.ExitCode, res.Output)
		}
		if res.ExitCode == 0 {
			t.Errorf("%s 512 MiB in a 128 MiB cgroup succeeded", how)
		}
	}
	ents, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "conductor-cmd-") {
			t.Errorf("child cgroup %s left behind", e.Name())
		}
	}
}
