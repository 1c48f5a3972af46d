package sandbox

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func token(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "tok" + hex.EncodeToString(b)
}

func TestBwrapRunsCommands(t *testing.T) {
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	wt := worktree(t)
	tests := []struct {
		name     string
		argv     []string
		stdin    string
		wantCode int
		wantOut  string
	}{
		{"exit zero", []string{"true"}, "", 0, ""},
		{"exit non-zero", []string{"false"}, "", 1, ""},
		{"usage error", []string{et}, "", 2, "usage: escapetool"},
		{"output", []string{"echo", "hello", "sandbox"}, "", 0, "hello sandbox\n"},
		{"stdin", []string{"cat"}, "from stdin\n", 0, "from stdin\n"},
		{"argv is never a shell string", []string{"echo", "$(id)", ";", "`id`", "&&", "id"}, "", 0, "$(id) ; `id` && id\n"},
		{"working directory is the worktree", []string{"pwd"}, "", 0, wt + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := Spec{Dir: wt, Argv: tc.argv, Env: []string{testPath}, Timeout: 20 * time.Second}
			if tc.stdin != "" {
				spec.Stdin = []byte(tc.stdin)
			}
			res, err := sb.Run(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tc.wantCode || res.Outcome != OutcomeExited {
				t.Fatalf("exit %d outcome %s, want %d exited; output:\n%s", res.ExitCode, res.Outcome, tc.wantCode, res.Output)
			}
			if tc.wantOut != "" && !strings.Contains(string(res.Output), tc.wantOut) {
				t.Fatalf("output %q does not contain %q", res.Output, tc.wantOut)
			}
		})
	}
}

func TestBwrapCommandNotFound(t *testing.T) {
	sb := bwrapBox(t, nil)
	res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{"no-such-program-xyz"}, Env: []string{testPath}, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 || !strings.Contains(string(res.Output), "no-such-program-xyz") {
		t.Fatalf("exit %d, output %q: want a failure naming the program", res.ExitCode, res.Output)
	}
}

func TestBwrapRunsUnprivileged(t *testing.T) {
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "id"}, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("id: %v %+v %s", err, res, res.Output)
	}
	want := fmt.Sprintf("uid=%d gid=%d euid=%d", os.Geteuid(), os.Getegid(), os.Geteuid())
	if os.Geteuid() == 0 {
		want = fmt.Sprintf("uid=%d gid=%d euid=%d", DefaultUID, DefaultGID, DefaultUID)
	}
	if !strings.HasPrefix(string(res.Output), want) {
		t.Fatalf("id in the sandbox: %q, want prefix %q", res.Output, want)
	}
	if os.Geteuid() == 0 && !strings.Contains(string(res.Output), "groups=[]") && !strings.Contains(string(res.Output), fmt.Sprintf("groups=[%d]", DefaultGID)) {
		t.Fatalf("supplementary groups leaked into the sandbox: %q", res.Output)
	}
	// No capability either, even inside its own user namespace.
	res, err = sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "read", "/proc/self/status"}, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("read status: %v %s", err, res.Output)
	}
	for _, line := range strings.Split(string(res.Output), "\n") {
		if strings.HasPrefix(line, "CapEff:") || strings.HasPrefix(line, "CapPrm:") || strings.HasPrefix(line, "CapBnd:") {
			if !strings.HasSuffix(line, "0000000000000000") {
				t.Errorf("capabilities in the sandbox: %s", line)
			}
		}
		if strings.HasPrefix(line, "NoNewPrivs:") && !strings.HasSuffix(line, "1") {
			t.Errorf("no_new_privs not set: %s", line)
		}
	}
}

func TestBwrapEnvironmentIsExactlySpecEnv(t *testing.T) {
	// Secrets in the conductor's own environment must not reach a command.
	secrets := map[string]string{
		"OPENAI_API_KEY":  "sk-" + token(t),
		"GITEA_TOKEN":     "gt-" + token(t),
		"CONDUCTOR_OTHER": "other-" + token(t),
		"DATABASE_URL":    "postgres://u:pw-" + token(t) + "@h/db",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	env := []string{testPath, "LANG=C.UTF-8", "HOME=/tmp/home", "GOFLAGS=-mod=mod"}
	res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "env"}, Env: env, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("env: %v %s", err, res.Output)
	}
	got := strings.Split(strings.TrimSpace(string(res.Output)), "\n")
	slices.Sort(got)
	want := slices.Clone(env)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("environment in the sandbox:\n%s\nwant exactly:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Nor through /proc: the sandbox's pid 1 (bwrap) carries no options
	// on its command line and an empty environment.
	for _, f := range []string{"/proc/1/cmdline", "/proc/1/environ"} {
		res, _ := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "read", f}, Timeout: 20 * time.Second})
		for k, v := range secrets {
			if strings.Contains(string(res.Output), v) {
				t.Errorf("%s in the sandbox shows %s", f, k)
			}
		}
		if strings.Contains(string(res.Output), "--ro-bind") {
			t.Errorf("%s shows the sandbox's options: %q", f, res.Output)
		}
	}
}

