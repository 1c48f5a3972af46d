package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/testenv"
)

// dockerHostEnv passes the test engine to helper processes.
const dockerHostEnv = "CONDUCTOR_TEST_DOCKER_HOST"

// dockerHost is the test engine: the private dockerd testenv starts (or
// the parent test's, in a helper process).
func dockerHost(t testing.TB) string {
	t.Helper()
	if h := os.Getenv(dockerHostEnv); h != "" {
		return h
	}
	return testenv.Docker(t)
}

// dockerBox returns a docker sandbox on the test engine with the escape
// tool's folder bound read-only; its containers are removed when the test
// ends. Without dockerd it skips, or fails when CI=true.
func dockerBox(t *testing.T, mod func(*Options)) *dockerBackend {
	t.Helper()
	host := dockerHost(t)
	dir, _ := escapeTool(t)
	o := Options{ReadOnly: []string{dir}, Docker: DockerOptions{Host: host}}
	if mod != nil {
		mod(&o)
	}
	sb, err := NewWithOptions(BackendDocker, o)
	if err != nil {
		t.Fatalf("docker sandbox on the test engine: %v", err)
	}
	t.Cleanup(func() {
		if err := Close(sb); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return sb.(*dockerBackend)
}

// dockerContainers lists the names of the containers the engine at host
// holds with the sandbox label.
func dockerContainers(t *testing.T, host string) []string {
	t.Helper()
	out, err := exec.Command("docker", "--host", host, "ps", "--all", "--filter", "label="+dockerLabel+"=1", "--format", "{{.Names}}").CombinedOutput()
	if err != nil {
		t.Fatalf("docker ps: %v %s", err, out)
	}
	return strings.Fields(string(out))
}

func TestDockerRunsCommands(t *testing.T) {
	sb := dockerBox(t, nil)
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

func TestDockerCommandNotFound(t *testing.T) {
	sb := dockerBox(t, nil)
	res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{"no-such-program-xyz"}, Env: []string{testPath}, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 || !strings.Contains(string(res.Output), "no-such-program-xyz") {
		t.Fatalf("exit %d, output %q: want a failure naming the program", res.ExitCode, res.Output)
	}
}

func TestDockerOneContainerPerJob(t *testing.T) {
	host := dockerHost(t)
	sb := dockerBox(t, nil)
	_, et := escapeTool(t)
	wt := worktree(t)
	before := len(dockerContainers(t, host))
	for i := 0; i < 3; i++ {
		res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "id"}, Timeout: 20 * time.Second})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("run %d: %v %s", i, err, res.Output)
		}
	}
	// /tmp belongs to the job: a file written by one command is there for
	// the next (unlike bwrap, where /tmp is fresh per command).
	for _, argv := range [][]string{{et, "write", "/tmp/kept", "x"}, {et, "read", "/tmp/kept"}} {
		if res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: argv, Timeout: 20 * time.Second}); err != nil || res.ExitCode != 0 {
			t.Fatalf("%v: %v %s", argv, err, res.Output)
		}
	}
	if n := len(dockerContainers(t, host)) - before; n != 1 {
		t.Fatalf("%d containers for one job, want 1", n)
	}
	// Another worktree is another job.
	if res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{"true"}, Env: []string{testPath}, Timeout: 20 * time.Second}); err != nil || res.ExitCode != 0 {
		t.Fatalf("second job: %v %s", err, res.Output)
	}
	if n := len(dockerContainers(t, host)) - before; n != 2 {
		t.Fatalf("%d containers for two jobs, want 2", n)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(dockerContainers(t, host)) - before; n != 0 {
		t.Fatalf("%d containers left after Close", n)
	}
}

// A worktree removed and made again at the same path is another job: its
// container binds the new folder, not the deleted one the first
// container's mounts still hold; that container is removed.
func TestDockerRecreatedFolderGetsANewContainer(t *testing.T) {
	host := dockerHost(t)
	sb := dockerBox(t, nil)
	_, et := escapeTool(t)
	wt := worktree(t)
	before := len(dockerContainers(t, host))
	for _, want := range []string{"first", "second", "third"} {
		if err := os.RemoveAll(wt); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(wt, "marker"), want, 0o644)
		res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "read", "marker"}, Timeout: 20 * time.Second})
		if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Output), want) {
			t.Fatalf("folder %q: want the command to read %q: %v, exit %d, %q", wt, want, err, res.ExitCode, res.Output)
		}
		if n := len(dockerContainers(t, host)) - before; n != 1 {
			t.Fatalf("%d containers for one folder made again, want 1", n)
		}
	}
}

