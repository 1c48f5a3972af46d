package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// bwrapBackend runs each command in a fresh bubblewrap sandbox:
//
//	prlimit (process, file-size, open-file, data-size and core limits)
//	  [in a child cgroup of Options.Cgroup with memory.max, when given]
//	  → bwrap --args 3 (as the unprivileged sandbox uid when the conductor is root)
//	    → a fresh user, mount, pid, net, ipc, uts and cgroup namespace
//	      → the command, in the worktree, with exactly Spec.Env
type bwrapBackend struct {
	opts    Options
	id      identity
	bwrap   string
	prlimit string
	version string
	layout  hostLayout
	warm    *warmer

	// infoDelay holds back reading bwrap's info document (tests only: it
	// opens the window where a command must be killed before the
	// conductor knows the sandbox's pid 1).
	infoDelay time.Duration
}

func newBwrap(o Options) (*bwrapBackend, error) {
	id, err := o.identity()
	if err != nil {
		return nil, fmt.Errorf("%w: bwrap: %v", ErrUnavailable, err)
	}
	b := &bwrapBackend{opts: o, id: id}
	if b.bwrap, err = lookPath(o.BwrapPath, "bwrap"); err != nil {
		return nil, fmt.Errorf("%w: bwrap: bubblewrap is not installed (%v); install the bubblewrap package", ErrUnavailable, err)
	}
	if b.prlimit, err = lookPath(o.PrlimitPath, "prlimit"); err != nil {
		return nil, fmt.Errorf("%w: bwrap: prlimit (util-linux) is not installed (%v); it sets the process and file limits", ErrUnavailable, err)
	}
	out, err := exec.Command(b.bwrap, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("%w: bwrap: %s --version: %v", ErrUnavailable, b.bwrap, err)
	}
	b.version = strings.TrimSpace(string(out))
	for _, p := range o.ReadOnly {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("%w: bwrap: read-only path %q is not absolute", ErrUnavailable, p)
		}
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w: bwrap: read-only path: %v", ErrUnavailable, err)
		}
		if id.drop {
			if err := checkReachable("read-only path", p, id); err != nil {
				return nil, fmt.Errorf("%w: bwrap: %v", ErrUnavailable, err)
			}
		}
	}
	if o.Cgroup != "" {
		if err := checkCgroup(o.Cgroup); err != nil {
			return nil, fmt.Errorf("%w: bwrap: %v (unset %s to rely on RLIMIT_DATA alone)", ErrUnavailable, err, EnvCgroup)
		}
	}
	b.layout = detectLayout(b.version)
	b.warm = newWarmer(o, id, true)
	return b, nil
}

func lookPath(override, name string) (string, error) {
	if override != "" {
		return exec.LookPath(override)
	}
	return exec.LookPath(name)
}

func (b *bwrapBackend) Name() string { return "bwrap" }

// sandboxInfo is what bwrap writes to --info-fd once the sandbox exists.
type sandboxInfo struct {
	ChildPID int    `json:"child-pid"`
	NetNS    uint64 `json:"net-namespace"`
	PidNS    uint64 `json:"pid-namespace"`
	UserNS   uint64 `json:"user-namespace"`
}

// Run runs spec in a fresh sandbox. A sandbox the kernel could not make
// for a moment (EAGAIN creating its namespaces, e.g. while the processes
// of a fork bomb killed just before are still being torn down) is made
// again, after 50, 100, 200 and 400 ms: nothing ran in it.
func (b *bwrapBackend) Run(ctx context.Context, spec Spec) (Result, error) {
	for wait := 50 * time.Millisecond; ; wait *= 2 {
		res, info, err := b.run(ctx, spec)
		if err == nil || info.ChildPID != 0 || wait > 400*time.Millisecond || !transientSetup(err) {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(wait):
		}
	}
}

// transientSetup reports a sandbox that bwrap could not set up because
// the kernel was out of a resource for the moment (EAGAIN).
func transientSetup(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "could not set up the sandbox") && strings.Contains(msg, "Resource temporarily unavailable")
}