func TestBwrapFilesystemConfinement(t *testing.T) {
	sb := bwrapBox(t, nil)
	toolDir, et := escapeTool(t)
	secret := "secret-" + token(t)

	// A 0600 root-owned (test user's) file inside a folder the sandbox
	// sees read-only, and one in a folder it does not see at all.
	visibleSecret := filepath.Join(toolDir, "secret-"+token(t))
	writeFile(t, visibleSecret, secret, 0o600)
	t.Cleanup(func() { os.Remove(visibleSecret) })
	outside := worktree(t)
	hiddenSecret := filepath.Join(outside, "secret")
	writeFile(t, hiddenSecret, secret, 0o644)

	wt := worktree(t)
	parent := filepath.Dir(wt)
	// Symlinks planted in the worktree pointing out of it.
	for name, target := range map[string]string{"to-secret": hiddenSecret, "to-outside": outside, "to-root": "/", "to-parent": ".."} {
		if err := os.Symlink(target, filepath.Join(wt, name)); err != nil {
			t.Fatal(err)
		}
	}
	hostTmp := "/tmp/conductor-escape-" + token(t)
	t.Cleanup(func() { os.Remove(hostTmp) })

	tests := []struct {
		name       string
		argv       []string
		mustAbsent string // a host path that must not exist afterwards
		// freshTmp: the target lies under /tmp, which is a fresh tmpfs in
		// the sandbox: the write may succeed there; the host must not
		// see it.
		freshTmp bool
	}{
		{"read a 0600 file outside, visible read-only", []string{et, "read", visibleSecret}, "", false},
		{"read a file outside the sandbox's view", []string{et, "read", hiddenSecret}, "", false},
		{"read /etc/shadow", []string{et, "read", "/etc/shadow"}, "", false},
		{"read the host's root home", []string{et, "read", "/root/.bash_history"}, "", false},
		{"follow a planted symlink to a file outside", []string{et, "read", "to-secret"}, "", false},
		{"follow a planted symlink to a folder outside", []string{et, "read", "to-outside/secret"}, "", false},
		{"follow a planted symlink to /", []string{et, "read", "to-root" + hiddenSecret}, "", false},
		{"write through a planted symlink", []string{et, "write", "to-outside/planted", "x"}, filepath.Join(outside, "planted"), false},
		{"write next to the worktree", []string{et, "write", filepath.Join(parent, "escaped"), "x"}, filepath.Join(parent, "escaped"), within(parent, "/tmp")},
		{"write through ..", []string{et, "write", "to-parent/escaped2", "x"}, filepath.Join(parent, "escaped2"), within(parent, "/tmp")},
		{"write into /usr", []string{et, "write", "/usr/escaped-" + token(t), "x"}, "", false},
		{"write into /etc", []string{et, "write", "/etc/escaped", "x"}, "/etc/escaped", false},
		{"write into the read-only tool folder", []string{et, "write", filepath.Join(toolDir, "escaped"), "x"}, filepath.Join(toolDir, "escaped"), false},
		{"write at /", []string{et, "write", "/escaped", "x"}, "/escaped", false},
		{"plant a symlink outside", []string{et, "symlink", "/etc/passwd", filepath.Join(outside, "link")}, filepath.Join(outside, "link"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.argv[2] == visibleSecret && os.Geteuid() != 0 {
				// A non-root conductor's sandbox runs as the conductor's
				// own uid: its own 0600 files, where mounted, are its own.
				t.Skip("the conductor is not root: the sandbox runs as the file's owner")
			}
			res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: tc.argv, Env: []string{testPath}, Timeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode == 0 && !tc.freshTmp {
				t.Errorf("attempt succeeded inside the sandbox: %s", res.Output)
			}
			if strings.Contains(string(res.Output), secret) {
				t.Errorf("ESCAPE: the secret was read: %s", res.Output)
			}
			if tc.mustAbsent != "" && exists(tc.mustAbsent) {
				t.Errorf("ESCAPE: %s exists on the host", tc.mustAbsent)
			}
		})
	}

	// /tmp is fresh: writing there works but never reaches the host's /tmp.
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "write", hostTmp, "x"}, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("write in the sandbox's /tmp: %v %s", err, res.Output)
	}
	if exists(hostTmp) {
		t.Fatalf("ESCAPE: %s appeared on the host", hostTmp)
	}
	// The worktree itself is writable, and what is written lands on the host.
	for _, argv := range [][]string{{et, "mkdir", "sub"}, {et, "write", "sub/new.txt", "made inside"}} {
		res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: argv, Timeout: 20 * time.Second})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%v in the worktree: %v %s", argv, err, res.Output)
		}
	}
	if b, err := os.ReadFile(filepath.Join(wt, "sub", "new.txt")); err != nil || string(b) != "made inside" {
		t.Fatalf("worktree file on the host: %q %v", b, err)
	}
}

