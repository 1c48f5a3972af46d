package sandbox

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/conductor-dev/conductor/conductor"
)

// The docker backend runs every command of a job in one container made for
// the job (for one worktree) on first use and removed by Close:
//
//	docker run -d --init --network none --user UID:GID --cap-drop ALL
//	  --security-opt no-new-privileges --read-only --tmpfs /tmp
//	  --memory M --memory-swap M --cpus C --pids-limit P
//	  (host /usr … read-only, the worktree read-write, .git masked) IMAGE sleep infinity
//	docker exec --user UID:GID --workdir INSIDE --env … CONTAINER env -u … -- ARGV
//
// It speaks to the engine through the docker CLI (see docs/security.md for
// why not the Go SDK). After every command (and at a timeout) it kills every
// process of the container but its init and keeper, from the host, through
// the container's pid namespace: nothing a command starts outlives it.
// Commands in one container run one at a time.

// Defaults for DockerOptions.
const (
	DefaultDockerMemory = 2 << 30 // bytes of memory (and memory+swap) of a job's container
	DefaultDockerCPUs   = 2.0     // CPUs of a job's container
)

// Labels the docker backend puts on its containers.
const (
	dockerLabel      = "dev.conductor.sandbox"  // "1" on every container the backend makes
	dockerLabelOwner = "dev.conductor.owner"    // "MACHINE/PID/STARTTIME" of the conductor process that made it
	dockerLabelRun   = "dev.conductor.run"      // DockerOptions.RunID, when set
	dockerLabelDir   = "dev.conductor.worktree" // the worktree's host path
)

// Environment variables of the docker backend's knobs (resolved by
// conductor.Resolve, like the others of OptionsFrom).
const (
	EnvDockerHost   = conductor.EnvDockerHost   // the engine (as the docker CLI reads it)
	EnvDockerImage  = conductor.EnvDockerImage  // an operator's image; default: the conductor's own scratch image
	EnvDockerMemory = conductor.EnvDockerMemory // bytes (K, M, G suffixes allowed)
	EnvDockerCPUs   = conductor.EnvDockerCPUs   // a number of CPUs, e.g. 1.5
	EnvDockerPids   = conductor.EnvDockerPids   // the container's process limit (default: MaxProcs)
	EnvDockerCLI    = conductor.EnvDockerCLI    // path of the docker CLI
)

const (
	dockerImageRepo = "conductor-sandbox"  // the scratch image's repository name
	dockerPrefix    = "conductor-sandbox-" // container names
	dockerEnvBinary = "/usr/bin/env"       // clears what docker exec adds to the environment
	dockerPoll      = 5 * time.Millisecond // how often a kill checks the container's processes
	dockerCLIWait   = 2 * time.Minute      // deadline of one docker CLI call (not exec)
	dockerPidsFloor = 16                   // the smallest process limit accepted
	dockerInitPath  = "/sbin"              // docker binds its init at /sbin/docker-init: a real folder in the image
	dockerNotFound  = "No such container"  // the engine's answer for a removed container
)

// OutcomePidsExceeded: the command failed, or was killed at its timeout,
// after its container refused a process at its pids limit (a fork bomb).
const OutcomePidsExceeded = "pids-exceeded"

// DockerOptions tune the docker backend. The zero value of a field means its
// default.
type DockerOptions struct {
	CLI         string  // the docker CLI; default: docker in PATH
	Host        string  // the engine, as DOCKER_HOST; "": the CLI's default
	Image       string  // an operator's image with the toolchain inside; "": the scratch image, with the host's /usr bound read-only
	MemoryBytes int64   // memory (and memory+swap) of a job's container
	CPUs        float64 // CPUs of a job's container
	PidsLimit   int64   // processes and threads of a job's container; 0: Options.MaxProcs
	// RunID labels the containers (dev.conductor.run), for operators.
	RunID string
}

func (d DockerOptions) withDefaults(o Options) DockerOptions {
	if d.MemoryBytes == 0 {
		d.MemoryBytes = DefaultDockerMemory
	}
	if d.CPUs == 0 {
		d.CPUs = DefaultDockerCPUs
	}
	if d.PidsLimit == 0 {
		d.PidsLimit = int64(o.MaxProcs)
		if d.PidsLimit == 0 {
			d.PidsLimit = DefaultMaxProcs
		}
	}
	return d
}

// dockerBackend is the docker sandbox. Close removes its containers.
// PrepareWorktree hands dir to this sandbox's uid (Options.PrepareWorktree).
func (d *dockerBackend) PrepareWorktree(dir string) error { return d.opts.PrepareWorktree(dir) }

type dockerBackend struct {
	opts    Options
	dopts   DockerOptions
	id      identity
	cli     string
	version string
	layout  hostLayout
	state   string // host folder holding the empty file bound over a .git file
	image   string
	tag     string // random: names this backend's containers apart from other backends' of this process

	mu    sync.Mutex
	boxes map[string]*dockerJob
	// byMounts names, for each set of mounts, the key of the container
	// made for the sources they bind now (dockerMounts.key).
	byMounts map[string]string
	warm     *warmer
}