func TestDockerRunsUnprivileged(t *testing.T) {
	sb := dockerBox(t, nil)
	_, et := escapeTool(t)
	wt := worktree(t)
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "id"}, Timeout: 20 * time.Second})
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
	res, err = sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "read", "/proc/self/status"}, Timeout: 20 * time.Second})
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
		if strings.HasPrefix(line, "Seccomp:") && !strings.HasSuffix(line, "2") {
			t.Errorf("no seccomp filter (Docker's default profile): %s", line)
		}
	}
	// Mounting, even a tmpfs, is refused (no CAP_SYS_ADMIN, and Docker's
	// seccomp profile refuses mount).
	if _, err := exec.LookPath("mount"); err == nil {
		res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{"mount", "-t", "tmpfs", "none", wt}, Env: []string{testPath}, Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode == 0 {
			t.Errorf("ESCAPE: mount succeeded in the sandbox: %s", res.Output)
		}
	}
}

func TestDockerEnvironmentIsExactlySpecEnv(t *testing.T) {
	secrets := map[string]string{
		"OPENAI_API_KEY":  "sk-" + token(t),
		"GITEA_TOKEN":     "gt-" + token(t),
		"CONDUCTOR_OTHER": "other-" + token(t),
		"DATABASE_URL":    "postgres://u:pw-" + token(t) + "@h/db",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	sb := dockerBox(t, nil)
	_, et := escapeTool(t)
	wt := worktree(t)
	for _, env := range [][]string{
		{testPath, "LANG=C.UTF-8", "HOME=/tmp/home", "GOFLAGS=-mod=mod"},
		{"LANG=C"}, // no PATH, no HOME: docker exec's own must not appear either
	} {
		res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "env"}, Env: env, Timeout: 20 * time.Second})
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
	}
	// Nor through /proc: the container's init and keeper carry none.
	for _, f := range []string{"/proc/1/cmdline", "/proc/1/environ", "/proc/2/environ"} {
		res, _ := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "read", f}, Timeout: 20 * time.Second})
		for k, v := range secrets {
			if strings.Contains(string(res.Output), v) {
				t.Errorf("%s in the sandbox shows %s", f, k)
			}
		}
	}
}

func TestDockerFilesystemConfinement(t *testing.T) {
	sb := dockerBox(t, nil)
	toolDir, et := escapeTool(t)
	secret := "secret-" + token(t)
	visibleSecret := filepath.Join(toolDir, "secret-"+token(t))
	writeFile(t, visibleSecret, secret, 0o600)
	t.Cleanup(func() { os.Remove(visibleSecret) })
	outside := worktree(t)
	hiddenSecret := filepath.Join(outside, "secret")
	writeFile(t, hiddenSecret, secret, 0o644)

	wt := worktree(t)
	parent := filepath.Dir(wt)
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
		mustAbsent string
		freshTmp   bool // the target lies under the container's own /tmp
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
		{"write to the read-only root", []string{et, "write", "/escaped", "x"}, "/escaped", false},
		{"make a folder in the read-only root", []string{et, "mkdir", "/escaped-dir"}, "/escaped-dir", false},
		{"plant a symlink outside", []string{et, "symlink", "/etc/passwd", filepath.Join(outside, "link")}, filepath.Join(outside, "link"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.argv[2] == visibleSecret && os.Geteuid() != 0 {
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
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "write", hostTmp, "x"}, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("write in the sandbox's /tmp: %v %s", err, res.Output)
	}
	if exists(hostTmp) {
		t.Fatalf("ESCAPE: %s appeared on the host", hostTmp)
	}
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

func TestDockerHidesGitFile(t *testing.T) {
	sb := dockerBox(t, nil)
	_, et := escapeTool(t)
	wt := worktree(t)
	gitFile := filepath.Join(wt, ".git")
	const content = "gitdir: /somewhere/main/.git/worktrees/wt\n"
	writeFile(t, gitFile, content, 0o644)
	for _, a := range []struct {
		name string
		argv []string
	}{
		{"overwrite .git", []string{et, "write", ".git", "gitdir: /tmp/evil\n"}},
		{"replace .git by a folder", []string{et, "mkdir", ".git/hooks"}},
		{"write a hook", []string{et, "write", ".git/hooks/post-checkout", "#!/bin/sh\ntouch /tmp/pwned\n"}},
		{"rename .git away", []string{"mv", ".git", "git-moved"}},
		{"remove .git", []string{"rm", "-f", ".git"}},
	} {
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
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "read", ".git"}, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Output), "gitdir") {
		t.Fatalf("the worker read .git: %q", res.Output)
	}
}

