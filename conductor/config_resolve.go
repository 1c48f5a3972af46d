package conductor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/jsonstrict"
)

// The environment variables of the knobs (the seed system's names stay).
const (
	EnvHome            = "CONDUCTOR_HOME"
	EnvConfig          = "CONDUCTOR_CONFIG"
	EnvWorktreeBase    = "WORKER_WORKTREE_BASE"
	EnvRepoRoot        = "WORKER_REPO_ROOT"
	EnvPoolSize        = "WORKER_POOL_SIZE"
	EnvPoolMaxBytes    = "WORKER_POOL_MAX_BYTES"
	EnvMaxToolSteps    = "WORKER_MAX_TOOL_STEPS"
	EnvTokenBudget     = "WORKER_TOKEN_BUDGET"
	EnvCheckpointEvery = "WORKER_CHECKPOINT_EVERY_N_STEPS"
	EnvSandbox         = "WORKER_SANDBOX"
	EnvGateSandbox     = "CONDUCTOR_GATE_SANDBOX"
	EnvSandboxUID      = "CONDUCTOR_SANDBOX_UID"
	EnvSandboxMaxProcs = "CONDUCTOR_SANDBOX_MAX_PROCS"
	EnvSandboxMemory   = "CONDUCTOR_SANDBOX_MAX_MEMORY"
	EnvSandboxCgroup   = "CONDUCTOR_SANDBOX_CGROUP"
	EnvSandboxReadOnly = "CONDUCTOR_SANDBOX_RO_PATHS"
	EnvBwrap           = "CONDUCTOR_BWRAP"
	EnvGoCache         = "CONDUCTOR_GO_CACHE"
	EnvDockerCLI       = "CONDUCTOR_DOCKER"
	EnvDockerHost      = "DOCKER_HOST"
	EnvDockerImage     = "CONDUCTOR_DOCKER_IMAGE"
	EnvDockerMemory    = "CONDUCTOR_DOCKER_MEMORY"
	EnvDockerCPUs      = "CONDUCTOR_DOCKER_CPUS"
	EnvDockerPids      = "CONDUCTOR_DOCKER_PIDS"
	EnvModel           = "CONDUCTOR_MODEL"
	EnvForgeTimeout    = "CONDUCTOR_FORGE_TIMEOUT"
	EnvModelSlotTTL    = "CONDUCTOR_MODEL_SLOT_TTL"
)

// MinModelSlotTTL is the shortest model slot lease accepted: it is renewed
// every third of it.
const MinModelSlotTTL = 100 * time.Millisecond

// Sandbox backend names (the sandbox package's; checked equal by a test).
var SandboxBackends = []string{"auto", "bwrap", "docker", "none"}

// MinSandboxMemory is the smallest memory limit a sandboxed command may
// get: below it the sandbox itself cannot start reliably.
const MinSandboxMemory = 64 << 20

// minProcs is the smallest process limit accepted for a sandbox or a
// docker container.
const minProcs = 16

// Source says where a knob's value came from.
type Source struct {
	Kind  string `json:"kind"`            // "flag", "env", "file" or "default"
	Name  string `json:"name,omitempty"`  // the flag (--x), the variable, or the file's field (section.field)
	File  string `json:"file,omitempty"`  // the config file, for "file"
	About string `json:"about,omitempty"` // for "default": what the default means
}

func (s Source) String() string {
	switch s.Kind {
	case "flag":
		return "flag " + s.Name
	case "env":
		return "env " + s.Name
	case "file":
		if s.Name == "" {
			return "file " + s.File
		}
		return "file " + s.File + " field " + s.Name
	}
	return "default"
}

// Knob is one resolved setting as `conductor doctor --config` shows it:
// its name, its value (a URL's password redacted) and where it came from.
type Knob struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Env    string `json:"env"`
	Field  string `json:"field,omitempty"` // its field in the config file
	Source Source `json:"source"`
}

