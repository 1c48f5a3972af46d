package sandbox

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/conductor-dev/conductor/conductor"
)

// Defaults for Options. They are generous enough for `go test ./...` on a
// mid-sized module and small enough that a fork bomb, an endless writer or a
// file filling the disk stops long before the host suffers.
const (
	// DefaultUID and DefaultGID are the unprivileged identity the bwrap
	// backend takes when the conductor runs as root ("nobody"). Operators
	// should give workers a dedicated system user instead (see
	// docs/security.md) and set CONDUCTOR_SANDBOX_UID.
	DefaultUID = 65534
	DefaultGID = 65534

	DefaultMaxProcs        = 1024      // RLIMIT_NPROC (processes and threads of the sandbox uid)
	DefaultMaxFileSize     = 1 << 30   // RLIMIT_FSIZE: largest file a command may write
	DefaultMaxOpenFiles    = 4096      // RLIMIT_NOFILE
	DefaultTmpSize         = 1 << 30   // size of the fresh /tmp (and of tmpfs HOME when no scratch folder)
	DefaultOutputLimit     = 1 << 20   // captured output kept (head+tail)
	DefaultOutputKillLimit = 256 << 20 // total output after which the command is killed
	DefaultKillGrace       = 3 * time.Second
	// DefaultMaxMemory bounds the memory of a command: RLIMIT_DATA of
	// every process of it (heap and other private writable memory; 1 GiB
	// is enough for a cold `go test` of a module), and memory.max of the
	// whole command where a cgroup v2 folder is given (Options.Cgroup).
	DefaultMaxMemory = 1 << 30
)

// Options tune a backend. The zero value of a field means its default.
type Options struct {
	// UID and GID are the identity commands run as when the conductor is
	// root. nil: DefaultUID/DefaultGID. When the conductor is not root the
	// sandbox runs as the conductor's own uid and these must be nil or
	// equal to it.
	UID, GID *int

	MaxProcs     uint64 // RLIMIT_NPROC
	MaxFileSize  uint64 // RLIMIT_FSIZE, bytes
	MaxOpenFiles uint64 // RLIMIT_NOFILE
	TmpSize      int64  // bytes of the fresh /tmp tmpfs

	// MaxMemory is the default for Spec.MemoryLimit, in bytes.
	MaxMemory uint64
	// Cgroup is a cgroup v2 folder the conductor may create children in,
	// with the memory controller in its cgroup.subtree_control and no
	// process of its own (a systemd unit's delegated subtree, say). When
	// set, every command runs in a child cgroup of its own whose
	// memory.max is the command's memory limit (all its processes
	// together, killed as one when it is reached), on top of the
	// per-process RLIMIT_DATA. Empty: RLIMIT_DATA only.
	Cgroup string

	// OutputLimit is the default for Spec.OutputLimit.
	OutputLimit int64
	// OutputKillLimit: once a command has written this many bytes in
	// total it is killed and Result.OutputExceeded is set.
	OutputKillLimit int64
	// KillGrace bounds how long Run waits, after killing a command, for
	// every process of it to be gone and its output pipe to close.
	KillGrace time.Duration

	// ReadOnly lists extra host paths bound read-only at the same path
	// inside the sandbox (a toolchain outside /usr, such as /opt/go). They
	// must be readable by the sandbox uid.
	ReadOnly []string

	// Warn receives the warning the none backend prints on every run.
	// nil: os.Stderr.
	Warn io.Writer

	// BwrapPath and PrlimitPath override the executables looked up in
	// PATH.
	BwrapPath   string
	PrlimitPath string

	// Docker tunes the docker backend (docker.go): engine, image, and the
	// memory, CPU and process limits of a job's container.
	Docker DockerOptions

	// GoCache is the warm Go cache folder (cache.go): commands whose
	// Spec.WarmGoCache is set start from its current generation, with a
	// writable layer of their own. "": no warm cache. GoCacheExplicit:
	// the operator named it (a missing folder is then worth a warning).
	GoCache         string
	GoCacheExplicit bool
}