func TestDockerHidesGitDir(t *testing.T) {
	sb := dockerBox(t, nil)
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

func TestDockerHasNoNetwork(t *testing.T) {
	sb := dockerBox(t, nil)
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
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	wt := worktree(t)
	// The host's loopback, a public address, and the docker bridge's
	// gateway (how a container usually reaches its host).
	for _, addr := range []string{ln.Addr().String(), "1.1.1.1:53", "[::1]:22", "172.17.0.1:" + port} {
		res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "connect", addr}, Timeout: 20 * time.Second})
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

func TestDockerCannotReachTheEngine(t *testing.T) {
	host := dockerHost(t)
	sb := dockerBox(t, nil)
	_, et := escapeTool(t)
	sock := strings.TrimPrefix(host, "unix://")
	wt := worktree(t)
	for _, path := range []string{sock, "/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock"} {
		res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "connect", "unix:" + path}, Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode == 0 {
			t.Errorf("ESCAPE: reached %s from the sandbox: %s", path, res.Output)
		}
		res, _ = sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "read", path}, Timeout: 20 * time.Second})
		if !strings.Contains(string(res.Output), "no such file") {
			t.Errorf("%s is visible in the sandbox: %s", path, res.Output)
		}
	}
}

func TestDockerTimeoutKillsEveryProcess(t *testing.T) {
	sb := dockerBox(t, nil)
	_, et := escapeTool(t)
	tok := token(t)
	wt := worktree(t)
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "orphans", tok}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.Outcome != OutcomeTimeout || res.ExitCode != -1 {
		t.Fatalf("result %+v, want a timeout", res)
	}
	if !strings.Contains(string(res.Output), "started") {
		t.Fatalf("the command did not start its children: %s", res.Output)
	}
	if pids := survivors(tok); len(pids) > 0 {
		t.Fatalf("ESCAPE: processes survived the timeout: %v", pids)
	}
	// The job's container still serves the next command.
	if res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{"true"}, Env: []string{testPath}, Timeout: 20 * time.Second}); err != nil || res.ExitCode != 0 {
		t.Fatalf("after the timeout: %v %+v", err, res)
	}
}

func TestDockerBackgroundProcessesDieWithTheCommand(t *testing.T) {
	sb := dockerBox(t, nil)
	_, et := escapeTool(t)
	tok := token(t)
	res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{"sh", "-c", "setsid " + et + " linger " + tok + " >/dev/null 2>&1 &"}, Env: []string{testPath}, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%v %+v %s", err, res, res.Output)
	}
	if pids := survivors(tok); len(pids) > 0 {
		t.Fatalf("ESCAPE: a background process outlived its command: %v", pids)
	}
}