// Flag is a knob's value given on the command line.
type Flag struct {
	Name  string // the flag as typed, "--worktree-base"
	Value string
}

// Inputs are what Resolve reads: the flags given on the command line, by
// knob name (see KnobNames), and the environment.
type Inputs struct {
	Flags  map[string]Flag
	Getenv func(string) string
}

// Error is a knob with a malformed value: it names the knob's source (the
// variable, the flag or the file's field), the value and what is accepted.
type Error struct {
	Source  Source
	Value   string
	Problem string // what is wrong, when not only the value ("unknown field", "does not exist")
	Want    string
}

func (e *Error) Error() string {
	switch {
	case e.Problem != "" && e.Value != "":
		return fmt.Sprintf("%s=%q: %s; want %s", e.Source, e.Value, e.Problem, e.Want)
	case e.Problem != "":
		return fmt.Sprintf("%s: %s; want %s", e.Source, e.Problem, e.Want)
	}
	return fmt.Sprintf("%s=%q: want %s", e.Source, e.Value, e.Want)
}

// knob is one row of the table Resolve goes through.
type knob struct {
	name  string // doctor's name, and the key of Inputs.Flags
	env   string
	field string // section.field in the config file; "" when the file cannot set it
	want  string // what is accepted, for the error
	// set parses v into c; an error is a short reason (want is appended).
	set func(c *Config, v string) error
	// def applies the default and says what it is ("" when the zero value
	// is the default and needs no words).
	def func(c *Config) string
	// show is the value as printed (nil: the string set was given, or "").
	show func(c Config) string
	// secret: the value may hold a password (a URL): shown redacted.
	secret bool
}

