package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Check is one fact Probe verified.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// BackendReport says whether one backend works here and why.
type BackendReport struct {
	Name   string  `json:"name"`
	Works  bool    `json:"works"`
	Detail string  `json:"detail"`
	Checks []Check `json:"checks,omitempty"`
}

// Report is what `conductor doctor` prints.
type Report struct {
	OS   string `json:"os"`
	EUID int    `json:"euid"`
	// Default is the backend "auto" resolves to on this machine; empty
	// when none works (auto then refuses to run anything).
	Default  string          `json:"default"`
	Backends []BackendReport `json:"backends"`
}

// Backend returns the report for one backend name ("auto" and "" mean the
// default), and whether it is known.
func (r Report) Backend(name string) (BackendReport, bool) {
	if name == BackendAuto || name == "" {
		if r.Default == "" {
			return BackendReport{Name: BackendAuto, Detail: "no isolating backend works here (auto never falls back to none)"}, true
		}
		name = r.Default
	}
	for _, b := range r.Backends {
		if b.Name == name {
			return b, true
		}
	}
	return BackendReport{}, false
}

// Folder is a folder runs will bind into the sandbox (the worktree base,
// the scratch folders), named for the report.
type Folder struct {
	Name string // "worktree base", "scratch folder"
	Path string
}

// Probe checks every backend on this machine by really running a command
// in it where it can. folders are where runs will create worktrees and
// scratch folders: bwrap works only if the sandbox uid can reach them.
func Probe(ctx context.Context, o Options, folders ...Folder) Report {
	o = o.withDefaults()
	r := Report{OS: runtime.GOOS, EUID: os.Geteuid()}
	bw := probeBwrap(ctx, o)
	if bw.Works {
		for _, f := range folders {
			if err := o.Reachable(f.Path); err != nil {
				bw.Checks = append(bw.Checks, Check{Name: f.Name + " reachable", Detail: err.Error()})
				if bw.Works {
					bw.Works = false
					bw.Detail = "the sandbox uid cannot reach the " + f.Name + ": every command of a run would fail"
				}
			} else {
				bw.Checks = append(bw.Checks, Check{Name: f.Name + " reachable", OK: true, Detail: f.Path})
			}
		}
	}
	r.Backends = append(r.Backends, bw)
	dk := probeDocker(ctx, o)
	switch {
	case bw.Works:
		r.Default = BackendBwrap
	case dk.Works:
		r.Default = BackendDocker
	}
	r.Backends = append(r.Backends,
		BackendReport{Name: BackendNone, Works: true,
			Detail: "no isolation: runs as the conductor's user with full access; only when asked for by name, with a warning on every run"},
		dk)
	return r
}

