package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCapture(t *testing.T) {
	tests := []struct {
		name      string
		limit     int64
		writes    []string
		want      string
		truncated bool
	}{
		{"empty", 10, nil, "", false},
		{"fits", 10, []string{"abc", "def"}, "abcdef", false},
		{"exactly the limit", 6, []string{"abc", "def"}, "abcdef", false},
		{"head and tail kept", 6, []string{"abcdefghij"}, "abc\n... [4 bytes omitted] ...\nhij", true},
		{"many small writes", 4, []string{"a", "b", "c", "d", "e", "f", "g"}, "ab\n... [3 bytes omitted] ...\nfg", true},
		{"tail crosses writes", 6, []string{"abc", "de", "fgh", "ij"}, "abc\n... [4 bytes omitted] ...\nhij", true},
		{"big write after head", 4, []string{"ab", strings.Repeat("x", 100) + "yz"}, "ab\n... [100 bytes omitted] ...\nyz", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCapture(tc.limit, 0, nil)
			total := 0
			for _, w := range tc.writes {
				n, err := c.Write([]byte(w))
				if err != nil || n != len(w) {
					t.Fatalf("Write = %d, %v", n, err)
				}
				total += len(w)
			}
			got, tr := c.result()
			if string(got) != tc.want || tr != tc.truncated {
				t.Fatalf("result %q truncated=%v, want %q %v", got, tr, tc.want, tc.truncated)
			}
			if c.written() != int64(total) {
				t.Fatalf("written %d, want %d", c.written(), total)
			}
		})
	}
}

func TestCaptureKillLimitFiresOnce(t *testing.T) {
	fired := 0
	c := newCapture(8, 10, func() { fired++ })
	for i := 0; i < 5; i++ {
		c.Write([]byte("abcd"))
	}
	if fired != 1 {
		t.Fatalf("onExceed fired %d times, want once", fired)
	}
}