// knobs is every knob, in the order doctor prints them. dataRoot and
// configFile come first: the file's location depends on them.
var knobs = []knob{
	{name: "dataRoot", env: EnvHome, want: "a folder",
		set:  func(c *Config, v string) error { c.DataRoot = v; return nil },
		show: func(c Config) string { return c.DataRoot }},
	{name: "configFile", env: EnvConfig, want: "an existing JSON file",
		set:  func(c *Config, v string) error { c.ConfigFile = v; return nil },
		show: func(c Config) string { return c.ConfigFile }},
	{name: "databaseURL", env: "DATABASE_URL", field: "store.databaseURL", want: "a postgres:// URL", secret: true,
		set: func(c *Config, v string) error {
			if err := checkURL(v, "postgres", "postgresql"); err != nil {
				return err
			}
			c.DatabaseURL = v
			return nil
		},
		def:  func(c *Config) string { return "the embedded store (" + filepath.Join(c.DataRoot, "bus.db") + ")" },
		show: func(c Config) string { return c.DatabaseURL }},
	{name: "redisURL", env: "REDIS_URL", field: "queue.redisURL", want: "a redis://, rediss:// or unix:// URL", secret: true,
		set: func(c *Config, v string) error {
			if err := checkURL(v, "redis", "rediss", "unix"); err != nil {
				return err
			}
			c.RedisURL = v
			return nil
		},
		def:  func(c *Config) string { return "the embedded store's queue" },
		show: func(c Config) string { return c.RedisURL }},
	{name: "roleIds", env: "CONDUCTOR_ROLE_IDS", field: "queue.roleIds", want: "roleId=role pairs, comma-separated (role-coder=implementer)",
		set: func(c *Config, v string) error {
			m, err := parseRoleIDs(v)
			if err != nil {
				return err
			}
			c.RoleIDs = m
			return nil
		},
		def:  func(c *Config) string { return "role-<name> is the role <name>" },
		show: func(c Config) string { return showRoleIDs(c.RoleIDs) }},
	{name: "piDir", env: "CONDUCTOR_PI_DIR", field: "worker.piDir", want: "a folder",
		set:  func(c *Config, v string) error { c.PiDir = v; return nil },
		def:  func(c *Config) string { c.PiDir = filepath.Join(c.DataRoot, "pi"); return "" },
		show: func(c Config) string { return c.PiDir }},
	{name: "worktreeBase", env: EnvWorktreeBase, field: "worker.worktreeBase", want: "a folder",
		set:  func(c *Config, v string) error { c.WorktreeBase = v; return nil },
		def:  func(c *Config) string { c.WorktreeBase = c.WorktreesDir(); return "" },
		show: func(c Config) string { return c.WorktreeBase }},
	{name: "repoRoot", env: EnvRepoRoot, field: "worker.repoRoot", want: "a folder holding <workspace>/ repositories",
		set:  func(c *Config, v string) error { c.RepoRoot = v; return nil },
		def:  func(c *Config) string { return "none: only the conductor's clones under " + c.WorkspacesDir() },
		show: func(c Config) string { return c.RepoRoot }},
	{name: "poolSize", env: EnvPoolSize, field: "pool.size", want: "a whole number of free worktrees per repository, 0 or more (0 turns the pool off)",
		set: func(c *Config, v string) error {
			n, err := parseInt(v, 0)
			c.PoolSize = &n
			return err
		},
		def:  func(c *Config) string { n := DefaultPoolSize; c.PoolSize = &n; return "" },
		show: func(c Config) string { return strconv.Itoa(c.Pool()) }},
	{name: "poolMaxBytes", env: EnvPoolMaxBytes, field: "pool.maxBytes", want: "a number of bytes, 0 or more (K, M, G suffixes allowed; 0: unbounded)",
		set: func(c *Config, v string) error {
			n, err := ParseBytes(v)
			c.PoolMaxBytes = n
			return orBad(err)
		},
		def:  func(c *Config) string { return "unbounded" },
		show: func(c Config) string { return strconv.FormatInt(c.PoolMaxBytes, 10) }},
	{name: "maxToolSteps", env: EnvMaxToolSteps, field: "worker.maxToolSteps", want: "a whole number of steps, 1 or more (a role's maxSteps caps it)",
		set: func(c *Config, v string) error {
			n, err := parseInt(v, 1)
			c.MaxToolSteps = n
			return err
		},
		def:  func(c *Config) string { c.MaxToolSteps = DefaultMaxToolSteps; return "" },
		show: func(c Config) string { return strconv.Itoa(c.MaxToolSteps) }},
	{name: "tokenBudget", env: EnvTokenBudget, field: "worker.tokenBudget", want: "a whole number of tokens, 0 or more (0: unlimited; a role's tokenBudget caps it)",
		set: func(c *Config, v string) error {
			n, err := parseInt(v, 0)
			c.TokenBudget = int64(n)
			return err
		},
		def:  func(c *Config) string { return "unlimited" },
		show: func(c Config) string { return strconv.FormatInt(c.TokenBudget, 10) }},
	{name: "checkpointEvery", env: EnvCheckpointEvery, field: "worker.checkpointEveryNSteps", want: "a whole number of steps, 0 or more (0: never)",
		set: func(c *Config, v string) error {
			n, err := parseInt(v, 0)
			c.CheckpointEvery = &n
			return err
		},
		def:  func(c *Config) string { n := DefaultCheckpointEvery; c.CheckpointEvery = &n; return "" },
		show: func(c Config) string { return strconv.Itoa(c.Checkpoints()) }},
	{name: "sandbox", env: EnvSandbox, field: "sandbox.backend", want: "auto, bwrap, docker or none",
		set:  func(c *Config, v string) error { c.Sandbox = v; return checkBackend(v) },
		def:  func(c *Config) string { return "the role's for workers, auto for review checks and gates" },
		show: func(c Config) string { return c.Sandbox }},
	{name: "gateSandbox", env: EnvGateSandbox, field: "sandbox.gateBackend", want: "auto, bwrap, docker or none",
		set:  func(c *Config, v string) error { c.GateSandbox = v; return checkBackend(v) },
		def:  func(c *Config) string { return "the sandbox knob's, else auto" },
		show: func(c Config) string { return c.GateSandbox }},
	{name: "sandboxUID", env: EnvSandboxUID, field: "sandbox.uid", want: "UID or UID:GID (positive numbers; the sandbox never runs as root)",
		set: func(c *Config, v string) error {
			us, gs, hasGID := strings.Cut(v, ":")
			uid, err := strconv.Atoi(us)
			if err != nil || uid < 0 {
				return errBad
			}
			gid := uid
			if hasGID {
				if gid, err = strconv.Atoi(gs); err != nil || gid < 0 {
					return errBad
				}
			}
			if uid == 0 || gid == 0 {
				return errors.New("the sandbox never runs as root (uid or gid 0)")
			}
			c.SandboxLimits.UID, c.SandboxLimits.GID = &uid, &gid
			return nil
		},
		def: func(c *Config) string { return "65534 (nobody) when the conductor is root, else its own uid" },
		show: func(c Config) string {
			if l := c.SandboxLimits; l.UID != nil {
				return fmt.Sprintf("%d:%d", *l.UID, *l.GID)
			}
			return ""
		}},
	{name: "sandboxMaxProcs", env: EnvSandboxMaxProcs, field: "sandbox.maxProcs", want: fmt.Sprintf("a number of processes, at least %d", minProcs),
		set: func(c *Config, v string) error {
			n, err := parseInt(v, minProcs)
			c.SandboxLimits.MaxProcs = uint64(n)
			return err
		},
		def: func(c *Config) string { return "1024" },
		show: func(c Config) string {
			return nonZero(strconv.FormatUint(c.SandboxLimits.MaxProcs, 10))
		}},
	{name: "sandboxMaxMemory", env: EnvSandboxMemory, field: "sandbox.maxMemory", want: "a number of bytes (K, M, G suffixes allowed), at least 64M",
		set: func(c *Config, v string) error {
			n, err := ParseBytes(v)
			if err != nil || n < MinSandboxMemory {
				return errBad
			}
			c.SandboxLimits.MaxMemory = uint64(n)
			return err
		},
		def:  func(c *Config) string { return "1G per command" },
		show: func(c Config) string { return nonZero(strconv.FormatUint(c.SandboxLimits.MaxMemory, 10)) }},
	{name: "sandboxCgroup", env: EnvSandboxCgroup, field: "sandbox.cgroup", want: "the absolute path of a delegated cgroup v2 folder",
		set: func(c *Config, v string) error {
			if !filepath.IsAbs(v) {
				return errBad
			}
			c.SandboxLimits.Cgroup = filepath.Clean(v)
			return nil
		},
		def:  func(c *Config) string { return "none: RLIMIT_DATA per process only" },
		show: func(c Config) string { return c.SandboxLimits.Cgroup }},
	{name: "sandboxReadOnly", env: EnvSandboxReadOnly, field: "sandbox.readOnlyPaths", want: "absolute paths, colon-separated (in the file: a string or an array of strings)",
		set: func(c *Config, v string) error {
			c.SandboxLimits.ReadOnly = nil
			for _, p := range filepath.SplitList(v) {
				if p == "" {
					continue
				}
				if !filepath.IsAbs(p) {
					return fmt.Errorf("%q is not an absolute path", p)
				}
				c.SandboxLimits.ReadOnly = append(c.SandboxLimits.ReadOnly, filepath.Clean(p))
			}
			return nil
		},
		show: func(c Config) string { return strings.Join(c.SandboxLimits.ReadOnly, string(filepath.ListSeparator)) }},
	{name: "goCache", env: EnvGoCache, field: "sandbox.goCache", want: "the absolute path of a folder, or off",
		set: func(c *Config, v string) error {
			if v != "off" && !filepath.IsAbs(v) {
				return fmt.Errorf("%q is neither off nor an absolute path", v)
			}
			if v != "off" {
				v = filepath.Clean(v)
			}
			c.SandboxLimits.GoCache = v
			return nil
		},
		def:  func(c *Config) string { return "the user's cache folder/conductor/go-warm" },
		show: func(c Config) string { return c.SandboxLimits.GoCache }},
	{name: "bwrap", env: EnvBwrap, field: "sandbox.bwrap", want: "the path of the bwrap executable",
		set:  func(c *Config, v string) error { c.SandboxLimits.Bwrap = v; return nil },
		def:  func(c *Config) string { return "bwrap in PATH" },
		show: func(c Config) string { return c.SandboxLimits.Bwrap }},
	{name: "dockerCLI", env: EnvDockerCLI, field: "sandbox.dockerCLI", want: "the path of the docker CLI",
		set:  func(c *Config, v string) error { c.SandboxLimits.DockerCLI = v; return nil },
		def:  func(c *Config) string { return "docker in PATH" },
		show: func(c Config) string { return c.SandboxLimits.DockerCLI }},
	{name: "dockerHost", env: EnvDockerHost, field: "sandbox.dockerHost", want: "a Docker engine address (unix:///path, tcp://host:port)",
		set:  func(c *Config, v string) error { c.SandboxLimits.DockerHost = v; return nil },
		def:  func(c *Config) string { return "the docker CLI's default" },
		show: func(c Config) string { return c.SandboxLimits.DockerHost }},
	{name: "dockerImage", env: EnvDockerImage, field: "sandbox.dockerImage", want: "an image reference",
		set:  func(c *Config, v string) error { c.SandboxLimits.DockerImage = v; return nil },
		def:  func(c *Config) string { return "a scratch image, the host's /usr bound read-only" },
		show: func(c Config) string { return c.SandboxLimits.DockerImage }},
	{name: "dockerMemory", env: EnvDockerMemory, field: "sandbox.dockerMemory", want: "a number of bytes (K, M, G suffixes allowed), at least 64M",
		set: func(c *Config, v string) error {
			n, err := ParseBytes(v)
			if err != nil || n < MinSandboxMemory {
				return errBad
			}
			c.SandboxLimits.DockerMem = n
			return err
		},
		def:  func(c *Config) string { return "2G" },
		show: func(c Config) string { return nonZero(strconv.FormatInt(c.SandboxLimits.DockerMem, 10)) }},
	{name: "dockerCPUs", env: EnvDockerCPUs, field: "sandbox.dockerCPUs", want: "a positive number of CPUs (e.g. 1.5)",
		set: func(c *Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 || f > 1024 {
				return errBad
			}
			c.SandboxLimits.DockerCPUs = f
			return nil
		},
		def: func(c *Config) string { return "2" },
		show: func(c Config) string {
			return nonZero(strconv.FormatFloat(c.SandboxLimits.DockerCPUs, 'g', -1, 64))
		}},
	{name: "dockerPids", env: EnvDockerPids, field: "sandbox.dockerPids", want: fmt.Sprintf("a number of processes, at least %d", minProcs),
		set: func(c *Config, v string) error {
			n, err := parseInt(v, minProcs)
			c.SandboxLimits.DockerPids = int64(n)
			return err
		},
		def:  func(c *Config) string { return "the sandbox's process limit" },
		show: func(c Config) string { return nonZero(strconv.FormatInt(c.SandboxLimits.DockerPids, 10)) }},
	{name: "committerName", env: "GIT_COMMITTER_NAME", field: "land.committerName", want: "a name",
		set:  func(c *Config, v string) error { c.CommitterName = v; return nil },
		def:  func(c *Config) string { return "the repository's git identity, else conductor" },
		show: func(c Config) string { return c.CommitterName }},
	{name: "committerEmail", env: "GIT_COMMITTER_EMAIL", field: "land.committerEmail", want: "an email address",
		set:  func(c *Config, v string) error { c.CommitterEmail = v; return nil },
		def:  func(c *Config) string { return "the repository's git identity, else conductor@localhost" },
		show: func(c Config) string { return c.CommitterEmail }},
	{name: "model", env: EnvModel, field: "models.default", want: "a model alias of the registry, or replay:FILE",
		set: func(c *Config, v string) error { c.Model = v; return nil },
		def: func(c *Config) string {
			return "the registry's built-in default (ollama-qwen; openai when OPENAI_BASE_URL is set)"
		},
		show: func(c Config) string { return c.Model }},
	{name: "modelSlotTTL", env: EnvModelSlotTTL, field: "models.slotTTL", want: "a Go duration of at least 100ms (e.g. 30s)",
		set: func(c *Config, v string) error {
			d, err := parseDuration(v)
			if err != nil || d < MinModelSlotTTL {
				return errBad
			}
			c.ModelSlotTTL = d
			return nil
		},
		def:  func(c *Config) string { return "30s" },
		show: func(c Config) string { return durationText(c.ModelSlotTTL) }},
	{name: "forgeTimeout", env: EnvForgeTimeout, field: "forge.timeout", want: "a positive Go duration such as 30s or 2m",
		set: func(c *Config, v string) error {
			if d, err := parseDuration(v); err != nil || d <= 0 {
				return errBad
			}
			c.ForgeTimeout = v
			return nil
		},
		def:  func(c *Config) string { return "60s" },
		show: func(c Config) string { return c.ForgeTimeout }},
}