// dockerJob is one job's container.
type dockerJob struct {
	mu      sync.Mutex // one command at a time
	name    string
	pidNS   string       // "pid:[N]" of the container
	keep    map[int]bool // host pids of its init and keeper
	mem     int64        // the container's memory limit now (docker update changes it per command)
	memFile string       // host cgroup file counting OOM kills ("" when not found)
	pidFile string       // host cgroup file counting refused forks ("" when not found)
	freezer *freezer     // the container's cgroup freezer (nil when not found)
	dead    atomic.Bool  // removed or failed: the next Run makes a new one
}

// engine says whether the engine answers: the CLI's path and the engine's
// version, or an error naming where the CLI looked.
func (d DockerOptions) engine(ctx context.Context) (cli, version string, err error) {
	cli, err = lookPath(d.CLI, "docker")
	if err != nil {
		return "", "", fmt.Errorf("the docker CLI is not installed (%v); install Debian's docker.io", err)
	}
	out, err := d.command(ctx, cli, "version", "--format", "{{.Server.Version}}").CombinedOutput()
	if err != nil {
		return cli, "", fmt.Errorf("no Docker engine answers at %s: %s", d.where(), firstLine(out, err))
	}
	return cli, strings.TrimSpace(string(out)), nil
}

// where names the engine's socket for messages.
func (d DockerOptions) where() string {
	if d.Host != "" {
		return d.Host
	}
	return "unix:///var/run/docker.sock (the docker CLI's default; set DOCKER_HOST)"
}

// command is one docker CLI call. The CLI gets only what it needs from the
// conductor's environment (never a worker's): PATH and HOME to find its
// config, and the engine it is told.
func (d DockerOptions) command(ctx context.Context, cli string, args ...string) *exec.Cmd {
	if d.Host != "" {
		args = append([]string{"--host", d.Host}, args...)
	}
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.Env = dockerCLIEnv()
	return cmd
}

func dockerCLIEnv() []string {
	env := []string{}
	for _, n := range []string{"PATH", "HOME", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY", "DOCKER_CONTEXT"} {
		if v, ok := os.LookupEnv(n); ok {
			env = append(env, n+"="+v)
		}
	}
	return env
}

func firstLine(out []byte, err error) string {
	s := strings.TrimSpace(string(out))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if s == "" && err != nil {
		s = err.Error()
	}
	return s
}

func newDocker(o Options) (*dockerBackend, error) {
	id, err := o.identity()
	if err != nil {
		return nil, fmt.Errorf("%w: docker: %v", ErrUnavailable, err)
	}
	d := o.Docker.withDefaults(o)
	ctx, cancel := context.WithTimeout(context.Background(), dockerCLIWait)
	defer cancel()
	cli, version, err := d.engine(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: docker: %v", ErrUnavailable, err)
	}
	b := &dockerBackend{opts: o, dopts: d, id: id, cli: cli, version: version, boxes: map[string]*dockerJob{}}
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	b.tag = hex.EncodeToString(rnd[:])
	b.warm = newWarmer(o, id, false)
	for _, p := range o.ReadOnly {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("%w: docker: read-only path %q is not absolute", ErrUnavailable, p)
		}
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w: docker: read-only path: %v", ErrUnavailable, err)
		}
	}
	b.layout = detectLayout("")
	if _, err := b.reapOrphans(ctx); err != nil {
		return nil, fmt.Errorf("%w: docker: %v", ErrUnavailable, err)
	}
	reapStateFolders()
	if b.image, err = b.ensureImage(ctx); err != nil {
		return nil, fmt.Errorf("%w: docker: %v", ErrUnavailable, err)
	}
	return b, nil
}

func (b *dockerBackend) Name() string { return BackendDocker }

// ensureState makes the backend's host folder (b.mu held): the empty file
// and the empty folder bound over a worktree's .git.
func (b *dockerBackend) ensureState() error {
	if b.state != "" {
		return nil
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("conductor-docker-%d-", os.Getpid()))
	if err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "git-mask"), nil, 0o444); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, "git-mask-dir"), 0o000); err != nil {
		return err
	}
	b.state = dir
	return nil
}

func (b *dockerBackend) docker(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, dockerCLIWait)
	defer cancel()
	cmd := b.dopts.command(ctx, b.cli, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("docker %s: %s", args[0], firstLine(stderr.Bytes(), err))
	}
	return out, nil
}

// Close removes every container the backend made. The backend can still
// be used afterwards: a Run makes a new container.
func (b *dockerBackend) Close() error {
	b.mu.Lock()
	boxes := b.boxes
	b.boxes, b.byMounts = map[string]*dockerJob{}, nil
	state := b.state
	b.state = ""
	b.mu.Unlock()
	var errs []error
	ctx := context.Background()
	for _, c := range boxes {
		c.mu.Lock()
		if _, err := b.docker(ctx, "rm", "--force", "--volumes", c.name); err != nil && !strings.Contains(err.Error(), dockerNotFound) {
			errs = append(errs, err)
		}
		c.dead.Store(true)
		c.mu.Unlock()
	}
	if state != "" {
		if err := os.RemoveAll(state); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// owner is this process's label value: its pid and start time (a reused
// pid has another start time).
func owner(pid int) string {
	return hostID() + "/" + strconv.Itoa(pid) + "/" + procStart(pid)
}

// hostID names this machine in owner labels: a container made by a
// conductor on another host sharing the engine is never taken for an
// orphan here. /etc/machine-id (it survives a reboot: a crashed host's
// containers are reaped after it, their owners' start times no longer
// match), else the host name.
func hostID() string {
	if b, err := os.ReadFile("/etc/machine-id"); err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			return s
		}
	}
	h, _ := os.Hostname()
	return h
}

