package conductor

import (
	"os"
	"path/filepath"
	"time"
)

// Config is every knob of the conductor, resolved once (Resolve): flags win
// over the environment, the environment over the config file, the file over
// defaults. Domain packages receive it (or the values they need from it)
// and never read the environment for a knob themselves.
//
// A Config built by hand (tests, library callers) gets the defaults of
// what it leaves zero from WithDefaults; Resolve applies them itself.
type Config struct {
	// DataRoot holds runs/, worktrees/, workspaces/ and the embedded store
	// (--data-root, CONDUCTOR_HOME).
	DataRoot string
	// ConfigFile is the JSON configuration file (--config,
	// CONDUCTOR_CONFIG); "" when none was named and DataRoot/config.json
	// does not exist.
	ConfigFile string
	// DatabaseURL selects PostgreSQL for the bus store; empty means
	// embedded (--database-url, DATABASE_URL, store.databaseURL).
	DatabaseURL string
	// RedisURL selects Redis for the job queue; empty means the embedded
	// store's queue (--redis-url, REDIS_URL, queue.redisURL).
	RedisURL string
	// RoleIDs map a seed job's roleId to a role contract beyond the
	// built-in "role-<name>" → <name> (CONDUCTOR_ROLE_IDS, queue.roleIds:
	// "role-coder=implementer,role-scribe=doc-writer").
	RoleIDs map[string]string
	// PiDir is the npm prefix the pi agent is installed in, for tasks with
	// runtime pi (CONDUCTOR_PI_DIR, worker.piDir; default DataRoot/pi).
	PiDir string

	// WorktreeBase is where worker worktrees (the warm pools) live
	// (--worktree-base, WORKER_WORKTREE_BASE, worker.worktreeBase;
	// default DataRoot/worktrees).
	WorktreeBase string
	// RepoRoot holds workspaces' repositories as RepoRoot/<workspace>
	// (WORKER_REPO_ROOT, worker.repoRoot); "" looks only in the
	// conductor's clones.
	RepoRoot string
	// PoolSize is the number of free worktrees kept per repository (0
	// turns the pool off); nil: DefaultPoolSize. PoolMaxBytes bounds their
	// disk (0: unbounded).
	PoolSize     *int
	PoolMaxBytes int64

	// MaxToolSteps is the operator's default step limit of a run (a
	// task's maxSteps replaces it; the role's maxSteps caps both); 0:
	// DefaultMaxToolSteps.
	MaxToolSteps int
	// TokenBudget is the operator's default token budget of a run (0:
	// unlimited; a task's tokenBudget replaces it, the role's caps both).
	TokenBudget int64
	// CheckpointEvery is the checkpoint cadence in steps (0: never); nil:
	// DefaultCheckpointEvery.
	CheckpointEvery *int

	// Sandbox is the backend worker commands, review checks and gates use
	// (--sandbox, WORKER_SANDBOX, sandbox.backend); "": the role's for a
	// worker, auto for checks and gates. GateSandbox overrides it for
	// landing gates (land --sandbox, CONDUCTOR_GATE_SANDBOX).
	Sandbox     string
	GateSandbox string
	// SandboxLimits tune the sandbox backends (CONDUCTOR_SANDBOX_*,
	// CONDUCTOR_DOCKER_*, DOCKER_HOST, the file's sandbox section).
	SandboxLimits SandboxLimits

	// CommitterName and CommitterEmail are the identity of landing commits
	// (GIT_COMMITTER_NAME, GIT_COMMITTER_EMAIL, land.committerName,
	// land.committerEmail); empty: the repository's git identity.
	CommitterName  string
	CommitterEmail string

	// Model is the default model alias (CONDUCTOR_MODEL, models.default);
	// "": the registry's built-in default.
	Model string
	// ForgeTimeout bounds every forge request and push, a Go duration
	// (--forge-timeout, CONDUCTOR_FORGE_TIMEOUT, forge.timeout); "": the
	// forge's default.
	ForgeTimeout string
	// ModelSlotTTL is a model slot's lease (CONDUCTOR_MODEL_SLOT_TTL,
	// models.slotTTL); 0: the queue's default.
	ModelSlotTTL time.Duration

	// knobs is what Resolve recorded: each knob's value and source.
	knobs []Knob
}

