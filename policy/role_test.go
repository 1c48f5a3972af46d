package policy_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
)

// rolePolicy is the interface runtask declares; *policy.Role must satisfy it.
type rolePolicy interface {
	Name() string
	SystemPrompt() string
	AllowsTool(tool string) bool
	CheckCommand(argv []string) error
	CheckWrite(path string) error
	EnvAllowlist() []string
	SandboxBackend() string
	MaxSteps() int
	TokenBudget() int64
	CommandTimeout() time.Duration
	OutputLimit() int
}

var _ rolePolicy = (*policy.Role)(nil)

func defaults(t testing.TB) *policy.Policy {
	t.Helper()
	p, err := policy.Load(roles.FS, "")
	if err != nil {
		t.Fatalf("load defaults: %v", err)
	}
	return p
}

func role(t *testing.T, p *policy.Policy, name string) *policy.Role {
	t.Helper()
	r, err := p.Role(name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// refusalCode returns the code of a *refusal.Refusal, "" for nil, and fails
// for any other error.
func refusalCode(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var r *refusal.Refusal
	if !errors.As(err, &r) {
		t.Fatalf("want a *refusal.Refusal, got %T: %v", err, err)
	}
	if r.Reason == "" || r.Fix == "" {
		t.Errorf("refusal %s lacks a reason or a fix: %+v", r.Code, r)
	}
	return string(r.Code)
}

func TestDefaultRolesLoad(t *testing.T) {
	p := defaults(t)
	for _, name := range []string{"implementer", "doc-writer", "reviewer"} {
		r := role(t, p, name)
		if r.Name() != name || r.SystemPrompt() == "" {
			t.Errorf("%s: name %q, prompt %q", name, r.Name(), r.SystemPrompt())
		}
		if r.SandboxBackend() != "auto" {
			t.Errorf("%s: sandbox %q", name, r.SandboxBackend())
		}
		if r.MaxSteps() <= 0 || r.TokenBudget() <= 0 || r.OutputLimit() <= 0 {
			t.Errorf("%s: limits not set: %d %d %d", name, r.MaxSteps(), r.TokenBudget(), r.OutputLimit())
		}
	}
	if got := role(t, p, "implementer").CommandTimeout(); got != 300*time.Second {
		t.Errorf("implementer command timeout %v", got)
	}
	if _, err := p.Role("wizard"); err == nil || !strings.Contains(err.Error(), "implementer") {
		t.Errorf("unknown role error should list the known roles, got %v", err)
	}
}

func TestAllowsTool(t *testing.T) {
	p := defaults(t)
	tests := []struct {
		role, tool string
		want       bool
	}{
		{"implementer", "read_file", true},
		{"implementer", "run_command", true},
		{"implementer", "bash", true}, // short convention
		{"implementer", "edit", true},
		{"implementer", "shell", false},
		{"implementer", "", false},
		{"doc-writer", "write_file", true},
		{"doc-writer", "edit_file", true},
		{"doc-writer", "run_command", false},
		{"doc-writer", "bash", false},
		{"reviewer", "read_file", true},
		{"reviewer", "grep", true},
		{"reviewer", "list_dir", true},
		{"reviewer", "write_file", false},
		{"reviewer", "edit_file", false},
		{"reviewer", "run_command", false},
	}
	for _, tt := range tests {
		t.Run(tt.role+"/"+tt.tool, func(t *testing.T) {
			if got := role(t, p, tt.role).AllowsTool(tt.tool); got != tt.want {
				t.Errorf("AllowsTool(%q) = %v, want %v", tt.tool, got, tt.want)
			}
		})
	}
}

func TestCheckCommand(t *testing.T) {
	p := defaults(t)
	tests := []struct {
		name, role string
		argv       []string
		want       string // refusal code, "" = allowed
	}{
		{"exact prefix", "implementer", []string{"go", "test"}, ""},
		{"prefix plus args", "implementer", []string{"go", "test", "./...", "-run", "TestX"}, ""},
		{"gofmt -l", "implementer", []string{"gofmt", "-l", "."}, ""},
		{"gofmt -w not allowed", "implementer", []string{"gofmt", "-w", "."}, "command-not-allowed"},
		{"make test", "implementer", []string{"make", "test"}, ""},
		{"make other target", "implementer", []string{"make", "install"}, "command-not-allowed"},
		{"partial prefix", "implementer", []string{"go"}, "command-not-allowed"},
		{"go run", "implementer", []string{"go", "run", "."}, "command-not-allowed"},
		{"case differs", "implementer", []string{"Go", "test"}, "command-not-allowed"},
		{"path to binary", "implementer", []string{"/usr/bin/go", "test"}, "command-not-allowed"},
		{"relative binary", "implementer", []string{"./go", "test"}, "command-not-allowed"},
		{"joined string", "implementer", []string{"go test"}, "command-not-allowed"},
		{"shell", "implementer", []string{"sh", "-c", "go test"}, "command-not-allowed"},
		{"trailing space", "implementer", []string{"go ", "test"}, "command-not-allowed"},
		{"empty argv", "implementer", nil, "command-not-allowed"},
		{"empty argv0", "implementer", []string{"", "test"}, "command-not-allowed"},
		{"denied -exec", "implementer", []string{"go", "test", "-exec", "sh"}, "argument-not-allowed"},
		{"denied -exec=", "implementer", []string{"go", "test", "-exec=/bin/sh", "./..."}, "argument-not-allowed"},
		{"denied -toolexec", "implementer", []string{"go", "vet", "-toolexec", "x"}, "argument-not-allowed"},
		{"denied --exec (two dashes)", "implementer", []string{"go", "test", "--exec=/bin/sh", "./..."}, "argument-not-allowed"},
		{"denied -vettool", "implementer", []string{"go", "vet", "-vettool=/tmp/x", "./..."}, "argument-not-allowed"},
		{"denied --vettool", "implementer", []string{"go", "vet", "--vettool", "/tmp/x"}, "argument-not-allowed"},
		{"make -f", "implementer", []string{"make", "test", "-f", "/tmp/evil.mk"}, "argument-not-allowed"},
		{"NUL in argument", "implementer", []string{"go", "test", "a\x00b"}, "argument-not-allowed"},
		{"doc-writer has no run_command", "doc-writer", []string{"go", "test"}, "tool-not-allowed"},
		{"reviewer has no run_command", "reviewer", []string{"go", "test"}, "tool-not-allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := refusalCode(t, role(t, p, tt.role).CheckCommand(tt.argv)); got != tt.want {
				t.Errorf("CheckCommand(%q) = %q, want %q", tt.argv, got, tt.want)
			}
		})
	}
}