// FileSections are the top-level fields of the config file. models and
// forge are decoded by their owners (the model registry, the forge
// settings), the others here; any other field is an error.
var FileSections = []string{"models", "forge", "store", "queue", "worker", "pool", "sandbox", "land"}

// ownedElsewhere are the sections whose fields their owners check: of
// them Resolve reads only the fields named in the knob table.
var ownedElsewhere = []string{"models", "forge"}

// KnobNames lists the knobs, in order.
func KnobNames() []string {
	out := make([]string, len(knobs))
	for i, k := range knobs {
		out[i] = k.name
	}
	return out
}

var errBad = errors.New("")

// Resolve fills every knob once: a flag given on the command line, else
// its environment variable, else the config file's field, else the
// default. Every value is checked here: a malformed one is an *Error
// naming the variable, flag or field, its source and what is accepted.
// A config file named explicitly (--config, CONDUCTOR_CONFIG) must exist;
// DataRoot/config.json is read when it exists.
func Resolve(in Inputs) (Config, error) {
	getenv := in.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	var c Config
	var file fileValues
	for _, k := range knobs {
		v, src, ok := "", Source{}, false
		if f, given := in.Flags[k.name]; given {
			v, src, ok = f.Value, Source{Kind: "flag", Name: f.Name}, true
		} else if e := strings.TrimSpace(getenv(k.env)); e != "" {
			v, src, ok = e, Source{Kind: "env", Name: k.env}, true
		} else if fv, found := file.get(k.field); found {
			v, src, ok = fv, Source{Kind: "file", Name: k.field, File: file.path}, true
		}
		switch {
		case ok:
			if err := k.set(&c, v); err != nil {
				return c, k.fail(src, v, err)
			}
		case k.name == "dataRoot":
			c.DataRoot = defaultDataRoot(getenv)
			src = Source{Kind: "default"}
		case k.name == "configFile":
			src = Source{Kind: "default", About: "none"}
			if p := filepath.Join(c.DataRoot, "config.json"); fileExists(p) {
				c.ConfigFile, src.About = p, "the data root's config.json"
			}
		default:
			src = Source{Kind: "default"}
			if k.def != nil {
				src.About = k.def(&c)
			}
		}
		// The file's location is known once dataRoot and configFile are.
		switch k.name {
		case "dataRoot":
			abs, err := filepath.Abs(c.DataRoot)
			if err != nil {
				return c, &Error{Source: src, Value: c.DataRoot, Want: k.want}
			}
			c.DataRoot = abs
		case "configFile":
			explicit := src.Kind != "default"
			if c.ConfigFile != "" {
				var err error
				if file, err = loadFile(c.ConfigFile, explicit); err != nil {
					if ce := (*Error)(nil); errors.As(err, &ce) {
						return c, err
					}
					return c, &Error{Source: src, Value: c.ConfigFile, Problem: err.Error(), Want: k.want}
				}
			}
		}
		c.knobs = append(c.knobs, k.knob(c, src))
	}
	return c, nil
}