func TestDockerCancelledContext(t *testing.T) {
	sb := dockerBox(t, nil)
	_, et := escapeTool(t)
	tok := token(t)
	wt := worktree(t)
	// The container exists before the clock starts.
	if res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{"true"}, Env: []string{testPath}, Timeout: 20 * time.Second}); err != nil || res.ExitCode != 0 {
		t.Fatalf("%v %+v", err, res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	res, err := sb.Run(ctx, Spec{Dir: wt, Argv: []string{et, "orphans", tok}, Timeout: time.Minute})
	if !errors.Is(err, context.Canceled) || res.Outcome != OutcomeCancelled {
		t.Fatalf("err %v outcome %q, want context.Canceled and cancelled", err, res.Outcome)
	}
	if pids := survivors(tok); len(pids) > 0 {
		t.Fatalf("processes survived cancellation: %v", pids)
	}
}

func TestDockerForkBombIsBounded(t *testing.T) {
	sb := dockerBox(t, func(o *Options) { o.Docker.PidsLimit = 64 })
	toolDir, et := escapeTool(t)
	wt := worktree(t)
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "forkbomb"}, Timeout: 5 * time.Second, OutputLimit: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != OutcomePidsExceeded {
		t.Fatalf("fork bomb: %+v\n%s\nwant outcome %s", res, res.Output, OutcomePidsExceeded)
	}
	if pids := survivors(filepath.Join(toolDir, "escapetool") + "\x00forkbomb"); len(pids) > 0 {
		t.Fatalf("ESCAPE: %d fork bomb processes survived", len(pids))
	}
	res, err = sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{"true"}, Env: []string{testPath}, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("after the bomb: %v %+v", err, res)
	}
	// Killed one by one from outside, a bomb under load outlives the
	// kill's grace (it refills each pid freed between two scans): the
	// container's cgroup is frozen first, wherever the host has a freezer.
	if pathExists("/sys/fs/cgroup/freezer") || pathExists("/sys/fs/cgroup/cgroup.controllers") {
		for name, c := range sb.boxes {
			if c.freezer == nil {
				t.Errorf("container %s: no cgroup freezer found, on a host that has one", name)
			}
		}
	}
}

// TestDockerKillOfAForkBombUnderLoad: a fork bomb with room to grow (a
// process limit of 256, as the escape suite's) is killed whole when it
// ends, also beside CPU hogs that slow the conductor's kill: no "still
// alive after the kill" error.
func TestDockerKillOfAForkBombUnderLoad(t *testing.T) {
	sb := dockerBox(t, func(o *Options) { o.Docker.PidsLimit = 256 })
	toolDir, et := escapeTool(t)
	wt := worktree(t)
	for range 2 {
		hog := exec.Command("sh", "-c", "while :; do :; done")
		if err := hog.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hog.Process.Kill(); hog.Wait() })
	}
	for range 3 {
		res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "forkbomb"}, Timeout: 2 * time.Second, OutputLimit: 4096})
		if err != nil {
			t.Fatalf("the bomb's kill: %v", err)
		}
		if res.Outcome != OutcomePidsExceeded && res.Outcome != OutcomeTimeout {
			t.Fatalf("fork bomb: %+v, want it stopped by the process limit or the timeout", res)
		}
		if pids := survivors(filepath.Join(toolDir, "escapetool") + "\x00forkbomb"); len(pids) > 0 {
			t.Fatalf("ESCAPE: %d fork bomb processes survived", len(pids))
		}
	}
}

func TestDockerMemoryBombIsContained(t *testing.T) {
	sb := dockerBox(t, func(o *Options) { o.Docker.MemoryBytes = 64 << 20 })
	_, et := escapeTool(t)
	wt := worktree(t)
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "alloc", fmt.Sprint(512 << 20)}, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != OutcomeMemoryExceeded || !res.MemoryExceeded || res.ExitCode == 0 {
		t.Fatalf("memory bomb: %+v\n%s\nwant outcome %s", res, res.Output, OutcomeMemoryExceeded)
	}
	// Under the limit it works, in the same container.
	res, err = sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "alloc", fmt.Sprint(8 << 20)}, Timeout: 60 * time.Second})
	if err != nil || res.ExitCode != 0 || res.Outcome != OutcomeExited {
		t.Fatalf("8 MiB under a 64 MiB limit: %v %+v %s", err, res, res.Output)
	}
}

func TestDockerEndlessOutputIsBounded(t *testing.T) {
	sb := dockerBox(t, func(o *Options) { o.OutputKillLimit = 8 << 20 })
	_, et := escapeTool(t)
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
}