func (b *bwrapBackend) run(ctx context.Context, spec Spec) (Result, sandboxInfo, error) {
	var info sandboxInfo
	p, err := makePlan(spec)
	if err != nil {
		return Result{ExitCode: -1}, info, fmt.Errorf("sandbox: %w", err)
	}
	if spec.WarmGoCache {
		if l := b.warm.layer(p.scratch, p.writableDirs(), p.env, cmpWarn(spec.Warn, b.opts.Warn)); l != nil {
			defer l.cleanup()
			p.addWarm(l)
		}
	}
	if b.id.drop {
		type dir struct {
			what, path string
			writable   bool
		}
		dirs := []dir{{"worktree", p.dir, true}, {"scratch folder", p.scratch, true}}
		for _, m := range p.mounts {
			dirs = append(dirs, dir{"mount", m.Path, m.Writable})
		}
		for _, d := range dirs {
			if d.path == "" {
				continue
			}
			if err := checkReachable(d.what, d.path, b.id); err != nil {
				return Result{ExitCode: -1}, info, fmt.Errorf("sandbox: %w", err)
			}
			if !d.writable {
				continue
			}
			if err := handOver(d.path, b.id); err != nil {
				return Result{ExitCode: -1}, info, fmt.Errorf("sandbox: %w", err)
			}
		}
	}
	const argsFD, infoFD, seccompFD = 3, 4, 5
	filter := hostSeccompFilter()
	sfd := -1
	if filter != nil {
		sfd = seccompFD
	}
	args := bwrapArgs(p, b.layout, b.opts.withDefaults(), infoFD, sfd)

	argsR, argsW, err := os.Pipe()
	if err != nil {
		return Result{ExitCode: -1}, info, fmt.Errorf("sandbox: %w", err)
	}
	infoR, infoW, err := os.Pipe()
	if err != nil {
		argsR.Close()
		argsW.Close()
		return Result{ExitCode: -1}, info, fmt.Errorf("sandbox: %w", err)
	}
	defer argsR.Close()
	defer argsW.Close()
	defer infoR.Close()
	defer infoW.Close()
	extra := []*os.File{argsR, infoW}
	var filterR, filterW *os.File
	if filter != nil {
		if filterR, filterW, err = os.Pipe(); err != nil {
			return Result{ExitCode: -1}, info, fmt.Errorf("sandbox: %w", err)
		}
		defer filterR.Close()
		defer filterW.Close()
		extra = append(extra, filterR)
	}

	o := b.opts.withDefaults()
	mem := o.memoryLimit(spec)
	cmd := &exec.Cmd{
		Path: b.prlimit,
		Args: []string{"prlimit",
			"--nproc=" + lim(o.MaxProcs), "--fsize=" + lim(o.MaxFileSize),
			"--nofile=" + lim(o.MaxOpenFiles), "--core=0:0", "--data=" + lim(uint64(mem)),
			"--", b.bwrap, "--args", strconv.Itoa(argsFD), "--"},
		Env:        []string{}, // bwrap itself gets nothing; --setenv gives the command Spec.Env
		Dir:        "/",
		ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if b.layout.env != "" && !p.hasEnv("PWD") {
		// bwrap sets PWD after --chdir; the command must see only
		// Spec.Env.
		cmd.Args = append(cmd.Args, b.layout.env, "-u", "PWD", "--")
	}
	cmd.Args = append(cmd.Args, p.argv...)
	if b.id.drop {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(b.id.uid), Gid: uint32(b.id.gid), Groups: []uint32{}}
	}
	var cg *memCgroup
	if o.Cgroup != "" {
		// The command starts inside its own cgroup (clone3 with
		// CLONE_INTO_CGROUP): nothing of it ever runs outside the limit.
		if cg, err = newMemCgroup(o.Cgroup, mem); err != nil {
			return Result{ExitCode: -1}, info, fmt.Errorf("sandbox: %w", err)
		}
		defer cg.remove()
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(cg.fd.Fd())
	}

	infoCh := make(chan sandboxInfo, 1)
	r := runner{opts: o}
	r.afterStart = func() (func(), func(time.Duration) bool) {
		argsR.Close()
		infoW.Close()
		if filter != nil {
			filterR.Close()
			go func() {
				_, _ = filterW.Write(filter)
				filterW.Close()
			}()
		}
		go func() {
			// bwrap reads its options NUL-separated from fd 3.
			var buf bytes.Buffer
			for _, s := range args {
				buf.WriteString(s)
				buf.WriteByte(0)
			}
			_, _ = argsW.Write(buf.Bytes())
			argsW.Close()
		}()
		go func() {
			// The first JSON document on the pipe is bwrap's, written
			// once the sandbox exists; take it as soon as it arrives.
			time.Sleep(b.infoDelay)
			var si sandboxInfo
			if err := json.NewDecoder(infoR).Decode(&si); err != nil {
				si = sandboxInfo{}
			}
			infoCh <- si
			_, _ = io.Copy(io.Discard, infoR)
		}()
		var got *sandboxInfo
		getInfo := func(wait time.Duration) *sandboxInfo {
			if got != nil {
				return got
			}
			select {
			case si := <-infoCh:
				got = &si
			case <-time.After(wait):
			}
			return got
		}
		kill := func() {
			// The sandbox's pid 1: killing it tears down the whole pid
			// namespace, whatever session or group its processes made.
			if si := getInfo(0); si != nil {
				killNamespace(si.ChildPID, si.PidNS)
			}
		}
		gone := func(grace time.Duration) bool {
			// bwrap is gone by now: its info document is in the pipe,
			// or the pipe ends without one (the sandbox never existed).
			// Only a slow reader keeps it: wait for it longer than the
			// grace, since a sandbox not known is a sandbox not killed.
			si := getInfo(max(grace, infoWait))
			if si == nil {
				return false
			}
			info = *si
			if si.ChildPID <= 0 {
				return true
			}
			// Killed before its info arrived, the sandbox's pid 1 has
			// only bwrap's parent-death signal to end it: kill it by
			// name too. After a normal exit it is gone already.
			killNamespace(si.ChildPID, si.PidNS)
			return waitGone(si.ChildPID, si.PidNS, grace)
		}
		return kill, gone
	}
	res, err := r.execute(ctx, cmd, spec)
	if err != nil {
		return res, info, err
	}
	if info.ChildPID == 0 && res.Outcome == OutcomeExited && res.ExitCode != 0 {
		return res, info, fmt.Errorf("sandbox: bwrap could not set up the sandbox: %s", strings.TrimSpace(string(res.Output)))
	}
	classifyMemory(&res, cg)
	return res, info, nil
}