func TestBwrapHidesGitFile(t *testing.T) {
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	wt := worktree(t)
	gitFile := filepath.Join(wt, ".git")
	const content = "gitdir: /somewhere/main/.git/worktrees/wt\n"
	writeFile(t, gitFile, content, 0o644)

	attempts := []struct {
		name string
		argv []string
	}{
		{"overwrite .git", []string{et, "write", ".git", "gitdir: /tmp/evil\n"}},
		{"replace .git by a folder", []string{et, "mkdir", ".git/hooks"}},
		{"write a hook", []string{et, "write", ".git/hooks/post-checkout", "#!/bin/sh\ntouch /tmp/pwned\n"}},
		{"rename .git away", []string{"mv", ".git", "git-moved"}},
		{"remove .git", []string{"rm", "-f", ".git"}},
	}
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: a.argv, Env: []string{testPath}, Timeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode == 0 {
				t.Errorf("attempt succeeded: %s", res.Output)
			}
			if b, err := os.ReadFile(gitFile); err != nil || string(b) != content {
				t.Fatalf("ESCAPE: host .git changed: %q %v", b, err)
			}
		})
	}
	// Reading it shows nothing of the host's git directory.
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "read", ".git"}, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Output), "gitdir") {
		t.Fatalf("the worker read .git: %q", res.Output)
	}
	// The conductor keeps owning it.
	fi, err := os.Lstat(gitFile)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf(".git on the host: %v %v", fi, err)
	}
}

func TestBwrapHidesGitDir(t *testing.T) {
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	wt := worktree(t)
	cfg := filepath.Join(wt, ".git", "config")
	writeFile(t, cfg, "[core]\n\trepositoryformatversion = 0\n", 0o644)
	for _, argv := range [][]string{
		{et, "read", ".git/config"},
		{et, "write", ".git/config", "[core]\n\tfsmonitor = touch /tmp/pwned\n"},
		{et, "mkdir", ".git/hooks"},
		{"mv", ".git", "git-moved"},
		{"ls", ".git"},
	} {
		res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: argv, Env: []string{testPath}, Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode == 0 || strings.Contains(string(res.Output), "repositoryformatversion") {
			t.Errorf("%v succeeded: %s", argv, res.Output)
		}
	}
	if b, _ := os.ReadFile(cfg); !strings.Contains(string(b), "repositoryformatversion") || strings.Contains(string(b), "fsmonitor") {
		t.Fatalf("ESCAPE: host .git/config changed: %q", b)
	}
	if exists(filepath.Join(wt, ".git", "hooks")) {
		t.Fatal("ESCAPE: .git/hooks created on the host")
	}
}

func TestBwrapRefusesSymlinkedGit(t *testing.T) {
	sb := bwrapBox(t, nil)
	wt := worktree(t)
	if err := os.Symlink("/etc", filepath.Join(wt, ".git")); err != nil {
		t.Fatal(err)
	}
	_, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{"true"}, Env: []string{testPath}})
	if err == nil || !strings.Contains(err.Error(), "tampered") {
		t.Fatalf("err = %v, want a refusal naming the tampered .git", err)
	}
}