func TestDockerHomeAndScratch(t *testing.T) {
	sb := dockerBox(t, nil)
	_, et := escapeTool(t)
	wt := worktree(t)
	hostHome := "/conductor-nonexistent-" + token(t) + "/home"
	env := []string{testPath, "HOME=" + hostHome}
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "write", hostHome + "/f", "x"}, Env: env, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("write in a fresh HOME: %v %s", err, res.Output)
	}
	if exists(filepath.Dir(hostHome)) {
		t.Fatalf("HOME %s appeared on the host", hostHome)
	}
	scratch := worktree(t)
	env = []string{testPath, "HOME=" + scratch + "/home", "TMPDIR=/tmp/sub"}
	for _, argv := range [][]string{{et, "mkdir", scratch + "/home"}, {et, "write", scratch + "/home/f", "kept"}, {et, "read", scratch + "/home/f"}, {et, "mkdir", "/tmp/sub"}, {et, "write", "/tmp/sub/t", "x"}} {
		res, err := sb.Run(context.Background(), Spec{Dir: wt, Scratch: scratch, Argv: argv, Env: env, Timeout: 20 * time.Second})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%v: %v %s", argv, err, res.Output)
		}
	}
	if b, err := os.ReadFile(filepath.Join(scratch, "home", "f")); err != nil || string(b) != "kept" {
		t.Fatalf("scratch HOME on the host: %q %v", b, err)
	}
}

func TestDockerDirInsideAndMounts(t *testing.T) {
	sb := dockerBox(t, nil)
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
	for _, argv := range [][]string{{"write", "/work/made-inside", "w"}, {"read", ro + "/cfg"}, {"write", rw + "/out", "r"}} {
		if res, err := sb.Run(context.Background(), spec(argv...)); err != nil || res.ExitCode != 0 {
			t.Fatalf("%v: %v %s", argv, err, res.Output)
		}
	}
	if res, _ := sb.Run(context.Background(), spec("write", ro+"/cfg", "changed")); res.ExitCode == 0 {
		t.Fatalf("wrote through a read-only mount: %s", res.Output)
	}
	if res, _ := sb.Run(context.Background(), spec("read", "/work/.git")); strings.Contains(string(res.Output), "gitdir") {
		t.Fatalf("read the worktree's .git at /work: %q", res.Output)
	}
	if res, _ := sb.Run(context.Background(), spec("read", wt+"/made-inside")); res.ExitCode == 0 {
		t.Fatalf("the worktree's host path exists inside: %q", res.Output)
	}
	if b, _ := os.ReadFile(filepath.Join(wt, "made-inside")); string(b) != "w" {
		t.Fatalf("the worktree did not get the file written at /work: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(rw, "out")); string(b) != "r" {
		t.Fatalf("a writable mount did not get the file: %q", b)
	}
	for _, bad := range []Spec{
		{Dir: wt, Argv: []string{et, "read", "/"}, Mounts: []Mount{{Path: "/etc", Writable: true}}},
		{Dir: wt, Argv: []string{et, "read", "/"}, Mounts: []Mount{{Path: wt}}},
		{Dir: wt, Argv: []string{et, "read", "/"}, DirInside: "/usr/work"},
	} {
		if _, err := sb.Run(context.Background(), bad); err == nil {
			t.Errorf("spec %+v ran", bad)
		}
	}
}

func TestDockerEngineDown(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nothing.sock")
	if _, err := exec.LookPath("docker"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no docker CLI (required when CI=true)")
		}
		t.Skip("no docker CLI")
	}
	_, err := NewWithOptions(BackendDocker, Options{Docker: DockerOptions{Host: "unix://" + sock}})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), sock) {
		t.Fatalf("err = %v, want ErrUnavailable naming %s", err, sock)
	}
}

const dockerCrashEnv = "CONDUCTOR_DOCKER_CRASH_TOKEN"

// TestDockerKilledConductorsContainerIsReaped kills (SIGKILL) a conductor
// that has a job's container running a command: the container stays (the
// engine owns it), and the next start of the backend removes it.
func TestDockerKilledConductorsContainerIsReaped(t *testing.T) {
	if os.Getenv(dockerCrashEnv) != "" {
		t.Skip("helper process")
	}
	host := dockerHost(t)
	_, et := escapeTool(t)
	tok := token(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestDockerCrashHelper$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), dockerCrashEnv+"="+tok, escapeToolEnv+"="+et, dockerHostEnv+"="+host)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(60 * time.Second)
	for len(processesWith(tok)) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the helper's command never started its children")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	name := fmt.Sprintf("%s%d-", dockerPrefix, cmd.Process.Pid)
	mine := func() []string {
		var out []string
		for _, n := range dockerContainers(t, host) {
			if strings.HasPrefix(n, name) {
				out = append(out, n)
			}
		}
		return out
	}
	if len(mine()) != 1 {
		t.Fatalf("containers of the killed conductor: %v, want its one", mine())
	}
	// The next start reaps it, and its processes with it.
	dockerBox(t, nil)
	if left := mine(); len(left) != 0 {
		t.Fatalf("orphan containers left after the next start: %v", left)
	}
	if pids := survivors(tok); len(pids) > 0 {
		t.Fatalf("the orphan's processes still run: %v", pids)
	}
}