func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19] // starttime, field 22 of stat
}

// ErrNoDocker: no docker CLI here, so no sandbox container to reap.
var ErrNoDocker = errors.New("no docker CLI")

// ReapOrphanContainers is ReapDockerOrphans where docker may not be
// installed (ErrNoDocker when its CLI is not found), bounded to 30 s. An
// engine that does not answer is an error.
func ReapOrphanContainers(ctx context.Context, o Options) ([]string, error) {
	if _, err := exec.LookPath(cmp.Or(o.Docker.CLI, "docker")); err != nil {
		return nil, ErrNoDocker
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return ReapDockerOrphans(ctx, o)
}

// ReapDockerOrphans removes the containers of conductor processes that are
// gone (killed with kill -9, a crashed host): those whose owner label names
// a process that no longer runs. It returns their names. New does it for
// the docker backend on every start.
func ReapDockerOrphans(ctx context.Context, o Options) ([]string, error) {
	d := o.Docker.withDefaults(o.withDefaults())
	cli, _, err := d.engine(ctx)
	if err != nil {
		return nil, err
	}
	b := &dockerBackend{opts: o, dopts: d, cli: cli}
	return b.reapOrphans(ctx)
}

// reapOrphans removes the sandbox containers whose owner is gone and
// returns their names.
func (b *dockerBackend) reapOrphans(ctx context.Context) ([]string, error) {
	out, err := b.docker(ctx, "ps", "--all", "--filter", "label="+dockerLabel+"=1",
		"--format", "{{.Names}}\t{{.Label \""+dockerLabelOwner+"\"}}")
	if err != nil {
		return nil, err
	}
	var gone []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, own, ok := strings.Cut(line, "\t")
		if !ok || name == "" {
			continue
		}
		host, rest, _ := strings.Cut(own, "/")
		if host != hostID() {
			continue // another machine's
		}
		pidS, _, _ := strings.Cut(rest, "/")
		pid, err := strconv.Atoi(pidS)
		if err == nil && pid > 0 && owner(pid) == own {
			continue // its conductor still runs
		}
		gone = append(gone, name)
	}
	if len(gone) > 0 {
		if _, err := b.docker(ctx, append([]string{"rm", "--force", "--volumes"}, gone...)...); err != nil && !strings.Contains(err.Error(), dockerNotFound) {
			return gone, err
		}
	}
	return gone, nil
}

// reapStateFolders removes the host folders (the .git masks) of docker
// backends whose conductor process is gone (killed before Close).
func reapStateFolders() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "conductor-docker-*-*"))
	for _, d := range dirs {
		pidS, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), "conductor-docker-"), "-")
		pid, err := strconv.Atoi(pidS)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

// scratchImage is the root filesystem of the default image: empty folders
// for the mount points, the host's top-level symlinks (/bin → usr/bin) as
// they are, and /sbin a real folder (docker binds its init there).
func (b *dockerBackend) scratchImage() []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{"etc": true, "tmp": true, "proc": true, "dev": true, "sys": true, "sbin": true}
	var links [][2]string
	for _, e := range b.layout.sys {
		name := strings.TrimPrefix(e.path, "/")
		if e.link != "" && e.path != dockerInitPath {
			links = append(links, [2]string{name, e.link})
		} else {
			dirs[name] = true
		}
	}
	names := make([]string, 0, len(dirs))
	for n := range dirs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		mode := int64(0o755)
		if n == "tmp" {
			mode = 0o1777
		}
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: n + "/", Mode: mode, ModTime: epoch})
	}
	for _, l := range links {
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: l[0], Linkname: l[1], Mode: 0o777, ModTime: epoch})
	}
	_ = tw.Close()
	return buf.Bytes()
}

// ensureImage returns the image containers start from: the operator's, or
// the scratch image, imported on first use (no registry is ever needed).
func (b *dockerBackend) ensureImage(ctx context.Context) (string, error) {
	if b.dopts.Image != "" {
		if _, err := b.docker(ctx, "image", "inspect", "--format", "{{.Id}}", b.dopts.Image); err != nil {
			return "", fmt.Errorf("image %s: %v", b.dopts.Image, err)
		}
		return b.dopts.Image, nil
	}
	tarball := b.scratchImage()
	sum := sha256.Sum256(tarball)
	name := dockerImageRepo + ":" + hex.EncodeToString(sum[:6])
	if _, err := b.docker(ctx, "image", "inspect", "--format", "{{.Id}}", name); err == nil {
		return name, nil
	}
	cctx, cancel := context.WithTimeout(ctx, dockerCLIWait)
	defer cancel()
	cmd := b.dopts.command(cctx, b.cli, "import", "--message", "conductor sandbox scratch image", "-", name)
	cmd.Stdin = bytes.NewReader(tarball)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("docker import %s: %s", name, firstLine(out, err))
	}
	return name, nil
}