func TestBwrapHasNoNetwork(t *testing.T) {
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		got <- line
	}()
	for _, addr := range []string{ln.Addr().String(), "1.1.1.1:53", "[::1]:22"} {
		res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "connect", addr}, Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode == 0 {
			t.Errorf("ESCAPE: connected to %s from the sandbox: %s", addr, res.Output)
		}
	}
	select {
	case line := <-got:
		t.Fatalf("ESCAPE: the host listener received %q", line)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestBwrapTimeoutKillsEveryProcess(t *testing.T) {
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	tok := token(t)
	start := time.Now()
	res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "orphans", tok}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.Outcome != OutcomeTimeout || res.ExitCode != -1 {
		t.Fatalf("result %+v, want a timeout", res)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Run returned after %s", d)
	}
	if !strings.Contains(string(res.Output), "started") {
		t.Fatalf("the command did not start its children: %s", res.Output)
	}
	if pids := survivors(tok); len(pids) > 0 {
		t.Fatalf("ESCAPE: processes survived the timeout: %v", pids)
	}
}

func TestBwrapBackgroundProcessesDieWithTheCommand(t *testing.T) {
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	tok := token(t)
	// sh exits at once, leaving a daemon behind in a new session.
	res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{"sh", "-c", "setsid " + et + " linger " + tok + " >/dev/null 2>&1 &"}, Env: []string{testPath}, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%v %+v %s", err, res, res.Output)
	}
	if pids := survivors(tok); len(pids) > 0 {
		t.Fatalf("ESCAPE: a background process outlived its command: %v", pids)
	}
}

func TestBwrapForkBombIsBounded(t *testing.T) {
	const maxProcs = 64
	sb := bwrapBox(t, func(o *Options) {
		o.MaxProcs = maxProcs
		// RLIMIT_NPROC counts every process of the uid: a uid of its own
		// keeps other tests' sandboxes (and other packages', run in
		// parallel) out of this bomb's count.
		if os.Geteuid() == 0 {
			uid := 64998
			o.UID, o.GID = &uid, &uid
		}
	})
	toolDir, et := escapeTool(t)
	res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "forkbomb"}, Timeout: 3 * time.Second, OutputLimit: 4096})
	if err != nil {
		t.Fatal(err)
	}
	// Bounded either way: killed at the timeout, or unable to start at all
	// because another run of this test holds the uid's process limit.
	if !res.TimedOut && !strings.Contains(string(res.Output), "errno=11") {
		t.Fatalf("fork bomb: %+v\n%s\nwant killed at the timeout", res, res.Output)
	}
	if pids := survivors(filepath.Join(toolDir, "escapetool") + "\x00forkbomb"); len(pids) > 0 {
		t.Fatalf("ESCAPE: %d fork bomb processes survived", len(pids))
	}
	// The conductor still runs commands afterwards.
	res, err = sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{"true"}, Env: []string{testPath}, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("after the bomb: %v %+v", err, res)
	}
}

func TestBwrapEndlessOutputIsBounded(t *testing.T) {
	sb := bwrapBox(t, func(o *Options) { o.OutputKillLimit = 8 << 20 })
	_, et := escapeTool(t)
	start := time.Now()
	res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "spew"}, Timeout: 60 * time.Second, OutputLimit: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if !res.OutputExceeded || res.Outcome != OutcomeOutputExceeded || !res.Truncated || res.ExitCode != -1 {
		t.Fatalf("result %+v, want killed for its output", res)
	}
	if len(res.Output) > 64<<10+100 {
		t.Fatalf("kept %d bytes of output, limit 64 KiB", len(res.Output))
	}
	if res.OutputBytes <= 8<<20 {
		t.Fatalf("OutputBytes %d, want past the kill limit", res.OutputBytes)
	}
	if !strings.Contains(string(res.Output), "bytes omitted") {
		t.Fatalf("no truncation marker in the kept output")
	}
	if time.Since(start) > 30*time.Second {
		t.Fatalf("took %s: the output limit did not stop it", time.Since(start))
	}
}