// TestDockerCrashHelper is the conductor killed above.
func TestDockerCrashHelper(t *testing.T) {
	tok := os.Getenv(dockerCrashEnv)
	if tok == "" {
		t.Skip("runs only as TestDockerKilledConductorsContainerIsReaped's helper")
	}
	dir, _ := escapeTool(t)
	sb, err := NewWithOptions(BackendDocker, Options{ReadOnly: []string{dir}, Docker: DockerOptions{Host: dockerHost(t)}})
	if err != nil {
		t.Fatal(err)
	}
	_, et := escapeTool(t)
	res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "orphans", tok}, Timeout: 2 * time.Minute})
	t.Fatalf("the helper should have been killed: %v %s", err, strings.TrimSpace(string(res.Output)))
}

func TestDockerProbe(t *testing.T) {
	host := dockerHost(t)
	dir, _ := escapeTool(t)
	rep := Probe(context.Background(), Options{ReadOnly: []string{dir}, Docker: DockerOptions{Host: host}})
	d, ok := rep.Backend(BackendDocker)
	if !ok || !d.Works {
		t.Fatalf("docker on the test engine: %+v", d)
	}
	for _, name := range []string{"docker engine reachable", "rootless", "seccomp profile", "limits supported", "runs a command", "isolation", "limits work"} {
		found := false
		for _, c := range d.Checks {
			if c.Name == name {
				found = c.OK
			}
		}
		if !found {
			t.Errorf("check %q missing or failed: %+v", name, d.Checks)
		}
	}
	if b, _ := rep.Backend(BackendBwrap); !b.Works && rep.Default != BackendDocker {
		t.Errorf("bwrap does not work, docker does: default %q, want docker", rep.Default)
	}
	if n := len(dockerContainers(t, host)); n != 0 {
		t.Errorf("the probe left %d containers", n)
	}
}

func TestDockerSeccompRefusesKernelInterfaces(t *testing.T) {
	sb := dockerBox(t, nil)
	_, et := escapeTool(t)
	wt := worktree(t)
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "syscalls"}, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("syscalls: %v %s", err, res.Output)
	}
	// Docker's default profile. (io_uring only from Docker 25 on:
	// docs/security.md, known gaps.)
	for _, name := range []string{"keyctl", "add_key", "bpf", "perf_event_open", "userfaultfd"} {
		if !strings.Contains(string(res.Output), name+": operation not permitted\n") {
			t.Errorf("%s is not refused in the container:\n%s", name, res.Output)
		}
	}
	// No key of the conductor's keyrings is readable.
	res, err = sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "keys"}, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 {
		t.Fatalf("ESCAPE: read a key in the container: %s", res.Output)
	}
}

func TestDockerRefusesToBindTheEngineSocket(t *testing.T) {
	host := dockerHost(t)
	sb := dockerBox(t, nil)
	sockDir := filepath.Dir(strings.TrimPrefix(host, "unix://"))
	for _, m := range []Mount{{Path: sockDir}, {Path: sockDir, Writable: true}} {
		_, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{"true"}, Env: []string{testPath}, Mounts: []Mount{m}, Timeout: 20 * time.Second})
		if err == nil || !strings.Contains(err.Error(), "socket") {
			t.Fatalf("mount %+v of the engine's folder: err %v, want a refusal naming the socket", m, err)
		}
	}
}

func TestDockerImageWithoutToolchain(t *testing.T) {
	host := dockerHost(t)
	// The scratch image itself holds no program: as an operator's image
	// (no host folders bound) it cannot even start the job's keeper.
	plain := dockerBox(t, nil)
	sb := dockerBox(t, func(o *Options) { o.Docker.Image = plain.image })
	_, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{"go", "test"}, Env: []string{testPath}, Timeout: 20 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "sleep") {
		t.Fatalf("err %v, want a refusal naming the missing program", err)
	}
	if n := len(dockerContainers(t, host)); n != 0 {
		t.Fatalf("%d containers left after the refusal", n)
	}
	// An operator's image that does not exist is refused by New.
	_, err = NewWithOptions(BackendDocker, Options{Docker: DockerOptions{Host: host, Image: "conductor-no-such-image:1"}})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "conductor-no-such-image") {
		t.Fatalf("err %v, want ErrUnavailable naming the image", err)
	}
}