func (k knob) knob(c Config, src Source) Knob {
	v := ""
	if k.show != nil {
		v = k.show(c)
	}
	if k.secret {
		v = redactURL(v)
	}
	return Knob{Name: k.name, Value: v, Env: k.env, Field: k.field, Source: src}
}

// fileValues are the knob fields of the config file, as strings.
type fileValues struct {
	path   string
	fields map[string]string // "section.field" → value
}

func (f fileValues) get(field string) (string, bool) {
	if field == "" || f.fields == nil {
		return "", false
	}
	v, ok := f.fields[field]
	return v, ok
}

// loadFile reads the config file: strict JSON, only FileSections at the
// top, only known fields in the sections read here. A missing file is an
// error when it was named explicitly.
func loadFile(path string, explicit bool) (fileValues, error) {
	fv := fileValues{path: path, fields: map[string]string{}}
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !explicit {
			return fileValues{}, nil
		}
		if errors.Is(err, os.ErrNotExist) {
			return fv, errors.New("it does not exist")
		}
		return fv, err
	}
	at := func(field string) Source { return Source{Kind: "file", File: path, Name: field} }
	var top map[string]json.RawMessage
	if err := jsonstrict.Decode(data, &top, ""); err != nil {
		return fv, &Error{Source: at(""), Problem: err.Error(), Want: "one JSON object"}
	}
	for _, name := range sortedKeys(top) {
		if !slices.Contains(FileSections, name) {
			return fv, &Error{Source: at(name), Problem: "unknown field", Want: "one of the sections " + strings.Join(FileSections, ", ")}
		}
		raw := bytes.TrimSpace(top[name])
		if bytes.Equal(raw, []byte("null")) {
			continue
		}
		var sec map[string]json.RawMessage
		if err := json.Unmarshal(raw, &sec); err != nil {
			return fv, &Error{Source: at(name), Problem: "not an object", Want: "a JSON object"}
		}
		known := sectionFields(name)
		for _, field := range sortedKeys(sec) {
			full := name + "." + field
			if !slices.Contains(known, field) {
				if slices.Contains(ownedElsewhere, name) {
					continue // the registry and the forge check their own fields
				}
				return fv, &Error{Source: at(full), Problem: "unknown field", Want: "one of " + name + "." + strings.Join(known, ", "+name+".")}
			}
			v, err := scalar(sec[field])
			if err != nil {
				return fv, &Error{Source: at(full), Problem: err.Error(), Want: knobByField(full).want}
			}
			fv.fields[full] = v
		}
	}
	return fv, nil
}