func TestBwrapCancelledContext(t *testing.T) {
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	tok := token(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	res, err := sb.Run(ctx, Spec{Dir: worktree(t), Argv: []string{et, "orphans", tok}, Timeout: time.Minute})
	if !errors.Is(err, context.Canceled) || res.Outcome != OutcomeCancelled {
		t.Fatalf("err %v outcome %q, want context.Canceled and cancelled", err, res.Outcome)
	}
	if pids := survivors(tok); len(pids) > 0 {
		t.Fatalf("processes survived cancellation: %v", pids)
	}
}

func TestBwrapHomeAndScratch(t *testing.T) {
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	wt := worktree(t)
	hostHome := "/conductor-nonexistent-" + token(t) + "/home"

	// HOME outside every bound folder: a fresh tmpfs per command, never the host.
	env := []string{testPath, "HOME=" + hostHome}
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "write", hostHome + "/f", "x"}, Env: env, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("write in a fresh HOME: %v %s", err, res.Output)
	}
	if exists(filepath.Dir(hostHome)) {
		t.Fatalf("HOME %s appeared on the host", hostHome)
	}
	res, _ = sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "read", hostHome + "/f"}, Env: env, Timeout: 20 * time.Second})
	if res.ExitCode == 0 {
		t.Fatalf("HOME kept a file between commands without a scratch folder")
	}

	// With a scratch folder HOME persists across commands.
	scratch := worktree(t)
	env = []string{testPath, "HOME=" + scratch + "/home", "TMPDIR=/tmp/sub"}
	for _, argv := range [][]string{{et, "write", scratch + "/home/f", "kept"}, {et, "read", scratch + "/home/f"}, {et, "write", "/tmp/sub/t", "x"}} {
		res, err := sb.Run(context.Background(), Spec{Dir: wt, Scratch: scratch, Argv: argv, Env: env, Timeout: 20 * time.Second})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%v: %v %s", argv, err, res.Output)
		}
	}
	if b, err := os.ReadFile(filepath.Join(scratch, "home", "f")); err != nil || string(b) != "kept" {
		t.Fatalf("scratch HOME on the host: %q %v", b, err)
	}
}

func TestBwrapGoToolchainWorks(t *testing.T) {
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
	env := []string{"PATH=" + filepath.Join(goroot, "bin") + ":/usr/bin:/bin", "HOME=" + scratch + "/home",
		"GOCACHE=" + scratch + "/gocache", "GOPATH=" + scratch + "/gopath", "GOPROXY=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod"}
	for _, argv := range [][]string{{"go", "version"}, {"go", "build", "./..."}, {"go", "vet", "./..."}} {
		res, err := sb.Run(context.Background(), Spec{Dir: wt, Scratch: scratch, Argv: argv, Env: env, Timeout: 2 * time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%v in the sandbox: %v exit %d\n%s", argv, err, res.ExitCode, res.Output)
		}
	}
	// Module downloads fail: there is no network.
	writeFile(t, filepath.Join(wt, "dep.go"), "package x\n\nimport _ \"example.invalid/dep\"\n", 0o644)
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Scratch: scratch, Argv: []string{"go", "build", "./..."},
		Env: append(env[:len(env)-3:len(env)-3], "GOPROXY=https://proxy.golang.org", "GOTOOLCHAIN=local"), Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 {
		t.Fatalf("a module download succeeded inside the sandbox: %s", res.Output)
	}
}

func TestBwrapWorktreeOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("ownership hand-over happens only when the conductor is root")
	}
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	wt := worktree(t)
	writeFile(t, filepath.Join(wt, ".git"), "gitdir: /x\n", 0o644)
	// A file the conductor's tools wrote as root between two commands.
	writeFile(t, filepath.Join(wt, "pkg", "by-tool.go"), "package pkg\n", 0o644)
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "write", "pkg/by-tool.go", "package pkg // edited\n"}, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("worker cannot edit a file the conductor wrote: %v %s", err, res.Output)
	}
	if uid := fileUID(t, filepath.Join(wt, ".git")); uid != 0 {
		t.Fatalf(".git handed to uid %d; it must stay the conductor's", uid)
	}
	if uid := fileUID(t, filepath.Join(wt, "pkg", "by-tool.go")); uid != DefaultUID {
		t.Fatalf("worktree file owned by %d, want %d", uid, DefaultUID)
	}
}