func TestDockerKilledKeeperGivesANewContainer(t *testing.T) {
	sb := dockerBox(t, nil)
	_, et := escapeTool(t)
	wt := worktree(t)
	// kill -1 as the sandbox uid reaches the container's keeper: the
	// container stops. The next command gets a new one.
	if _, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "kill", "-1"}, Timeout: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{"echo", "still here"}, Env: []string{testPath}, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 || string(res.Output) != "still here\n" {
		t.Fatalf("after the keeper was killed: %v %+v %q", err, res, res.Output)
	}
}

func TestDockerSpecMemoryLimitLowersTheContainers(t *testing.T) {
	sb := dockerBox(t, func(o *Options) { o.Docker.MemoryBytes = 512 << 20 })
	_, et := escapeTool(t)
	wt := worktree(t)
	alloc := func(limit int64, n int) Result {
		t.Helper()
		res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "alloc", fmt.Sprint(n)}, MemoryLimit: limit, Timeout: 60 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// A role's 64 MiB: 256 MiB is past it.
	if res := alloc(64<<20, 256<<20); res.Outcome != OutcomeMemoryExceeded {
		t.Fatalf("256 MiB under a 64 MiB role limit: %+v %s", res, res.Output)
	}
	// No role limit: the container's 512 MiB again.
	if res := alloc(0, 256<<20); res.Outcome != OutcomeExited || res.ExitCode != 0 {
		t.Fatalf("256 MiB under the container's 512 MiB: %+v %s", res, res.Output)
	}
	// A role cannot raise it.
	if res := alloc(4<<30, 768<<20); res.Outcome != OutcomeMemoryExceeded {
		t.Fatalf("768 MiB with a 4 GiB role limit in a 512 MiB container: %+v %s", res, res.Output)
	}
}

func TestDockerBackgroundProcessHoldingTheOutput(t *testing.T) {
	sb := dockerBox(t, nil)
	_, et := escapeTool(t)
	tok := token(t)
	// The daemon keeps the command's output open: the command still ends
	// when sh does, with its output, and the daemon dies with it.
	res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{"sh", "-c", "echo hi; " + et + " linger " + tok + " &"}, Env: []string{testPath}, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 || res.Outcome != OutcomeExited || string(res.Output) != "hi\n" {
		t.Fatalf("%v %+v %q", err, res, res.Output)
	}
	if pids := survivors(tok); len(pids) > 0 {
		t.Fatalf("ESCAPE: a background process outlived its command: %v", pids)
	}
}

func TestDockerOptionsFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want DockerOptions
		err  string
	}{
		{"none", nil, DockerOptions{}, ""},
		{"all", map[string]string{EnvDockerHost: "unix:///run/x.sock", EnvDockerImage: "img:1", EnvDockerMemory: "512M", EnvDockerCPUs: "1.5", EnvDockerPids: "128", EnvDockerCLI: "/opt/docker"},
			DockerOptions{Host: "unix:///run/x.sock", Image: "img:1", MemoryBytes: 512 << 20, CPUs: 1.5, PidsLimit: 128, CLI: "/opt/docker"}, ""},
		{"memory too small", map[string]string{EnvDockerMemory: "1M"}, DockerOptions{}, EnvDockerMemory},
		{"memory not a size", map[string]string{EnvDockerMemory: "lots"}, DockerOptions{}, EnvDockerMemory},
		{"cpus zero", map[string]string{EnvDockerCPUs: "0"}, DockerOptions{}, EnvDockerCPUs},
		{"pids too few", map[string]string{EnvDockerPids: "3"}, DockerOptions{}, EnvDockerPids},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := OptionsFromEnv(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil || o.Docker != tc.want {
				t.Fatalf("got %+v %v, want %+v", o.Docker, err, tc.want)
			}
		})
	}
}