// dockerMounts is what a container is made with for a plan: everything
// that cannot change after creation.
type dockerMounts struct {
	args  []string
	fresh []string // HOME-like folders given a tmpfs
	srcs  []string // the host folders and files bound
}

// key names the container these mounts make: mounts hashes their
// arguments, key those and the identity of each bound source as it is now
// (a source that cannot be read counts as none; docker then says why the
// container does not start).
func (m dockerMounts) key() (mounts, key string) {
	h := sha256.New()
	for _, a := range m.args {
		h.Write([]byte(a))
		h.Write([]byte{0})
	}
	mounts = hex.EncodeToString(h.Sum(nil)[:8])
	for _, src := range m.srcs {
		var st syscall.Stat_t
		if syscall.Stat(src, &st) == nil {
			fmt.Fprintf(h, "%d:%d\x00", st.Dev, st.Ino)
		} else {
			h.Write([]byte("-\x00"))
		}
	}
	return mounts, hex.EncodeToString(h.Sum(nil)[:8])
}

func (b *dockerBackend) mounts(p plan) dockerMounts {
	var m dockerMounts
	bind := func(src, dst string, ro bool) {
		s := "type=bind,src=" + src + ",dst=" + dst
		if ro {
			s += ",readonly"
		}
		m.args = append(m.args, "--mount", s)
		m.srcs = append(m.srcs, src)
	}
	var ro []string
	if b.dopts.Image == "" {
		for _, e := range b.layout.sys {
			if e.link == "" {
				bind(e.path, e.path, true)
				ro = append(ro, e.path)
			}
		}
		for _, e := range b.layout.etc {
			bind(e, e, true)
			ro = append(ro, e)
		}
	}
	m.args = append(m.args, "--tmpfs", fmt.Sprintf("/tmp:rw,nosuid,nodev,size=%d,mode=%s", b.opts.TmpSize, "1777"))
	for _, e := range b.opts.ReadOnly {
		bind(e, e, true)
		ro = append(ro, e)
	}
	writable := []string{"/tmp"}
	if p.scratch != "" {
		bind(p.scratch, p.scratch, false)
		writable = append(writable, p.scratch)
	}
	for _, mt := range p.mounts {
		bind(mt.Path, mt.Path, !mt.Writable)
		if mt.Writable {
			writable = append(writable, mt.Path)
		} else {
			ro = append(ro, mt.Path)
		}
	}
	for _, w := range p.warm {
		bind(w[0], w[1], false)
	}
	bind(p.dir, p.inside, false)
	writable = append(writable, p.inside)
	git := filepath.Join(p.inside, ".git")
	switch p.gitMask {
	case "file", "absent":
		// An empty, read-only regular file (not /dev/null: a device
		// node on a read-only mount still takes writes).
		bind(filepath.Join(b.state, "git-mask"), git, true)
	case "dir":
		// An empty folder no one but root may enter, read-only (not a
		// tmpfs: runc gives a tmpfs the mode of the folder it covers).
		bind(filepath.Join(b.state, "git-mask-dir"), git, true)
	}
	// The submodule folders: read-only, exactly as bwrap binds them
	// (nothing can be planted there for host git to enter).
	for _, d := range p.readOnly {
		in := d
		if rel, err := filepath.Rel(p.dir, d); err == nil {
			in = filepath.Join(p.inside, rel)
		}
		bind(d, in, true)
	}
	fresh := p.homeLikeDirs()
	for i, v := range fresh {
		if i > 0 && fresh[i-1] == v {
			continue
		}
		if underAny(v, writable) || underAny(v, m.fresh) || underAny(v, ro) || underAny(v, []string{"/proc", "/dev", "/sys"}) {
			continue
		}
		m.args = append(m.args, "--tmpfs", fmt.Sprintf("%s:rw,nosuid,nodev,size=%d,mode=%s", v, b.opts.TmpSize, "1777"))
		m.fresh = append(m.fresh, v)
	}
	return m
}

// box returns the container for a plan, making it on first use. The key is
// every bind and tmpfs of the container, and the device and inode of each
// bound source: the commands of one job (one worktree, one scratch folder)
// share one, and a folder removed and made again at the same path (whose
// old container's mount holds the deleted one) gets a new one.
func (b *dockerBackend) box(ctx context.Context, p plan) (*dockerJob, error) {
	b.mu.Lock()
	if err := b.ensureState(); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	m := b.mounts(p)
	mk, key := m.key()
	// The container of the folders these paths named before (removed and
	// made again since) binds deleted folders: it goes.
	var stale *dockerJob
	if old, ok := b.byMounts[mk]; ok && old != key {
		stale = b.boxes[old]
		delete(b.boxes, old)
	}
	if b.byMounts == nil {
		b.byMounts = map[string]string{}
	}
	b.byMounts[mk] = key
	c := b.boxes[key]
	if c == nil || c.dead.Load() {
		c = &dockerJob{name: dockerPrefix + strconv.Itoa(os.Getpid()) + "-" + b.tag + "-" + key}
		b.boxes[key] = c
	}
	b.mu.Unlock()
	if stale != nil {
		stale.dead.Store(true)
		_, _ = b.docker(context.WithoutCancel(ctx), "rm", "--force", "--volumes", stale.name)
	}
	c.mu.Lock()
	if c.keep != nil && !c.dead.Load() {
		return c, nil
	}
	if err := b.start(ctx, c, p, m); err != nil {
		c.dead.Store(true)
		_, _ = b.docker(context.WithoutCancel(ctx), "rm", "--force", c.name)
		c.mu.Unlock()
		return nil, err
	}
	return c, nil
}