func TestInheritedDescriptorsDoNotReachCommands(t *testing.T) {
	// A descriptor the conductor inherited without close-on-exec (as from
	// a CI runner or a supervisor): commands must not get it.
	var p [2]int
	syscall.ForkLock.Lock()
	err := syscall.Pipe(p[:])
	syscall.ForkLock.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	_, et := escapeTool(t)
	backends := []Sandbox{}
	if sb, err := NewWithOptions("none", Options{Warn: io.Discard}); err == nil {
		backends = append(backends, sb)
	}
	backends = append(backends, bwrapBox(t, nil))
	for _, sb := range backends {
		t.Run(sb.Name(), func(t *testing.T) {
			res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "fds"}, Timeout: 20 * time.Second})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("fds: %v %s", err, res.Output)
			}
			if strings.TrimSpace(string(res.Output)) != "" {
				t.Fatalf("ESCAPE: the command inherited descriptors:\n%s", res.Output)
			}
		})
	}
}

func TestBwrapFileSizeLimit(t *testing.T) {
	sb := bwrapBox(t, func(o *Options) { o.MaxFileSize = 1 << 20 })
	_, et := escapeTool(t)
	wt := worktree(t)
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "fill", "big", "3145728"}, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 && res.Outcome == OutcomeExited {
		t.Fatalf("wrote 3 MiB past a 1 MiB file limit: %+v %s", res, res.Output)
	}
	if fi, err := os.Stat(filepath.Join(wt, "big")); err == nil && fi.Size() > 1<<20 {
		t.Fatalf("the file grew to %d bytes", fi.Size())
	}
	// Under the limit it works.
	res, err = sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "fill", "small", "524288"}, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("a 512 KiB file: %v %s", err, res.Output)
	}
}

func TestBwrapConcurrentCommands(t *testing.T) {
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	const n = 12
	type got struct {
		i   int
		res Result
		err error
	}
	out := make(chan got, n)
	for i := 0; i < n; i++ {
		dir := worktree(t)
		go func(i int) {
			spec := Spec{Dir: dir, Argv: []string{"echo", fmt.Sprint("command-", i)}, Env: []string{testPath}, Timeout: 30 * time.Second}
			if i%4 == 3 { // some time out meanwhile
				spec = Spec{Dir: dir, Argv: []string{et, "orphans", fmt.Sprint("concurrent-token-", i)}, Timeout: 500 * time.Millisecond}
			}
			res, err := sb.Run(context.Background(), spec)
			out <- got{i, res, err}
		}(i)
	}
	for k := 0; k < n; k++ {
		g := <-out
		if g.err != nil {
			t.Errorf("command %d: %v", g.i, g.err)
			continue
		}
		if g.i%4 == 3 {
			if !g.res.TimedOut {
				t.Errorf("command %d: %+v, want a timeout", g.i, g.res)
			}
			if pids := survivors(fmt.Sprint("concurrent-token-", g.i)); len(pids) > 0 {
				t.Errorf("command %d left processes: %v", g.i, pids)
			}
			continue
		}
		if want := fmt.Sprint("command-", g.i, "\n"); string(g.res.Output) != want || g.res.ExitCode != 0 {
			t.Errorf("command %d: exit %d output %q, want %q", g.i, g.res.ExitCode, g.res.Output, want)
		}
	}
}

func TestBwrapSeccompRefusesKernelInterfaces(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("no seccomp filter probe for %s", runtime.GOARCH)
	}
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "syscalls"}, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("syscalls: %v %s", err, res.Output)
	}
	for _, name := range []string{"keyctl", "add_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup"} {
		if !strings.Contains(string(res.Output), name+": operation not permitted\n") {
			t.Errorf("%s is not refused in the sandbox:\n%s", name, res.Output)
		}
	}
	// Control: without the filter keyctl answers (the probe is not broken).
	none, err := NewWithOptions("none", Options{Warn: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	res, err = none.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "syscalls"}, Timeout: 20 * time.Second})
	if err != nil || strings.Contains(string(res.Output), "keyctl: operation not permitted") {
		t.Fatalf("control: %v %s", err, res.Output)
	}
}

func TestSeccompFilterShape(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		f := seccompFilter(arch)
		n := 3 + len(blockedSyscalls) + 3
		if arch == "amd64" {
			n++
		}
		if len(f) != 8*n {
			t.Fatalf("%s: %d bytes, want %d instructions", arch, len(f), n)
		}
	}
	if seccompFilter("riscv64") != nil {
		t.Fatal("a filter for an architecture without numbers")
	}
}