func knobByField(field string) knob {
	for _, k := range knobs {
		if k.field == field {
			return k
		}
	}
	return knob{}
}

// sectionFields lists the knob fields of one section of the file.
func sectionFields(section string) []string {
	var out []string
	for _, k := range knobs {
		if s, f, ok := strings.Cut(k.field, "."); ok && s == section {
			out = append(out, f)
		}
	}
	return out
}

// scalar turns a field's JSON value into the string a knob parses: a
// string as is, a number as written, an array of strings joined with the
// path list separator.
func scalar(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&n); err == nil {
		return n.String(), nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err == nil {
		return strings.Join(list, string(filepath.ListSeparator)), nil
	}
	return "", fmt.Errorf("a JSON %s", jsonKind(raw))
}

func jsonKind(raw []byte) string {
	switch {
	case len(raw) == 0:
		return "nothing"
	case raw[0] == '{':
		return "object"
	case raw[0] == '[':
		return "array"
	case raw[0] == 't' || raw[0] == 'f':
		return "boolean"
	case raw[0] == 'n':
		return "null"
	}
	return "value"
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

func orBad(err error) error {
	if err != nil {
		return errBad
	}
	return nil
}

func parseDuration(v string) (time.Duration, error) { return time.ParseDuration(v) }

// durationText is d as a knob shows it ("" for zero).
func durationText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func parseInt(v string, min int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		return 0, errBad
	}
	return n, nil
}