// start makes and starts c's container (its mutex held).
func (b *dockerBackend) start(ctx context.Context, c *dockerJob, p plan, m dockerMounts) error {
	_, _ = b.docker(ctx, "rm", "--force", c.name) // a stale one of the same name
	o, d := b.opts, b.dopts
	args := []string{"run", "--detach", "--name", c.name,
		"--label", dockerLabel + "=1",
		"--label", dockerLabelOwner + "=" + owner(os.Getpid()),
		"--label", dockerLabelDir + "=" + p.dir,
		"--init", "--network", "none", "--ipc", "private", "--hostname", "sandbox",
		"--user", strconv.Itoa(b.id.uid) + ":" + strconv.Itoa(b.id.gid), "--group-add", strconv.Itoa(b.id.gid),
		"--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only",
		"--memory", strconv.FormatInt(d.MemoryBytes, 10), "--memory-swap", strconv.FormatInt(d.MemoryBytes, 10),
		"--cpus", strconv.FormatFloat(d.CPUs, 'f', -1, 64), "--pids-limit", strconv.FormatInt(d.PidsLimit, 10),
		"--ulimit", "fsize=" + lim(o.MaxFileSize), "--ulimit", "nofile=" + lim(o.MaxOpenFiles), "--ulimit", "core=0:0",
		"--log-driver", "none", "--workdir", p.inside, "--entrypoint", "",
	}
	if d.RunID != "" {
		args = append(args, "--label", dockerLabelRun+"="+d.RunID)
	}
	args = append(args, m.args...)
	args = append(args, b.image, "sleep", "infinity")
	if _, err := b.docker(ctx, args...); err != nil {
		_, _ = b.docker(context.WithoutCancel(ctx), "rm", "--force", c.name)
		return fmt.Errorf("start the job's container: %v", err)
	}
	out, err := b.docker(ctx, "inspect", "--format", "{{.State.Pid}} {{.State.ExitCode}} {{.State.Error}}", c.name)
	if err != nil {
		return err
	}
	f := strings.Fields(string(out))
	pid, _ := strconv.Atoi(firstField(f))
	if pid <= 0 {
		why := strings.TrimSpace(string(out))
		if len(f) > 1 && f[1] == "127" {
			why = "its keeper `sleep` was not found in the image (exit 127): the image lacks the toolchain (`sleep`, `/usr/bin/env` and the role's commands)"
		}
		return fmt.Errorf("container %s exited at once: %s", c.name, why)
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return fmt.Errorf("container %s: the docker backend needs the engine on this host, in this pid namespace, to stop a command's processes: %v", c.name, err)
	}
	c.pidNS = ns
	// Its init and the keeper: wait for the keeper to be there.
	deadline := time.Now().Add(10 * time.Second)
	for {
		procs := nsProcesses(ns)
		if len(procs) >= 2 {
			c.keep = map[int]bool{}
			for _, p := range procs {
				c.keep[p] = true
			}
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("container %s: its keeper process did not start", c.name)
		}
		time.Sleep(dockerPoll)
	}
	c.memFile, c.pidFile = cgroupCounters(pid)
	if f, ok := cgroupFreezer(pid); ok {
		c.freezer = &f
	}
	c.mem = d.MemoryBytes
	return nil
}

func pathExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func firstField(f []string) string {
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// nsProcesses lists the host pids of the processes in the pid namespace ns.
func nsProcesses(ns string) []int {
	var pids []int
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == ns {
			if inNamespaceAlive(pid, ns) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// killRest kills every process of c but its init and keeper, and reports
// whether they were all gone within grace.
func (c *dockerJob) killRest(grace time.Duration) bool {
	deadline := time.Now().Add(grace)
	if f := c.freezer; f != nil {
		// Frozen, nothing forks: one pass reaches every process.
		if f.freeze() {
			for _, pid := range f.procs() {
				if !c.keep[pid] {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		f.thaw()
	}
	for {
		rest := 0
		for _, pid := range nsProcesses(c.pidNS) {
			if !c.keep[pid] {
				rest++
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if rest == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(dockerPoll)
	}
}

// waitReaped waits, up to grace, until the killed processes are reaped too
// (a zombie still counts against the pids limit, and the next docker exec
// needs room to start), where the cgroup's process count can be read.
func (c *dockerJob) waitReaped(grace time.Duration) {
	deadline := time.Now().Add(grace)
	for c.pidsCurrent() > int64(len(c.keep)) && time.Now().Before(deadline) {
		time.Sleep(dockerPoll)
	}
}

// pidsCurrent is the container's process count (zombies included), 0 when
// it cannot be read.
func (c *dockerJob) pidsCurrent() int64 {
	if c.pidFile == "" {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(c.pidFile), "pids.current"))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// keeperAlive reports whether c's init and keeper still run.
func (c *dockerJob) keeperAlive() bool {
	for pid := range c.keep {
		if !inNamespaceAlive(pid, c.pidNS) {
			return false
		}
	}
	return true
}

// cgroupCounters finds the host files counting the OOM kills and the
// refused forks of the cgroup process pid is in (cgroup v2 or v1).
func cgroupCounters(pid int) (mem, pids string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", ""
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrl, path := parts[1], parts[2]
		switch {
		case ctrl == "":
			if f := filepath.Join("/sys/fs/cgroup", path, "memory.events"); pathExists(f) && mem == "" {
				mem = f
			}
			if f := filepath.Join("/sys/fs/cgroup", path, "pids.events"); pathExists(f) && pids == "" {
				pids = f
			}
		case ctrl == "memory":
			if f := filepath.Join("/sys/fs/cgroup/memory", path, "memory.oom_control"); pathExists(f) {
				mem = f
			}
		case ctrl == "pids":
			if f := filepath.Join("/sys/fs/cgroup/pids", path, "pids.events"); pathExists(f) {
				pids = f
			}
		}
	}
	return mem, pids
}

// counter reads "KEY N" from a cgroup file (0 when absent).
func counter(file, key string) int64 {
	if file == "" {
		return 0
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// Run runs spec in its job's container.
func (b *dockerBackend) Run(ctx context.Context, spec Spec) (Result, error) {
	p, err := makePlan(spec)
	if err != nil {
		return Result{ExitCode: -1}, fmt.Errorf("sandbox: %w", err)
	}
	if err := b.checkSocket(p); err != nil {
		return Result{ExitCode: -1}, fmt.Errorf("sandbox docker: %w", err)
	}
	if spec.WarmGoCache {
		if l := b.warm.layer(p.scratch, p.writableDirs(), p.env, cmpWarn(spec.Warn, b.opts.Warn)); l != nil {
			defer l.cleanup()
			p.addWarm(l)
		}
	}
	if b.id.drop {
		for _, d := range []string{p.dir, p.scratch} {
			if d == "" {
				continue
			}
			if err := handOver(d, b.id); err != nil {
				return Result{ExitCode: -1}, fmt.Errorf("sandbox: %w", err)
			}
		}
		for _, m := range p.mounts {
			if m.Writable {
				if err := handOver(m.Path, b.id); err != nil {
					return Result{ExitCode: -1}, fmt.Errorf("sandbox: %w", err)
				}
			}
		}
	}
	for attempt := 0; ; attempt++ {
		c, err := b.box(ctx, p)
		if err != nil {
			return Result{ExitCode: -1}, fmt.Errorf("sandbox docker: %w", err)
		}
		if c.keeperAlive() {
			res, err := b.exec(ctx, c, p, spec) // unlocks c
			if err == nil && attempt == 0 && res.Outcome == OutcomeExited && res.ExitCode != 0 &&
				bytes.HasPrefix(res.Output, []byte("Error response from daemon:")) && c.dead.Load() {
				// The container stopped before the command could start
				// in it (its keeper was dying): run it in a new one.
				_, _ = b.docker(context.WithoutCancel(ctx), "rm", "--force", c.name)
				continue
			}
			return res, err
		}
		// An earlier command killed the keeper (it runs as the same uid),
		// so the container stopped: the job gets a new one, with an empty
		// /tmp.
		c.dead.Store(true)
		_, _ = b.docker(context.WithoutCancel(ctx), "rm", "--force", c.name)
		c.mu.Unlock()
		if attempt > 0 {
			return Result{ExitCode: -1}, fmt.Errorf("sandbox docker: the job's container %s stopped at once", c.name)
		}
	}
}

// exec runs spec in c (locked by the caller; exec unlocks it).
func (b *dockerBackend) exec(ctx context.Context, c *dockerJob, p plan, spec Spec) (Result, error) {
	defer c.mu.Unlock()
	o := b.opts
	// Nothing of an earlier command runs (a straggler started after its kill).
	c.killRest(o.KillGrace)
	// A role's limit (Spec.MemoryLimit) may lower the container's memory
	// for this command, never raise it: commands of a job run one at a
	// time, so the container's memory is the command's.
	if want := b.memoryFor(spec); want != c.mem {
		if _, err := b.docker(ctx, "update", "--memory", strconv.FormatInt(want, 10), "--memory-swap", strconv.FormatInt(want, 10), c.name); err != nil {
			return Result{ExitCode: -1}, fmt.Errorf("sandbox docker: set the memory limit to %s: %w", bytesize(want), err)
		}
		c.mem = want
	}
	oom0, pids0 := counter(c.memFile, "oom_kill"), counter(c.pidFile, "max")

	args := []string{"exec"}
	if b.dopts.Host != "" {
		args = append([]string{"--host", b.dopts.Host}, args...)
	}
	if spec.Stdin != nil {
		args = append(args, "--interactive")
	}
	args = append(args, "--user", strconv.Itoa(b.id.uid)+":"+strconv.Itoa(b.id.gid), "--workdir", p.inside)
	for _, kv := range p.env {
		args = append(args, "--env", kv[0]+"="+kv[1])
	}
	args = append(args, c.name, dockerEnvBinary)
	// docker exec adds PATH, HOSTNAME and HOME (and the image's variables);
	// env(1) takes away those the command was not given.
	for _, n := range []string{"PATH", "HOSTNAME", "HOME", "TERM", "container"} {
		if !p.hasEnv(n) {
			args = append(args, "-u", n)
		}
	}
	args = append(args, "--")
	args = append(args, p.argv...)
	cmd := &exec.Cmd{
		Path:        b.cli,
		Args:        append([]string{"docker"}, args...),
		Env:         dockerCLIEnv(),
		Dir:         "/",
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	r := runner{opts: o}
	r.afterStart = func() (func(), func(time.Duration) bool) {
		kill := func() { c.killRest(0) }
		gone := func(grace time.Duration) bool {
			ok := c.killRest(grace)
			c.waitReaped(grace)
			return ok
		}
		return kill, gone
	}
	res, err := r.execute(ctx, cmd, spec)
	if err != nil {
		return res, err
	}
	if !c.keeperAlive() {
		c.dead.Store(true)
	}
	if res.Outcome == OutcomeExited && (res.ExitCode == 125 || res.ExitCode == 126) && c.dead.Load() {
		return res, fmt.Errorf("sandbox docker: %s", strings.TrimSpace(string(res.Output)))
	}
	if res.Outcome == OutcomeExited && res.ExitCode >= 128+1 && res.ExitCode <= 128+64 {
		// docker exec reports a command killed by a signal as 128+N.
		sig := syscall.Signal(res.ExitCode - 128)
		res.Outcome, res.Signal, res.ExitCode = OutcomeSignaled, sig.String(), -1
	}
	switch {
	case counter(c.memFile, "oom_kill") > oom0 && res.Outcome != OutcomeCancelled:
		res.Outcome, res.MemoryExceeded = OutcomeMemoryExceeded, true
	case counter(c.pidFile, "max") > pids0 && res.ExitCode != 0 && res.Outcome != OutcomeCancelled:
		res.Outcome = OutcomePidsExceeded
	}
	return res, nil
}

// memoryFor is a command's memory limit: the container's
// (DockerOptions.MemoryBytes), lowered by Spec.MemoryLimit.
func (b *dockerBackend) memoryFor(spec Spec) int64 {
	m := b.dopts.MemoryBytes
	if spec.MemoryLimit > 0 {
		m = max(min(spec.MemoryLimit, m), MinMemory)
	}
	return m
}

// checkSocket refuses a plan that would bind the engine's socket (or a
// folder holding it) into the container: whoever reaches it is root on the
// host.
func (b *dockerBackend) checkSocket(p plan) error {
	socks := []string{"/var/run/docker.sock", "/run/docker.sock"}
	if s, ok := strings.CutPrefix(b.dopts.Host, "unix://"); ok {
		socks = append(socks, s)
	}
	binds := []string{p.dir, p.scratch}
	for _, m := range p.mounts {
		binds = append(binds, m.Path)
	}
	binds = append(binds, b.opts.ReadOnly...)
	for _, s := range socks {
		if real, err := filepath.EvalSymlinks(s); err == nil {
			s = real
		}
		for _, d := range binds {
			if d != "" && within(s, d) {
				return fmt.Errorf("refusing to bind %s into the container: it holds the Docker engine's socket %s", d, s)
			}
		}
	}
	return nil
}

// dockerInfo is what `docker info` says about the engine's isolation.
type dockerInfo struct {
	ServerVersion   string
	SecurityOptions []string
	MemoryLimit     bool
	SwapLimit       bool
	PidsLimit       bool
	CPUCfsQuota     bool
	CgroupVersion   string
	CgroupDriver    string
}

func (b *dockerBackend) info(ctx context.Context) (dockerInfo, error) {
	var i dockerInfo
	out, err := b.docker(ctx, "info", "--format", "{{json .}}")
	if err != nil {
		return i, err
	}
	if err := json.Unmarshal(out, &i); err != nil {
		return i, fmt.Errorf("docker info: %v", err)
	}
	return i, nil
}

func (i dockerInfo) has(opt string) bool {
	for _, s := range i.SecurityOptions {
		if s == "name="+opt || strings.HasPrefix(s, "name="+opt+",") {
			return true
		}
	}
	return false
}

var _ io.Closer = (*dockerBackend)(nil)

// probeDocker checks the docker backend by really running a command in a
// job's container: the engine, its isolation options, and that the limits
// were applied.
func probeDocker(ctx context.Context, o Options) BackendReport {
	rep := BackendReport{Name: BackendDocker}
	add := func(name string, ok bool, format string, args ...any) {
		rep.Checks = append(rep.Checks, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	fail := func(detail string) BackendReport { rep.Detail = detail; return rep }
	d := o.Docker.withDefaults(o)
	cli, version, err := d.engine(ctx)
	if cli == "" {
		add("docker CLI installed", false, "%v", err)
		return fail("the docker CLI is not installed")
	}
	add("docker CLI installed", true, "%s", cli)
	if err != nil {
		add("docker engine reachable", false, "%v", err)
		return fail("no Docker engine reachable at " + d.where())
	}
	add("docker engine reachable", true, "engine %s at %s", version, d.where())
	b := &dockerBackend{opts: o, dopts: d, cli: cli}
	info, err := b.info(ctx)
	if err != nil {
		add("engine options", false, "%v", err)
		return fail("docker info failed")
	}
	if info.has("rootless") {
		add("rootless", true, "the engine runs rootless (its root is the user that started it)")
	} else {
		add("rootless", true, "no: the engine runs as root; a worker must never get its socket (docs/security.md)")
	}
	if !info.has("seccomp") {
		add("seccomp profile", false, "the engine applies no seccomp profile (%s)", strings.Join(info.SecurityOptions, ", "))
		return fail("no seccomp profile")
	}
	add("seccomp profile", true, "Docker's default profile (%s)", strings.Join(info.SecurityOptions, ", "))
	if !info.MemoryLimit || !info.PidsLimit || !info.CPUCfsQuota {
		add("limits supported", false, "memory %v, pids %v, CPU quota %v (cgroup v%s, %s)", info.MemoryLimit, info.PidsLimit, info.CPUCfsQuota, info.CgroupVersion, info.CgroupDriver)
		return fail("the engine cannot apply the memory, CPU and process limits")
	}
	add("limits supported", true, "memory, pids and CPU quota (cgroup v%s, %s)", info.CgroupVersion, info.CgroupDriver)
	sb, err := newDocker(o)
	if err != nil {
		add("runs a command", false, "%v", err)
		return fail(err.Error())
	}
	defer sb.Close()
	dir, err := os.MkdirTemp("", "conductor-sandbox-probe-")
	if err != nil {
		add("runs a command", false, "%v", err)
		return fail(err.Error())
	}
	defer os.RemoveAll(dir)
	res, err := sb.Run(ctx, Spec{Dir: dir, Argv: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}, Timeout: time.Minute})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("`true` exited %d (%s): %s", res.ExitCode, res.Outcome, strings.TrimSpace(string(res.Output)))
	}
	if err != nil {
		add("runs a command", false, "%v", err)
		return fail("a command does not run in a container")
	}
	add("runs a command", true, "image %s, as uid %d", sb.image, sb.id.uid)
	var box *dockerJob
	for _, c := range sb.boxes {
		box = c
	}
	var hc struct {
		NetworkMode    string
		ReadonlyRootfs bool
		CapDrop        []string
		SecurityOpt    []string
		Memory         int64
		NanoCpus       int64
		PidsLimit      *int64
	}
	out, err := sb.docker(ctx, "inspect", "--format", "{{json .HostConfig}}", box.name)
	if err == nil {
		err = json.Unmarshal(out, &hc)
	}
	switch {
	case err != nil:
		add("limits work", false, "inspect the container: %v", err)
		return fail("the container's settings are unverified")
	case hc.NetworkMode != "none" || !hc.ReadonlyRootfs || len(hc.CapDrop) == 0:
		add("isolation", false, "network %q, read-only root %v, capabilities dropped %v", hc.NetworkMode, hc.ReadonlyRootfs, hc.CapDrop)
		return fail("the container is not isolated as asked")
	case hc.Memory != d.MemoryBytes || hc.PidsLimit == nil || *hc.PidsLimit != d.PidsLimit || hc.NanoCpus != int64(d.CPUs*1e9):
		add("limits work", false, "memory %d, pids %v, CPUs %d/1e9: not what was asked", hc.Memory, hc.PidsLimit, hc.NanoCpus)
		return fail("the limits were not applied")
	}
	add("isolation", true, "no network, read-only root, capabilities dropped (%s), %s", strings.Join(hc.CapDrop, ","), strings.Join(hc.SecurityOpt, ","))
	counters := "OOM kills and refused forks read from the container's cgroup"
	if box.memFile == "" || box.pidFile == "" {
		counters = "the container's cgroup counters were not found: a command at a limit is reported by its exit, without memory-exceeded or pids-exceeded"
	}
	add("limits work", true, "memory %s, CPUs %g, processes %d, file size %s, open files %d, /tmp %s; %s",
		bytesize(d.MemoryBytes), d.CPUs, d.PidsLimit, bytesize(int64(o.MaxFileSize)), o.MaxOpenFiles, bytesize(o.TmpSize), counters)
	rep.Works = true
	rep.Detail = "works: one container per job, unprivileged, no network, read-only root, worktree the only writable path, .git hidden, memory/CPU/pids limits"
	return rep
}

// DockerImage makes (or finds) the image the docker backend's containers
// start from — the operator's CONDUCTOR_DOCKER_IMAGE, or the scratch image
// imported from the host's folders, no registry needed — and returns its
// name. `conductor sandbox image build` runs it ahead of the first job.
func DockerImage(o Options) (string, error) {
	b, err := newDocker(o)
	if err != nil {
		return "", err
	}
	defer b.Close()
	return b.image, nil
}