func TestBwrapLeavesNoZombies(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs a uid of its own (the conductor as root)")
	}
	const uid = 64996
	sb := bwrapBox(t, func(o *Options) { u := uid; o.UID, o.GID = &u, &u })
	_, et := escapeTool(t)
	before := map[string]bool{}
	for _, p := range processesOfUID(uid) {
		before[p] = true
	}
	// A command that exits leaves nothing of its uid behind, not even a
	// zombie waiting for the host's init (it would count against the
	// process limit, and a conductor that is a container's pid 1 would
	// never reap it). A command killed at its timeout may still leave its
	// own zombie to the host's init (docs/security.md, known gaps).
	for i := 0; i < 3; i++ {
		res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "id"}, Timeout: 20 * time.Second})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%v %s", err, res.Output)
		}
		for _, p := range processesOfUID(uid) {
			if !before[p] {
				t.Fatalf("run %d: a process of uid %d remains: %s", i, uid, p)
			}
		}
	}
}

// processesOfUID lists the host processes (zombies included) of uid.
func processesOfUID(uid int) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		var name, state string
		match := false
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(line, "Name:"):
				name = strings.TrimSpace(strings.TrimPrefix(line, "Name:"))
			case strings.HasPrefix(line, "State:"):
				state = strings.TrimSpace(strings.TrimPrefix(line, "State:"))
			case strings.HasPrefix(line, "Uid:"):
				f := strings.Fields(line)
				match = len(f) > 1 && f[1] == fmt.Sprint(uid)
			}
		}
		if match {
			out = append(out, e.Name()+" "+name+" "+state)
		}
	}
	return out
}

