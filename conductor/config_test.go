package conductor_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/sandbox"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func knob(t *testing.T, c conductor.Config, name string) conductor.Knob {
	t.Helper()
	for _, k := range c.Knobs() {
		if k.Name == name {
			return k
		}
	}
	t.Fatalf("no knob %q in %v", name, conductor.KnobNames())
	return conductor.Knob{}
}

// TestResolvePrecedence: flag > environment > file > default, each knob
// recording where its value came from.
func TestResolvePrecedence(t *testing.T) {
	home := t.TempDir()
	file := filepath.Join(home, "config.json")
	if err := os.WriteFile(file, []byte(`{"worker": {"maxToolSteps": 7, "worktreeBase": "/file/wt", "checkpointEveryNSteps": 0},
		"pool": {"size": 2, "maxBytes": "1G"}, "models": {"default": "vllm", "aliases": {}}, "forge": {"url": "http://x"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CONDUCTOR_HOME": home, "WORKER_MAX_TOOL_STEPS": "9", "WORKER_WORKTREE_BASE": "/env/wt"}
	c, err := conductor.Resolve(conductor.Inputs{Getenv: envOf(env),
		Flags: map[string]conductor.Flag{"worktreeBase": {Name: "--worktree-base", Value: "/flag/wt"}}})
	if err != nil {
		t.Fatal(err)
	}
	if c.DataRoot != home || c.ConfigFile != file {
		t.Fatalf("data root %q config %q", c.DataRoot, c.ConfigFile)
	}
	if c.WorktreeBase != "/flag/wt" || knob(t, c, "worktreeBase").Source.String() != "flag --worktree-base" {
		t.Errorf("worktree base %q from %v: the flag wins", c.WorktreeBase, knob(t, c, "worktreeBase").Source)
	}
	if c.MaxToolSteps != 9 || knob(t, c, "maxToolSteps").Source.String() != "env WORKER_MAX_TOOL_STEPS" {
		t.Errorf("max steps %d: the environment wins over the file", c.MaxToolSteps)
	}
	if c.Pool() != 2 || c.PoolMaxBytes != 1<<30 || knob(t, c, "poolSize").Source.String() != "file "+file+" field pool.size" {
		t.Errorf("pool %d/%d from %v: the file wins over the default", c.Pool(), c.PoolMaxBytes, knob(t, c, "poolSize").Source)
	}
	if c.Checkpoints() != 0 {
		t.Errorf("checkpoint cadence %d: the file's 0 (never) is a value, not unset", c.Checkpoints())
	}
	if c.Model != "vllm" {
		t.Errorf("model %q from the file's models.default", c.Model)
	}
	if k := knob(t, c, "tokenBudget"); k.Source.Kind != "default" || c.TokenBudget != 0 {
		t.Errorf("token budget %v", k)
	}
	if got := knob(t, c, "piDir").Value; got != filepath.Join(home, "pi") {
		t.Errorf("pi dir default %q", got)
	}
	if !slices.Equal(conductor.KnobNames()[:2], []string{"dataRoot", "configFile"}) {
		t.Errorf("knob order %v", conductor.KnobNames())
	}
}

// TestResolveBadValues: every malformed value is one *Error naming the
// variable or field, its source and what is accepted.
func TestResolveBadValues(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"pool size not a number", map[string]string{"WORKER_POOL_SIZE": "four"}, []string{`env WORKER_POOL_SIZE="four"`, "whole number"}},
		{"pool size negative", map[string]string{"WORKER_POOL_SIZE": "-1"}, []string{`WORKER_POOL_SIZE="-1"`, "0 or more"}},
		{"pool bytes", map[string]string{"WORKER_POOL_MAX_BYTES": "lots"}, []string{"WORKER_POOL_MAX_BYTES", "bytes"}},
		{"steps zero", map[string]string{"WORKER_MAX_TOOL_STEPS": "0"}, []string{"WORKER_MAX_TOOL_STEPS", "1 or more"}},
		{"steps text", map[string]string{"WORKER_MAX_TOOL_STEPS": "12x"}, []string{"WORKER_MAX_TOOL_STEPS"}},
		{"checkpoint negative", map[string]string{"WORKER_CHECKPOINT_EVERY_N_STEPS": "-2"}, []string{"WORKER_CHECKPOINT_EVERY_N_STEPS", "0 or more"}},
		{"token budget", map[string]string{"WORKER_TOKEN_BUDGET": "1e6"}, []string{"WORKER_TOKEN_BUDGET"}},
		{"unknown sandbox", map[string]string{"WORKER_SANDBOX": "chroot"}, []string{`WORKER_SANDBOX="chroot"`, "auto, bwrap, docker or none"}},
		{"unknown gate sandbox", map[string]string{"CONDUCTOR_GATE_SANDBOX": "jail"}, []string{"CONDUCTOR_GATE_SANDBOX"}},
		{"root sandbox uid", map[string]string{"CONDUCTOR_SANDBOX_UID": "0"}, []string{"CONDUCTOR_SANDBOX_UID", "never runs as root"}},
		{"sandbox memory", map[string]string{"CONDUCTOR_SANDBOX_MAX_MEMORY": "1M"}, []string{"CONDUCTOR_SANDBOX_MAX_MEMORY", "at least 64M"}},
		{"relative read-only path", map[string]string{"CONDUCTOR_SANDBOX_RO_PATHS": "/ok:rel"}, []string{"CONDUCTOR_SANDBOX_RO_PATHS", `"rel" is not an absolute path`}},
		{"docker cpus", map[string]string{"CONDUCTOR_DOCKER_CPUS": "0"}, []string{"CONDUCTOR_DOCKER_CPUS"}},
		{"redis url", map[string]string{"REDIS_URL": "localhost:6379"}, []string{"REDIS_URL", "redis://"}},
		{"database url", map[string]string{"DATABASE_URL": "mysql://x"}, []string{"DATABASE_URL", "postgres://"}},
		{"forge timeout", map[string]string{"CONDUCTOR_FORGE_TIMEOUT": "soon"}, []string{"CONDUCTOR_FORGE_TIMEOUT", "duration"}},
		{"slot ttl", map[string]string{"CONDUCTOR_MODEL_SLOT_TTL": "10ms"}, []string{`env CONDUCTOR_MODEL_SLOT_TTL="10ms"`, "at least 100ms"}},
		{"slot ttl in the file", map[string]string{"CONDUCTOR_CONFIG": write("ttl.json", `{"models": {"slotTTL": "soon"}}`)}, []string{`field models.slotTTL="soon"`, "Go duration"}},
		{"config missing", map[string]string{"CONDUCTOR_CONFIG": "/nonexistent.json"}, []string{"env CONDUCTOR_CONFIG", "/nonexistent.json", "does not exist"}},
		{"config malformed", map[string]string{"CONDUCTOR_CONFIG": write("bad.json", "{\n\"worker\": {,}}")}, []string{"bad.json", "line "}},
		{"config unknown section", map[string]string{"CONDUCTOR_CONFIG": write("sec.json", `{"workers": {}}`)}, []string{"sec.json field workers", "unknown field", "worker"}},
		{"config unknown field", map[string]string{"CONDUCTOR_CONFIG": write("field.json", `{"worker": {"maxToolStep": 3}}`)}, []string{"field.json field worker.maxToolStep", "unknown field", "worker.maxToolSteps"}},
		{"config bad value", map[string]string{"CONDUCTOR_CONFIG": write("val.json", `{"pool": {"size": -3}}`)}, []string{`field pool.size="-3"`, "0 or more"}},
		{"config wrong type", map[string]string{"CONDUCTOR_CONFIG": write("type.json", `{"pool": {"size": true}}`)}, []string{"field pool.size", "boolean"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"CONDUCTOR_HOME": dir}
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := conductor.Resolve(conductor.Inputs{Getenv: envOf(env)})
			var ce *conductor.Error
			if !errors.As(err, &ce) {
				t.Fatalf("err %v (%T), want a *conductor.Error", err, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("more than one line: %q", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestResolveFlagOverBadEnv: a flag given on the command line wins, even
// over a malformed variable it replaces; the implicit config file may be
// missing.
func TestResolveImplicitFileMissing(t *testing.T) {
	home := t.TempDir()
	c, err := conductor.Resolve(conductor.Inputs{Getenv: envOf(map[string]string{"CONDUCTOR_HOME": home})})
	if err != nil || c.ConfigFile != "" {
		t.Fatalf("config %q, %v", c.ConfigFile, err)
	}
	_, err = conductor.Resolve(conductor.Inputs{Getenv: envOf(map[string]string{"CONDUCTOR_HOME": home}),
		Flags: map[string]conductor.Flag{"configFile": {Name: "--config", Value: filepath.Join(home, "none.json")}}})
	if err == nil || !strings.Contains(err.Error(), "flag --config") {
		t.Fatalf("a missing --config file: %v", err)
	}
}

// TestSandboxBackendNames: the config's list is the sandbox's.
func TestSandboxBackendNames(t *testing.T) {
	want := []string{sandbox.BackendAuto, sandbox.BackendBwrap, sandbox.BackendDocker, sandbox.BackendNone}
	if !slices.Equal(conductor.SandboxBackends, want) {
		t.Fatalf("config accepts %v, the sandbox %v", conductor.SandboxBackends, want)
	}
}

// TestResolveRedacts: a URL's password never reaches the knob table.
func TestResolveRedacts(t *testing.T) {
	c, err := conductor.Resolve(conductor.Inputs{Getenv: envOf(map[string]string{"CONDUCTOR_HOME": t.TempDir(),
		"DATABASE_URL": "postgres://u:s3cret@db/x", "REDIS_URL": "redis://:pw@r:6379/0"})})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range c.Knobs() {
		if strings.Contains(k.Value, "s3cret") || strings.Contains(k.Value, ":pw@") {
			t.Errorf("knob %s shows a password: %q", k.Name, k.Value)
		}
	}
	_, err = conductor.Resolve(conductor.Inputs{Getenv: envOf(map[string]string{"CONDUCTOR_HOME": t.TempDir(),
		"DATABASE_URL": "postgres://u:s3cret@db:badport/x"})})
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "u:xxxxx@db:badport") {
		t.Errorf("a malformed URL's error: %v", err)
	}
	if c.DatabaseURL != "postgres://u:s3cret@db/x" {
		t.Errorf("the value itself is kept: %q", c.DatabaseURL)
	}
}