// killNamespace sends SIGKILL to pid when it is still the pid 1 of the
// sandbox's pid namespace pidNS: the kernel then kills every process of the
// namespace. The process is pinned (a pidfd) before it is checked, so a pid
// reused by another process is never signalled.
func killNamespace(pid int, pidNS uint64) {
	if pid <= 0 {
		return
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return
	}
	defer p.Release()
	if inNamespaceAlive(pid, fmt.Sprintf("pid:[%d]", pidNS)) {
		_ = p.Signal(syscall.SIGKILL)
	}
}

// infoWait bounds how long a finished command's Run waits for bwrap's info
// document (see gone in run).
const infoWait = 10 * time.Second

func lim(n uint64) string { s := strconv.FormatUint(n, 10); return s + ":" + s }

// waitGone waits until the process pid, the pid 1 of the sandbox's pid
// namespace pidNS, has exited (is gone or a zombie). The kernel empties the
// namespace before its pid 1 becomes a zombie, so this means every process
// of the sandbox is gone.
func waitGone(pid int, pidNS uint64, grace time.Duration) bool {
	deadline := time.Now().Add(grace)
	want := fmt.Sprintf("pid:[%d]", pidNS)
	for {
		if !inNamespaceAlive(pid, want) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func inNamespaceAlive(pid int, nsLink string) bool {
	// /proc/PID/ns/pid names the namespace the process lives in: for the
	// sandbox's pid 1 that is the sandbox's; for a reused pid it differs.
	link, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	switch {
	case errors.Is(err, fs.ErrPermission):
		// not ours to inspect (a non-root conductor may not read the
		// links of a process in the sandbox's user namespace): fall
		// back to the state alone.
	case err != nil || link != nsLink:
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// state is the field after the parenthesised command name.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}

// Reachable reports whether this sandbox's uid can reach path (see
// Options.Reachable): a run checks its worktree base and scratch folder
// before it starts, not at its first command.
func (b *bwrapBackend) Reachable(path string) error { return b.opts.Reachable(path) }

// PrepareWorktree hands dir to this sandbox's uid (Options.PrepareWorktree).
func (b *bwrapBackend) PrepareWorktree(dir string) error { return b.opts.PrepareWorktree(dir) }