func TestBwrapDirInsideAndMounts(t *testing.T) {
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	wt := worktree(t)
	if err := os.WriteFile(filepath.Join(wt, ".git"), []byte("gitdir: /secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ro, rw := worktree(t), worktree(t)
	if err := os.WriteFile(filepath.Join(ro, "cfg"), []byte("config"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := func(argv ...string) Spec {
		return Spec{Dir: wt, DirInside: "/work", Argv: append([]string{et}, argv...), Env: []string{testPath},
			Mounts: []Mount{{Path: ro}, {Path: rw, Writable: true}}, Timeout: 20 * time.Second}
	}
	for _, argv := range [][]string{
		{"write", "/work/made-inside", "w"}, // the worktree, at its inside path
		{"read", ro + "/cfg"},               // a read-only mount is readable
		{"write", rw + "/out", "r"},         // a writable mount is writable
	} {
		if res, err := sb.Run(context.Background(), spec(argv...)); err != nil || res.ExitCode != 0 {
			t.Fatalf("%v: %v %s", argv, err, res.Output)
		}
	}
	if res, _ := sb.Run(context.Background(), spec("write", ro+"/cfg", "changed")); res.ExitCode == 0 {
		t.Fatalf("wrote through a read-only mount: %s", res.Output)
	}
	// The .git mask moves with the worktree; the host path is not inside.
	if res, _ := sb.Run(context.Background(), spec("read", "/work/.git")); strings.Contains(string(res.Output), "gitdir") {
		t.Fatalf("read the worktree's .git at /work: %q", res.Output)
	}
	if res, _ := sb.Run(context.Background(), spec("read", wt+"/made-inside")); res.ExitCode == 0 {
		t.Fatalf("the worktree's host path exists inside: %q", res.Output)
	}
	if b, _ := os.ReadFile(filepath.Join(wt, "made-inside")); string(b) != "w" {
		t.Fatalf("the worktree did not get the file written at /work: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ro, "cfg")); string(b) != "config" {
		t.Fatalf("a read-only mount changed: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(rw, "out")); string(b) != "r" {
		t.Fatalf("a writable mount did not get the file: %q", b)
	}
	// Mounts that would hand over a system folder or overlap the worktree are refused.
	for _, bad := range []Spec{
		{Dir: wt, Argv: []string{et, "read", "/"}, Mounts: []Mount{{Path: "/etc", Writable: true}}},
		{Dir: wt, Argv: []string{et, "read", "/"}, Mounts: []Mount{{Path: wt}}},
		{Dir: wt, Argv: []string{et, "read", "/"}, DirInside: "/usr/work"},
		{Dir: wt, Argv: []string{et, "read", "/"}, DirInside: "relative"},
	} {
		if _, err := sb.Run(context.Background(), bad); err == nil {
			t.Errorf("spec %+v ran", bad)
		}
	}
}

// TestBwrapReadOnlyDirs: the base tree's submodule folders are read-only
// inside the sandbox, so a command cannot plant a repository there
// directly; what is not a plain folder below the worktree is skipped.
func TestBwrapReadOnlyDirs(t *testing.T) { testReadOnlyDirs(t, bwrapBox(t, nil)) }

// TestDockerReadOnlyDirs: the same in the docker backend (issue 19: it
// ignored Spec.ReadOnlyDirs).
func TestDockerReadOnlyDirs(t *testing.T) { testReadOnlyDirs(t, dockerBox(t, nil)) }

func testReadOnlyDirs(t *testing.T, sb Sandbox) {
	_, et := escapeTool(t)
	wt := worktree(t)
	for _, d := range []string{"vendor/lib", "other"} {
		if err := os.MkdirAll(filepath.Join(wt, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/tmp", filepath.Join(wt, "linked")); err != nil {
		t.Fatal(err)
	}
	spec := func(argv ...string) Spec {
		return Spec{Dir: wt, Argv: argv, Env: []string{testPath}, Timeout: 20 * time.Second,
			ReadOnlyDirs: []string{"vendor/lib", "linked", "missing/x", "../escape", ".git", "other/../vendor"}}
	}
	res, err := sb.Run(context.Background(), spec(et, "mkdir", "vendor/lib/.git"))
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 {
		t.Fatalf("a repository was made in a read-only submodule folder: %s", res.Output)
	}
	if _, err := os.Lstat(filepath.Join(wt, "vendor", "lib", ".git")); err == nil {
		t.Fatal("vendor/lib/.git exists on the host")
	}
	res, err = sb.Run(context.Background(), spec(et, "write", "vendor/lib/planted", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 || exists(filepath.Join(wt, "vendor", "lib", "planted")) {
		t.Fatalf("a file was written into a read-only submodule folder (exit %d): %s", res.ExitCode, res.Output)
	}
	// Everything else stays writable.
	res, err = sb.Run(context.Background(), spec(et, "mkdir", "other/new"))
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("other/new: %v %s", err, res.Output)
	}
}

// TestBwrapKillBeforeTheSandboxReports kills a command at its deadline
// before the conductor has read which process is the sandbox's pid 1 (under
// load bwrap's info document can arrive late): every process the command
// started must still die with it.
func TestBwrapKillBeforeTheSandboxReports(t *testing.T) {
	for _, grace := range []time.Duration{200 * time.Millisecond, 5 * time.Second} {
		t.Run(grace.String(), func(t *testing.T) {
			sb := bwrapBox(t, func(o *Options) { o.KillGrace = grace })
			sb.infoDelay = 2 * time.Second
			_, et := escapeTool(t)
			tok := token(t)
			res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "orphans", tok}, Timeout: time.Second})
			if err == nil && !res.TimedOut {
				t.Fatalf("result %+v, want a timeout", res)
			}
			if pids := survivors(tok); len(pids) > 0 {
				t.Fatalf("ESCAPE: processes survived the kill (err %v): %v", err, pids)
			}
		})
	}
}

// A sandbox bwrap could not set up for a moment (EAGAIN creating its
// namespaces, as right after a killed fork bomb) is made again: the command
// runs once, in the second sandbox.
func TestBwrapRetriesTransientSetupFailure(t *testing.T) {
	real, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("no bwrap")
	}
	dir := worktree(t)                           // bwrap runs as the sandbox's user: it must reach
	if err := os.Chmod(dir, 0o777); err != nil { // and remove the marker
		t.Fatal(err)
	}
	failNext := filepath.Join(dir, "fail-next")
	fake := filepath.Join(dir, "bwrap")
	script := fmt.Sprintf("#!/bin/sh\nif [ -e %q ]; then rm -f %q; echo 'bwrap: Creating new namespace failed: Resource temporarily unavailable' >&2; exit 1; fi\nexec %q \"$@\"\n", failNext, failNext, real)
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sb := bwrapBox(t, func(o *Options) { o.BwrapPath = fake })
	if err := os.WriteFile(failNext, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{"echo", "ran"}, Env: []string{testPath}, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("the transient setup failure was not retried: %v", err)
	}
	if res.ExitCode != 0 || string(res.Output) != "ran\n" {
		t.Fatalf("exit %d, output %q; want the command run once", res.ExitCode, res.Output)
	}
	if _, err := os.Stat(failNext); err == nil {
		t.Fatal("the fake bwrap was never asked")
	}
}