// SandboxLimits are the operator's sandbox settings, validated; a zero
// field means the backend's default.
type SandboxLimits struct {
	UID, GID    *int     // the identity commands run as when the conductor is root
	MaxProcs    uint64   // RLIMIT_NPROC
	MaxMemory   uint64   // bytes per command
	Cgroup      string   // a delegated cgroup v2 folder
	ReadOnly    []string // extra read-only host folders
	Bwrap       string   // path of bwrap
	DockerCLI   string   // path of the docker CLI
	DockerHost  string   // the engine (as DOCKER_HOST)
	DockerImage string   // an operator's image
	DockerMem   int64    // bytes of a job container
	DockerCPUs  float64  // CPUs of a job container
	DockerPids  int64    // process limit of a job container
	GoCache     string   // the warm Go cache folder: "" the default (under the user's cache folder), "off", or an absolute folder
}

// Defaults of the knobs whose zero value is a meaningful setting.
const (
	DefaultPoolSize        = 4
	DefaultMaxToolSteps    = 50
	DefaultCheckpointEvery = 5
)

// WithDefaults fills what a hand-built Config leaves unset: the paths
// below DataRoot and the numeric defaults. It reads nothing.
func (c Config) WithDefaults() Config {
	if c.DataRoot != "" {
		if abs, err := filepath.Abs(c.DataRoot); err == nil {
			c.DataRoot = abs
		}
	}
	if c.PiDir == "" {
		c.PiDir = filepath.Join(c.DataRoot, "pi")
	}
	if c.WorktreeBase == "" {
		c.WorktreeBase = c.WorktreesDir()
	}
	if c.PoolSize == nil {
		n := DefaultPoolSize
		c.PoolSize = &n
	}
	if c.MaxToolSteps == 0 {
		c.MaxToolSteps = DefaultMaxToolSteps
	}
	if c.CheckpointEvery == nil {
		n := DefaultCheckpointEvery
		c.CheckpointEvery = &n
	}
	return c
}

// Pool is the pool size with its default.
func (c Config) Pool() int {
	if c.PoolSize == nil {
		return DefaultPoolSize
	}
	return *c.PoolSize
}

// Checkpoints is the checkpoint cadence with its default.
func (c Config) Checkpoints() int {
	if c.CheckpointEvery == nil {
		return DefaultCheckpointEvery
	}
	return *c.CheckpointEvery
}

// Knobs lists every knob Resolve filled, with its value and source, in a
// fixed order (nil for a hand-built Config).
func (c Config) Knobs() []Knob { return c.knobs }

// DefaultDataRoot is $CONDUCTOR_HOME, else $XDG_DATA_HOME/conductor, else
// /var/lib/conductor for root (the sandbox's unprivileged uid must reach the
// worktrees and scratch folders, and /root is private), else
// ~/.local/share/conductor.
func DefaultDataRoot(getenv func(string) string) string {
	if v := getenv(EnvHome); v != "" {
		return v
	}
	return defaultDataRoot(getenv)
}

func defaultDataRoot(getenv func(string) string) string {
	if v := getenv("XDG_DATA_HOME"); v != "" {
		return filepath.Join(v, "conductor")
	}
	if os.Geteuid() == 0 {
		return "/var/lib/conductor"
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".local", "share", "conductor")
	}
	return filepath.Join(os.TempDir(), "conductor")
}

// RunsDir is where run records live: one folder per run id.
func (c Config) RunsDir() string { return filepath.Join(c.DataRoot, "runs") }

// RunDir is the folder of one run.
func (c Config) RunDir(runID string) string { return filepath.Join(c.RunsDir(), runID) }

// WorktreesDir is the default worktree base.
func (c Config) WorktreesDir() string { return filepath.Join(c.DataRoot, "worktrees") }

// WorkspacesDir holds the conductor's clone per workspace.
func (c Config) WorkspacesDir() string { return filepath.Join(c.DataRoot, "workspaces") }

// ScratchDir holds throw-away folders: review's exports, a run's scratch
// folder, and (in GitScratchDir) the git dirs of diffs and applies.
func (c Config) ScratchDir() string { return filepath.Join(c.DataRoot, "scratch") }

// GitScratchDir holds the throw-away git dirs conductor makes for a diff,
// apply or extraction (patch.Git.Scratch); stale ones (a killed process's)
// are removed at the next start (patch.CleanScratch).
func (c Config) GitScratchDir() string { return GitScratchDir(c.DataRoot) }

// GitScratchDir is Config.GitScratchDir for a data root.
func GitScratchDir(dataRoot string) string { return filepath.Join(dataRoot, "scratch", "git") }