func probeBwrap(ctx context.Context, o Options) BackendReport {
	rep := BackendReport{Name: BackendBwrap}
	add := func(name string, ok bool, format string, args ...any) {
		rep.Checks = append(rep.Checks, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	fail := func(detail string) BackendReport { rep.Detail = detail; return rep }
	if runtime.GOOS != "linux" {
		add("linux", false, "bubblewrap needs Linux; this is %s", runtime.GOOS)
		return fail("needs Linux")
	}
	bwrap, err := lookPath(o.BwrapPath, "bwrap")
	if err != nil {
		add("bubblewrap installed", false, "%v (install the bubblewrap package)", err)
		return fail("bubblewrap is not installed")
	}
	version := "unknown version"
	if out, err := exec.CommandContext(ctx, bwrap, "--version").Output(); err == nil {
		version = strings.TrimSpace(string(out))
	}
	add("bubblewrap installed", true, "%s (%s)", bwrap, version)
	prl, err := lookPath(o.PrlimitPath, "prlimit")
	if err != nil {
		add("prlimit installed", false, "%v (util-linux; it sets the process and file limits)", err)
	} else {
		add("prlimit installed", true, "%s", prl)
	}
	id, err := o.identity()
	if err != nil {
		add("unprivileged user", false, "%v", err)
		return fail("no unprivileged user to run as")
	}
	name := "no name in /etc/passwd"
	if u, err := user.LookupId(strconv.Itoa(id.uid)); err == nil {
		name = u.Username
	}
	if id.drop {
		add("unprivileged user", true, "uid %d gid %d (%s): the conductor is root, so bwrap starts as this user", id.uid, id.gid, name)
	} else {
		add("unprivileged user", true, "uid %d gid %d (%s): the conductor's own user (not root)", id.uid, id.gid, name)
	}
	if prl == "" {
		return fail("prlimit is not installed")
	}
	b, err := newBwrap(o)
	if err != nil {
		return fail(err.Error())
	}
	info, err := b.probeRun(ctx)
	if err != nil {
		add("user namespaces", false, "running a command in bwrap failed: %v (%s)", err, userNSHint())
		return fail("bwrap cannot create its namespaces here")
	}
	add("user namespaces", true, "bwrap created a user namespace and ran a command as uid %d (%s)", id.uid, userNSHint())
	hostNet, herr := nsInode("/proc/self/ns/net")
	switch {
	case herr != nil:
		add("network isolation", false, "cannot read the host network namespace: %v", herr)
		return fail("network isolation unverified")
	case info.NetNS == 0 || info.NetNS == hostNet:
		add("network isolation", false, "the sandbox shares the host network namespace (%d)", hostNet)
		return fail("no network isolation")
	default:
		add("network isolation", true, "own network namespace (%d, host %d): loopback only, no route out", info.NetNS, hostNet)
	}
	if hostSeccompFilter() != nil {
		names := make([]string, len(blockedSyscalls))
		for i, c := range blockedSyscalls {
			names[i] = c.name
		}
		add("seccomp filter", true, "refuses %s; other ABIs refused", strings.Join(names, ", "))
	} else {
		add("seccomp filter", true, "none for %s (the namespaces and limits still apply)", runtime.GOARCH)
	}
	add("limits", true, "processes %d, file size %s, open files %d, /tmp %s, output kept %s, killed after %s of output",
		o.MaxProcs, bytesize(int64(o.MaxFileSize)), o.MaxOpenFiles, bytesize(o.TmpSize), bytesize(o.OutputLimit), bytesize(o.OutputKillLimit))
	cgOK, cgDetail := CgroupStatus(o)
	if cgOK {
		add("memory limit", true, "%s per command (memory.max of its own cgroup) and per process (RLIMIT_DATA); %s", bytesize(int64(o.MaxMemory)), cgDetail)
	} else {
		add("memory limit", true, "%s per process (RLIMIT_DATA; a command's processes are not limited together); %s", bytesize(int64(o.MaxMemory)), cgDetail)
	}
	rep.Works = true
	rep.Detail = "works: unprivileged, no network, read-only system, worktree the only writable path, .git hidden"
	return rep
}

// selfTest runs one command in the sandbox, for New.
func (b *bwrapBackend) selfTest() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := b.probeRun(ctx)
	return err
}

// probeRun runs `true` in a fresh sandbox on a temporary folder and checks
// it got its own network namespace.
func (b *bwrapBackend) probeRun(ctx context.Context) (sandboxInfo, error) {
	// The sandbox uid must reach the folder: $TMPDIR may be private to
	// the conductor, /tmp never is.
	base := os.TempDir()
	if b.id.drop && checkReachable("probe folder", filepath.Join(base, "probe"), b.id) != nil {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "conductor-sandbox-probe-")
	if err != nil {
		return sandboxInfo{}, err
	}
	defer os.RemoveAll(dir)
	res, info, err := b.run(ctx, Spec{Dir: dir, Argv: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}, Timeout: 20 * time.Second})
	if err != nil {
		return info, err
	}
	if res.ExitCode != 0 {
		return info, fmt.Errorf("`true` exited %d (%s): %s", res.ExitCode, res.Outcome, strings.TrimSpace(string(res.Output)))
	}
	if info.ChildPID == 0 {
		return info, errors.New("bwrap reported no sandbox")
	}
	host, err := nsInode("/proc/self/ns/net")
	if err != nil {
		return info, err
	}
	if info.NetNS == host {
		return info, errors.New("the sandbox shares the host network namespace")
	}
	return info, nil
}

func nsInode(link string) (uint64, error) {
	s, err := os.Readlink(link)
	if err != nil {
		return 0, err
	}
	i := strings.IndexByte(s, '[')
	if i < 0 || !strings.HasSuffix(s, "]") {
		return 0, fmt.Errorf("%s: unexpected %q", link, s)
	}
	return strconv.ParseUint(s[i+1:len(s)-1], 10, 64)
}

func userNSHint() string {
	var parts []string
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil {
		parts = append(parts, "user.max_user_namespaces="+strings.TrimSpace(string(b)))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil {
		parts = append(parts, "kernel.unprivileged_userns_clone="+strings.TrimSpace(string(b)))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil {
		parts = append(parts, "kernel.apparmor_restrict_unprivileged_userns="+strings.TrimSpace(string(b)))
	}
	if len(parts) == 0 {
		return "no user-namespace sysctls found"
	}
	return strings.Join(parts, ", ")
}

func bytesize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