func TestMakePlanRejectsBadSpecs(t *testing.T) {
	wt := t.TempDir()
	file := filepath.Join(wt, "file")
	writeFile(t, file, "x", 0o644)
	linkedGit := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(linkedGit, ".git")); err != nil {
		t.Fatal(err)
	}
	scratchIn := filepath.Join(wt, "scratch")
	if err := os.Mkdir(scratchIn, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"no argv", Spec{Dir: wt}, "empty argv"},
		{"empty program", Spec{Dir: wt, Argv: []string{""}}, "empty argv"},
		{"NUL in argv", Spec{Dir: wt, Argv: []string{"echo", "a\x00--bind"}}, "NUL"},
		{"NUL in env", Spec{Dir: wt, Argv: []string{"true"}, Env: []string{"A=b\x00--bind"}}, "NUL"},
		{"env without =", Spec{Dir: wt, Argv: []string{"true"}, Env: []string{"PATH"}}, "NAME=VALUE"},
		{"env without name", Spec{Dir: wt, Argv: []string{"true"}, Env: []string{"=x"}}, "NAME=VALUE"},
		{"no dir", Spec{Argv: []string{"true"}}, "empty path"},
		{"relative dir", Spec{Dir: "wt", Argv: []string{"true"}}, "not an absolute path"},
		{"missing dir", Spec{Dir: filepath.Join(wt, "missing"), Argv: []string{"true"}}, "no such file"},
		{"dir is a file", Spec{Dir: file, Argv: []string{"true"}}, "not a directory"},
		{"dir is /", Spec{Dir: "/", Argv: []string{"true"}}, "system folder"},
		{"dir is /usr", Spec{Dir: "/usr", Argv: []string{"true"}}, "system folder"},
		{"dir is /tmp", Spec{Dir: "/tmp", Argv: []string{"true"}}, "system folder"},
		{"dir is /etc", Spec{Dir: "/etc", Argv: []string{"true"}}, "system folder"},
		{"scratch inside the worktree", Spec{Dir: wt, Scratch: scratchIn, Argv: []string{"true"}}, "overlap"},
		{"scratch is /home", Spec{Dir: wt, Scratch: "/home", Argv: []string{"true"}}, "system folder"},
		{".git is a symlink", Spec{Dir: linkedGit, Argv: []string{"true"}}, "tampered"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := makePlan(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("makePlan error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestBwrapArgs(t *testing.T) {
	wt := t.TempDir()
	scratch := t.TempDir()
	layout := hostLayout{
		sys:           []sysEntry{{path: "/usr"}, {path: "/bin", link: "usr/bin"}},
		etc:           []string{"/etc/passwd"},
		disableUserns: true, perms: true, size: true,
	}
	o := Options{ReadOnly: []string{"/opt/go"}}.withDefaults()
	gitDir := filepath.Join(t.TempDir(), "withgitdir")
	if err := os.MkdirAll(filepath.Join(gitDir, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wt, ".git"), "gitdir: x\n", 0o644)

	tests := []struct {
		name    string
		spec    Spec
		want    [][]string // each must appear as a contiguous run, in this order
		notWant []string   // never an argument (or, for paths, never a --tmpfs/--dir target)
	}{
		{
			name: "isolation and layout",
			spec: Spec{Dir: wt, Argv: []string{"go", "test"}, Env: []string{"PATH=/usr/bin", "LANG=C"}},
			want: [][]string{
				{"--unshare-all", "--unshare-user"},
				{"--die-with-parent", "--new-session", "--as-pid-1"},
				{"--clearenv"},
				{"--info-fd", "4", "--seccomp", "5"},
				{"--disable-userns"},
				{"--ro-bind", "/usr", "/usr"},
				{"--symlink", "usr/bin", "/bin"},
				{"--ro-bind", "/etc/passwd", "/etc/passwd"},
				{"--proc", "/proc", "--dev", "/dev"},
				{"--tmpfs", "/tmp"},
				{"--ro-bind", "/opt/go", "/opt/go"},
				{"--bind", wt, wt},
				{"--ro-bind", "/dev/null", filepath.Join(wt, ".git")},
				{"--remount-ro", "/", "--chdir", wt},
				{"--setenv", "PATH", "/usr/bin", "--setenv", "LANG", "C"},
			},
			notWant: []string{"--share-net", "go", "test"},
		},
		{
			name: "a .git folder becomes an empty read-only tmpfs",
			spec: Spec{Dir: gitDir, Argv: []string{"true"}},
			want: [][]string{{"--bind", gitDir, gitDir}, {"--perms", "0000", "--tmpfs", filepath.Join(gitDir, ".git"), "--remount-ro", filepath.Join(gitDir, ".git")}},
		},
		{
			name: "HOME outside gets a fresh tmpfs, under scratch a folder",
			spec: Spec{Dir: wt, Scratch: scratch, Argv: []string{"true"}, Env: []string{"HOME=/var/lib/x/home", "GOCACHE=" + scratch + "/cache", "TMPDIR=/tmp/t", "GOPATH=/usr/lib/go", "XDG_CACHE_HOME=relative"}},
			want: [][]string{
				{"--bind", scratch, scratch},
				{"--dir", scratch + "/cache"},
				{"--dir", "/tmp/t"},
				{"--tmpfs", "/var/lib/x/home"},
			},
			notWant: []string{"/usr/lib/go", "relative"},
		},
		{
			name: "duplicate env: last wins",
			spec: Spec{Dir: wt, Argv: []string{"true"}, Env: []string{"A=1", "A=2"}},
			want: [][]string{{"--setenv", "A", "2"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := makePlan(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			args := bwrapArgs(p, layout, o, 4, 5)
			pos := 0
			for _, w := range tc.want {
				i := indexRun(args[pos:], w)
				if i < 0 {
					t.Fatalf("args lack %q after position %d:\n%s", w, pos, strings.Join(args, " "))
				}
				pos += i + len(w)
			}
			opts := args
			if i := slices.Index(args, "--setenv"); i >= 0 {
				opts = args[:i]
			}
			for _, nw := range tc.notWant {
				if slices.Contains(opts, nw) {
					t.Fatalf("args contain %q:\n%s", nw, strings.Join(args, " "))
				}
			}
			if n := strings.Count(strings.Join(args, "\x00"), "--setenv\x00A\x00"); n > 1 {
				t.Fatalf("variable set %d times", n)
			}
		})
	}
}

func TestBwrapArgsFollowTheVersion(t *testing.T) {
	wt := t.TempDir()
	if err := os.Mkdir(filepath.Join(wt, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := makePlan(Spec{Dir: wt, Argv: []string{"true"}, Env: []string{"HOME=/var/lib/h"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		version string
		want    []string
		notWant []string
	}{
		{"bubblewrap 0.4.0", nil, []string{"--perms", "--size", "--disable-userns"}},
		{"bubblewrap 0.6.1", []string{"--perms"}, []string{"--size", "--disable-userns"}},
		{"bubblewrap 0.7.0", []string{"--perms", "--size"}, []string{"--disable-userns"}},
		{"bubblewrap 0.8.0", []string{"--perms", "--size", "--disable-userns"}, nil},
		{"bubblewrap 0.11.0", []string{"--perms", "--size", "--disable-userns"}, nil},
		{"bubblewrap 1.0", []string{"--perms", "--size", "--disable-userns"}, nil},
		{"garbage", nil, []string{"--perms", "--size", "--disable-userns"}},
	}
	for _, tc := range tests {
		t.Run(tc.version, func(t *testing.T) {
			args := bwrapArgs(p, detectLayout(tc.version), Options{}.withDefaults(), 4, -1)
			for _, w := range tc.want {
				if !slices.Contains(args, w) {
					t.Errorf("no %s: %v", w, args)
				}
			}
			for _, w := range tc.notWant {
				if slices.Contains(args, w) {
					t.Errorf("%s for %s: %v", w, tc.version, args)
				}
			}
			if slices.Contains(args, "--seccomp") {
				t.Error("--seccomp without a filter fd")
			}
			for _, need := range []string{"--unshare-all", "--die-with-parent", "--new-session", "--clearenv", "--remount-ro"} {
				if !slices.Contains(args, need) {
					t.Errorf("no %s", need)
				}
			}
		})
	}
}

func indexRun(s, run []string) int {
	for i := 0; i+len(run) <= len(s); i++ {
		if slices.Equal(s[i:i+len(run)], run) {
			return i
		}
	}
	return -1
}

func TestOptionsFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
		check   func(t *testing.T, o Options)
	}{
		{"nothing set", nil, "", func(t *testing.T, o Options) {
			if o.UID != nil || o.MaxProcs != 0 || o.ReadOnly != nil {
				t.Fatalf("%+v", o)
			}
		}},
		{"uid only", map[string]string{EnvUID: "1234"}, "", func(t *testing.T, o Options) {
			if *o.UID != 1234 || *o.GID != 1234 {
				t.Fatalf("uid %d gid %d", *o.UID, *o.GID)
			}
		}},
		{"uid and gid", map[string]string{EnvUID: "1234:99"}, "", func(t *testing.T, o Options) {
			if *o.UID != 1234 || *o.GID != 99 {
				t.Fatalf("uid %d gid %d", *o.UID, *o.GID)
			}
		}},
		{"root refused", map[string]string{EnvUID: "0"}, "never runs as root", nil},
		{"root group refused", map[string]string{EnvUID: "1000:0"}, "never runs as root", nil},
		{"bad uid", map[string]string{EnvUID: "nobody"}, "UID or UID:GID", nil},
		{"negative uid", map[string]string{EnvUID: "-5"}, "UID or UID:GID", nil},
		{"max procs", map[string]string{EnvMaxProcs: "300"}, "", func(t *testing.T, o Options) {
			if o.MaxProcs != 300 {
				t.Fatal(o.MaxProcs)
			}
		}},
		{"max procs too low", map[string]string{EnvMaxProcs: "3"}, "at least 16", nil},
		{"read-only paths", map[string]string{EnvReadOnly: "/opt/go:/opt/tools/"}, "", func(t *testing.T, o Options) {
			if !slices.Equal(o.ReadOnly, []string{"/opt/go", "/opt/tools"}) {
				t.Fatal(o.ReadOnly)
			}
		}},
		{"relative read-only path", map[string]string{EnvReadOnly: "opt/go"}, "not an absolute path", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := OptionsFromEnv(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
}

func TestNewNames(t *testing.T) {
	missing := Options{BwrapPath: "/nonexistent/bwrap"}
	tests := []struct {
		name        string
		backend     string
		opts        Options
		unavailable bool
		want        string
	}{
		{"unknown backend", "chroot", Options{}, false, "unknown sandbox backend"},
		{"docker without an engine", "docker", Options{Docker: DockerOptions{Host: "unix:///nonexistent/docker.sock"}}, true, "/nonexistent/docker.sock"},
		{"bwrap missing", "bwrap", missing, true, "bubblewrap is not installed"},
		{"auto never falls back to none", "auto", missing, true, "bubblewrap is not installed"},
		{"empty means auto", "", missing, true, "bubblewrap is not installed"},
		{"prlimit missing", "bwrap", Options{PrlimitPath: "/nonexistent/prlimit"}, true, "prlimit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sb, err := NewWithOptions(tc.backend, tc.opts)
			if err == nil {
				t.Fatalf("got backend %q, want an error", sb.Name())
			}
			if errors.Is(err, ErrUnavailable) != tc.unavailable || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v (unavailable=%v), want %q unavailable=%v", err, errors.Is(err, ErrUnavailable), tc.want, tc.unavailable)
			}
		})
	}
	sb, err := NewWithOptions("none", Options{})
	if err != nil || sb.Name() != "none" {
		t.Fatalf("none: %v %v", sb, err)
	}
}

func TestNoneBackend(t *testing.T) {
	var warn bytes.Buffer
	sb, err := NewWithOptions("none", Options{Warn: &warn})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPENAI_API_KEY", "sk-none-"+token(t))
	_, et := escapeTool(t)
	wt := t.TempDir()
	env := []string{testPath, "LANG=C"}

	res, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{et, "env"}, Env: env, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("env: %v %s", err, res.Output)
	}
	got := strings.Split(strings.TrimSpace(string(res.Output)), "\n")
	slices.Sort(got)
	if !slices.Equal(got, []string{"LANG=C", testPath}) {
		t.Fatalf("environment %q, want exactly Spec.Env", got)
	}
	if !strings.Contains(warn.String(), "WARNING") || !strings.Contains(warn.String(), "NO isolation") {
		t.Fatalf("no warning printed: %q", warn.String())
	}
	warn.Reset()
	if _, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{"true"}, Env: env}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(warn.String(), "WARNING") {
		t.Fatal("the warning must be printed on every run")
	}

	// Program lookup uses the command's PATH, not the conductor's.
	if _, err := sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{"true"}, Env: []string{"PATH=/nonexistent"}}); err == nil {
		t.Fatal("found `true` outside the command's PATH")
	}

	// A timeout kills the whole process group, background children too.
	tok := token(t)
	res, err = sb.Run(context.Background(), Spec{Dir: wt, Argv: []string{"sh", "-c", et + " linger " + tok + " & " + et + " linger " + tok}, Env: env, Timeout: 500 * time.Millisecond})
	if err != nil || !res.TimedOut {
		t.Fatalf("timeout: %v %+v", err, res)
	}
	deadline := time.Now().Add(30 * time.Second) // the kernel reaps a killed group asynchronously; a slow machine may take a while
	for len(processesWith(tok)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if pids := processesWith(tok); len(pids) > 0 {
		t.Fatalf("processes of the group survived: %v", pids)
	}
}

// TestNoneBackendIsNotASandbox is the control for the escape tests: the
// same attempts that fail under bwrap succeed without isolation, so the
// escape tests can tell an escape from a broken probe.
func TestNoneBackendIsNotASandbox(t *testing.T) {
	sb, err := NewWithOptions("none", Options{Warn: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	_, et := escapeTool(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	writeFile(t, secret, "the secret", 0o600)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for _, argv := range [][]string{
		{et, "read", secret},
		{et, "write", filepath.Join(outside, "written"), "x"},
		{et, "connect", ln.Addr().String()},
	} {
		res, err := sb.Run(context.Background(), Spec{Dir: t.TempDir(), Argv: argv, Env: []string{testPath}, Timeout: 20 * time.Second})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("control %v failed without a sandbox (the probe is broken): %v %s", argv, err, res.Output)
		}
	}
}

func TestPrepareWorktree(t *testing.T) {
	if os.Geteuid() != 0 {
		wt := t.TempDir()
		if err := (Options{}).PrepareWorktree(wt); err != nil {
			t.Fatalf("not root: %v", err)
		}
		uid := 12345
		if err := (Options{UID: &uid}).PrepareWorktree(wt); err == nil {
			t.Fatal("a non-root conductor cannot run the sandbox as another uid")
		}
		return
	}
	wt := worktree(t)
	writeFile(t, filepath.Join(wt, ".git"), "gitdir: x\n", 0o644)
	writeFile(t, filepath.Join(wt, "a", "b.txt"), "b", 0o644)
	if err := os.Symlink("/etc/passwd", filepath.Join(wt, "a", "link")); err != nil {
		t.Fatal(err)
	}
	uid, gid := 4242, 4343
	o := Options{UID: &uid, GID: &gid}
	if err := o.PrepareWorktree(wt); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{wt, filepath.Join(wt, "a"), filepath.Join(wt, "a", "b.txt"), filepath.Join(wt, "a", "link")} {
		if got := fileUID(t, p); got != uid {
			t.Errorf("%s owned by %d, want %d", p, got, uid)
		}
	}
	if got := fileUID(t, filepath.Join(wt, ".git")); got != 0 {
		t.Errorf(".git owned by %d, want the conductor (0)", got)
	}
	if got := fileUID(t, "/etc/passwd"); got != 0 {
		t.Fatalf("followed a symlink: /etc/passwd now owned by %d", got)
	}

	// A worktree under a folder the sandbox uid cannot traverse.
	private := t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(private, "wt")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	err := o.PrepareWorktree(inner)
	if err == nil || !strings.Contains(err.Error(), "not reachable") || !strings.Contains(err.Error(), private) {
		t.Fatalf("err %v, want one naming %s as unreachable", err, private)
	}
}

func TestProbeReport(t *testing.T) {
	rep := Probe(context.Background(), Options{Docker: DockerOptions{Host: "unix:///nonexistent/docker.sock"}})
	none, ok := rep.Backend("none")
	if !ok || !none.Works {
		t.Fatalf("none: %+v", none)
	}
	docker, ok := rep.Backend("docker")
	if !ok || docker.Works || docker.Detail == "" {
		t.Fatalf("docker must report why it does not work: %+v", docker)
	}
	bw, _ := rep.Backend("bwrap")
	if _, err := NewWithOptions("bwrap", Options{}); err != nil {
		if bw.Works || rep.Default != "" {
			t.Fatalf("New fails (%v) but the probe says bwrap works", err)
		}
		if os.Getenv("CI") == "true" {
			t.Fatalf("bwrap required in CI: %v\n%+v", err, bw)
		}
		t.Skipf("bwrap not available: %v", err)
	}
	if !bw.Works || rep.Default != "bwrap" {
		t.Fatalf("bwrap works here but the probe says %+v (default %q)", bw, rep.Default)
	}
	names := map[string]bool{}
	for _, c := range bw.Checks {
		names[c.Name] = c.OK
	}
	for _, n := range []string{"bubblewrap installed", "prlimit installed", "unprivileged user", "user namespaces", "network isolation", "seccomp filter", "limits"} {
		if ok, found := names[n]; !found || !ok {
			t.Errorf("check %q: found=%v ok=%v", n, found, ok)
		}
	}
	auto, _ := rep.Backend("auto")
	if auto.Name != "bwrap" {
		t.Fatalf("auto resolves to %q", auto.Name)
	}

	// A missing bwrap is reported with the reason, and auto has no default.
	rep = Probe(context.Background(), Options{BwrapPath: "/nonexistent/bwrap"})
	bw, _ = rep.Backend("bwrap")
	if bw.Works || rep.Default != "" || !strings.Contains(fmt.Sprint(bw.Checks), "install the bubblewrap package") {
		t.Fatalf("missing bwrap: %+v default %q", bw, rep.Default)
	}
	if auto, _ := rep.Backend("auto"); auto.Works {
		t.Fatal("auto must not work without bwrap")
	}
}
