package conductor

import (
	"os"
	"path/filepath"
)

// Config is the configuration shared by every command. Flags win over the
// environment, the environment over the config file, the file over defaults;
// the CLI fills the flag and environment values before calling WithDefaults.
type Config struct {
	// DataRoot holds runs/, worktrees/, workspaces/ and the embedded store.
	DataRoot string
	// DatabaseURL selects PostgreSQL for the bus store; empty means embedded.
	DatabaseURL string
	// ConfigFile is the optional JSON configuration file (model registry,
	// forge settings). Empty means DataRoot/config.json if it exists.
	ConfigFile string
	// PiDir is the npm prefix the pi agent is installed in, for tasks with
	// runtime pi: $CONDUCTOR_PI_DIR, else DataRoot/pi (make pi installs it).
	PiDir string
}

// WithDefaults fills what is unset.
func (c Config) WithDefaults(getenv func(string) string) Config {
	if c.DataRoot == "" {
		c.DataRoot = DefaultDataRoot(getenv)
	}
	if abs, err := filepath.Abs(c.DataRoot); err == nil {
		c.DataRoot = abs
	}
	if c.PiDir == "" {
		c.PiDir = getenv("CONDUCTOR_PI_DIR")
	}
	if c.PiDir == "" {
		c.PiDir = filepath.Join(c.DataRoot, "pi")
	}
	if c.ConfigFile == "" {
		p := filepath.Join(c.DataRoot, "config.json")
		if _, err := os.Stat(p); err == nil {
			c.ConfigFile = p
		}
	}
	return c
}

// DefaultDataRoot is $CONDUCTOR_HOME, else $XDG_DATA_HOME/conductor, else
// /var/lib/conductor for root (the sandbox's unprivileged uid must reach the
// worktrees and scratch folders, and /root is private), else
// ~/.local/share/conductor.
func DefaultDataRoot(getenv func(string) string) string {
	if v := getenv("CONDUCTOR_HOME"); v != "" {
		return v
	}
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

// WorktreesDir is the default WORKER_WORKTREE_BASE.
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