// Environment variables of the sandbox's knobs. They are read, checked
// and given their sources once, by conductor.Resolve; the sandbox receives
// the values (OptionsFrom).
const (
	EnvUID      = conductor.EnvSandboxUID      // "UID" or "UID:GID"
	EnvMaxProcs = conductor.EnvSandboxMaxProcs // RLIMIT_NPROC
	EnvReadOnly = conductor.EnvSandboxReadOnly // colon-separated extra read-only paths
	EnvBwrap    = conductor.EnvBwrap           // path of the bwrap executable
	EnvMemory   = conductor.EnvSandboxMemory   // bytes (or with K, M, G): Options.MaxMemory
	EnvCgroup   = conductor.EnvSandboxCgroup   // a delegated cgroup v2 folder: Options.Cgroup
	EnvBackend  = conductor.EnvSandbox         // the backend runs use (auto, bwrap, docker, none), as run-task --sandbox reads it
)

// OptionsFrom turns the operator's sandbox settings, resolved and checked
// by conductor.Resolve (Config.SandboxLimits), into Options.
func OptionsFrom(l conductor.SandboxLimits) Options {
	return Options{
		UID: l.UID, GID: l.GID, MaxProcs: l.MaxProcs, MaxMemory: l.MaxMemory, Cgroup: l.Cgroup,
		ReadOnly: l.ReadOnly, BwrapPath: l.Bwrap,
		GoCache: goCacheDir(l.GoCache), GoCacheExplicit: l.GoCache != "",
		Docker: DockerOptions{CLI: l.DockerCLI, Host: l.DockerHost, Image: l.DockerImage,
			MemoryBytes: l.DockerMem, CPUs: l.DockerCPUs, PidsLimit: l.DockerPids},
	}
}

// OptionsFromEnv is OptionsFrom of the sandbox variables alone
// (conductor.ResolveSandbox: no flag, no config file), for tools and tests
// that have no resolved Config; a nil getenv reads nothing.
func OptionsFromEnv(getenv func(string) string) (Options, error) {
	if getenv == nil {
		return Options{}, nil
	}
	l, err := conductor.ResolveSandbox(getenv)
	if err != nil {
		return Options{}, err
	}
	return OptionsFrom(l), nil
}

func (o Options) withDefaults() Options {
	o.MaxProcs = cmp.Or(o.MaxProcs, DefaultMaxProcs)
	o.MaxFileSize = cmp.Or(o.MaxFileSize, DefaultMaxFileSize)
	o.MaxOpenFiles = cmp.Or(o.MaxOpenFiles, DefaultMaxOpenFiles)
	o.TmpSize = cmp.Or(o.TmpSize, DefaultTmpSize)
	o.MaxMemory = cmp.Or(o.MaxMemory, DefaultMaxMemory)
	o.OutputLimit = cmp.Or(o.OutputLimit, DefaultOutputLimit)
	o.OutputKillLimit = cmp.Or(o.OutputKillLimit, DefaultOutputKillLimit)
	o.KillGrace = cmp.Or(o.KillGrace, DefaultKillGrace)
	if o.Warn == nil {
		o.Warn = os.Stderr
	}
	return o
}

// identity is who sandboxed commands run as.
type identity struct {
	uid, gid int
	drop     bool // the conductor is root: switch to uid/gid before bwrap starts
}

// identity resolves the sandbox identity for this process.
func (o Options) identity() (identity, error) {
	euid := os.Geteuid()
	if euid != 0 {
		if (o.UID != nil && *o.UID != euid) || (o.GID != nil && *o.GID != os.Getegid()) {
			return identity{}, fmt.Errorf("sandbox uid %s: only a conductor running as root can run commands as another user; unset %s", fmtIDs(o.UID, o.GID), EnvUID)
		}
		return identity{uid: euid, gid: os.Getegid()}, nil
	}
	id := identity{uid: DefaultUID, gid: DefaultGID, drop: true}
	if o.UID != nil {
		id.uid = *o.UID
	}
	if o.GID != nil {
		id.gid = *o.GID
	}
	if id.uid == 0 || id.gid == 0 {
		return identity{}, fmt.Errorf("sandbox uid %d gid %d: the sandbox never runs as root", id.uid, id.gid)
	}
	return id, nil
}

func fmtIDs(uid, gid *int) string {
	s := func(p *int) string {
		if p == nil {
			return "-"
		}
		return strconv.Itoa(*p)
	}
	return s(uid) + ":" + s(gid)
}