func checkBackend(v string) error {
	if !slices.Contains(SandboxBackends, v) {
		return errBad
	}
	return nil
}

func checkURL(v string, schemes ...string) error {
	u, err := url.Parse(v)
	if err != nil || !slices.Contains(schemes, u.Scheme) {
		return errBad
	}
	return nil
}

func nonZero(s string) string {
	if s == "0" {
		return ""
	}
	return s
}

// redactURL drops a password from a URL shown in a report or an error,
// from one that does not parse too (scheme://user:password@…).
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if u.User != nil {
			return u.Redacted()
		}
		return raw
	}
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if user, _, ok := strings.Cut(rest[:at], ":"); ok {
				return raw[:i+3] + user + ":xxxxx" + rest[at:]
			}
		}
	}
	return raw
}

// ParseBytes reads a byte count: digits, optionally followed by K, M or G
// (binary: 1K is 1024), with an optional "i" and "B" (512MiB, 2G, 1073741824).
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	u := strings.ToUpper(s)
	u = strings.TrimSuffix(u, "B")
	u = strings.TrimSuffix(u, "I")
	mult := int64(1)
	switch {
	case strings.HasSuffix(u, "K"):
		mult, u = 1<<10, u[:len(u)-1]
	case strings.HasSuffix(u, "M"):
		mult, u = 1<<20, u[:len(u)-1]
	case strings.HasSuffix(u, "G"):
		mult, u = 1<<30, u[:len(u)-1]
	}
	n, err := strconv.ParseInt(u, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a byte count", s)
	}
	return n * mult, nil
}