func TestCheckWrite(t *testing.T) {
	p := defaults(t)
	tests := []struct {
		name, role, path string
		want             string
	}{
		{"plain file", "implementer", "pkg/x.go", ""},
		{"root file", "implementer", "main.go", ""},
		{"dot slash", "implementer", "./pkg/x.go", ""},
		{"dotdot inside", "implementer", "pkg/../lib/x.go", ""},
		{"forbidden src", "implementer", "src/x.go", "write-not-allowed"},
		{"forbidden ./src", "implementer", "./src/x", "write-not-allowed"},
		{"forbidden a/../src", "implementer", "a/../src/x", "write-not-allowed"},
		{"forbidden SRC case-only", "implementer", "SRC/x", "write-not-allowed"},
		{"forbidden v1", "implementer", "v1/api.go", "write-not-allowed"},
		{"src itself", "implementer", "src", "write-not-allowed"},
		{"srcx is not src", "implementer", "srcx/y.go", ""},
		{"denied roles", "implementer", "roles/implementer.json", "write-not-allowed"},
		{"denied Roles case", "implementer", "Roles/implementer.json", "write-not-allowed"},
		{"denied workflows", "implementer", ".github/workflows/ci.yml", "write-not-allowed"},
		{"escape", "implementer", "../x", "write-not-allowed"},
		{"escape deep", "implementer", "a/../../x", "write-not-allowed"},
		{"absolute", "implementer", "/etc/passwd", "write-not-allowed"},
		{".git", "implementer", ".git/config", "write-not-allowed"},
		{".GIT case", "implementer", ".GIT/hooks/pre-commit", "write-not-allowed"},
		{"nested .git", "implementer", "sub/.git/config", "write-not-allowed"},
		{".git trailing dot", "implementer", ".git./config", "write-not-allowed"},
		{"git~1", "implementer", "GIT~1/config", "write-not-allowed"},
		{".git HFS ignorable", "implementer", ".g\u200cit/config", "write-not-allowed"},
		{".gitignore is fine", "implementer", ".gitignore", ""},
		{"empty", "implementer", "", "write-not-allowed"},
		{"root dot", "implementer", ".", "write-not-allowed"},
		{"doc in docs", "doc-writer", "docs/guide.md", ""},
		{"doc nested", "doc-writer", "docs/a/b/c.png", ""},
		{"doc markdown root", "doc-writer", "README.md", ""},
		{"doc markdown deep", "doc-writer", "pkg/sub/NOTES.md", ""},
		{"doc code", "doc-writer", "main.go", "write-not-allowed"},
		{"doc Docs case", "doc-writer", "Docs/guide.txt", "write-not-allowed"},
		{"doc md in src", "doc-writer", "src/README.md", "write-not-allowed"},
		{"doc escape via docs", "doc-writer", "docs/../main.go", "write-not-allowed"},
		{"doc markdown-ish", "doc-writer", "x.md.go", "write-not-allowed"},
		{"reviewer read-only", "reviewer", "docs/x.md", "write-not-allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := refusalCode(t, role(t, p, tt.role).CheckWrite(tt.path)); got != tt.want {
				t.Errorf("%s.CheckWrite(%q) = %q, want %q", tt.role, tt.path, got, tt.want)
			}
		})
	}
}

func TestEnvAllowlist(t *testing.T) {
	p := defaults(t)
	env := role(t, p, "implementer").EnvAllowlist()
	if !slices.Contains(env, "GOFLAGS") {
		t.Errorf("implementer env %v lacks GOFLAGS", env)
	}
	env[0] = "MUTATED"
	if role(t, p, "implementer").EnvAllowlist()[0] == "MUTATED" {
		t.Error("EnvAllowlist returned the role's own slice")
	}
	if got := role(t, p, "reviewer").EnvAllowlist(); len(got) != 0 {
		t.Errorf("reviewer env %v", got)
	}
}