// ResolveSandbox resolves the sandbox's knobs from the environment alone
// (no flag, no config file): for tools and tests without a Config.
func ResolveSandbox(getenv func(string) string) (SandboxLimits, error) {
	var c Config
	for _, k := range knobs {
		if !strings.HasPrefix(k.field, "sandbox.") || k.name == "sandbox" || k.name == "gateSandbox" {
			continue
		}
		if v := strings.TrimSpace(getenv(k.env)); v != "" {
			if err := k.set(&c, v); err != nil {
				return SandboxLimits{}, k.fail(Source{Kind: "env", Name: k.env}, v, err)
			}
		}
	}
	return c.SandboxLimits, nil
}

func (k knob) fail(src Source, v string, err error) *Error {
	if k.secret {
		v = redactURL(v) // a password never reaches an error line
	}
	e := &Error{Source: src, Value: v, Want: k.want}
	if err != errBad {
		e.Problem = err.Error()
	}
	return e
}

// parseRoleIDs reads "id=role,id=role": each id once, each side a plain
// name (letters, digits, '.', '_', '-').
func parseRoleIDs(v string) (map[string]string, error) {
	m := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		id, role, ok := strings.Cut(pair, "=")
		id, role = strings.TrimSpace(id), strings.TrimSpace(role)
		if !ok || !plainName(id) || !plainName(role) {
			return nil, fmt.Errorf("%q is not roleId=role", pair)
		}
		if _, dup := m[id]; dup {
			return nil, fmt.Errorf("%q is mapped twice", id)
		}
		m[id] = role
	}
	return m, nil
}

func plainName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

func showRoleIDs(m map[string]string) string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for i, id := range ids {
		ids[i] = id + "=" + m[id]
	}
	return strings.Join(ids, ",")
}
