package policy_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
)

// TestBrokenPolicies loads every broken case in testdata/policies and
// compares the full problem list with want.txt (CONDUCTOR_UPDATE=1 rewrites).
func TestBrokenPolicies(t *testing.T) {
	cases, err := filepath.Glob("../testdata/policies/*/roles")
	if err != nil || len(cases) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, dir := range cases {
		name := filepath.Base(filepath.Dir(dir))
		if name == "override" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			_, err := policy.Load(roles.FS, dir)
			var ve *policy.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want a *policy.ValidationError, got %v", err)
			}
			var b strings.Builder
			for _, p := range ve.Problems {
				b.WriteString(p.String() + "\n")
				if p.File == "" || p.Message == "" {
					t.Errorf("problem without file or message: %+v", p)
				}
			}
			golden := filepath.Join(filepath.Dir(dir), "want.txt")
			if os.Getenv("CONDUCTOR_UPDATE") != "" {
				if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if b.String() != string(want) {
				t.Errorf("problems differ from %s:\n--- got\n%s--- want\n%s", golden, b.String(), want)
			}
		})
	}
}

// TestBrokenPoliciesNameEveryProblem checks the kinds of problem the issue
// lists, independently of the golden files' wording.
func TestBrokenPoliciesNameEveryProblem(t *testing.T) {
	tests := []struct {
		dir  string
		want []string // substrings, each must appear in some problem
	}{
		{"unknown-field", []string{"implementer.json: toolz: unknown field", "implementer.json: limits.maxStep: unknown field", "conductor-policy.json: landing.forbidenPaths: unknown field"}},
		{"wrong-type", []string{"tools: want an array, got a string", "limits.maxSteps: want an integer, got a string", "limits.tokenBudget: want an integer, got 1.5", "landing.noNewRootFiles: want a boolean", "landing.gate[0].argv: want an array"}},
		{"unknown-tool", []string{`tools[1]: unknown tool "shell"`, `tools[2]: use the canonical tool name "read_file"`}},
		{"empty-allowlist-entry", []string{"commands[1]: empty argv", "commands[2][1]: empty argument", `commands[3][0]: "bash" runs arbitrary commands`}},
		{"contradictory", []string{
			`implementer.json: write.allow[0]: contradictory: "lib/**" is allowed and denied`,
			`implementer.json: write.allow[1]: contradictory: "src/**" is allowed but`,
			"doc-writer.json: tools: a doc harness never runs commands",
			"reviewer.json: commands: contradictory",
			`reviewer.json: env[0]: "GITEA_TOKEN" may hold a credential`,
		}},
		{"broken-json", []string{"implementer.json: line 3, column 11: invalid JSON", "landing.gate[0].timeoutSeconds: required and positive"}},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			_, err := policy.Load(roles.FS, filepath.Join("../testdata/policies", tt.dir, "roles"))
			if err == nil {
				t.Fatal("want an error")
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
		})
	}
}

func TestOverrideMerge(t *testing.T) {
	p, err := policy.Load(roles.FS, "../testdata/policies/override/roles")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.RoleNames(); !slices.Equal(got, []string{"doc-writer", "implementer", "reviewer", "translator"}) {
		t.Errorf("roles %v", got)
	}
	impl := role(t, p, "implementer")
	// Arrays replace wholly.
	if got := impl.Commands(); len(got) != 2 || !slices.Equal(got[1], []string{"go", "vet"}) {
		t.Errorf("commands %v", got)
	}
	if impl.CheckCommand([]string{"make", "test"}) == nil {
		t.Error("make test should be gone after the override")
	}
	// Objects merge key by key: maxSteps replaced, the rest kept.
	if impl.MaxSteps() != 12 || impl.TokenBudget() != 400000 || impl.OutputLimit() != 10240 {
		t.Errorf("limits %d %d %d", impl.MaxSteps(), impl.TokenBudget(), impl.OutputLimit())
	}
	// Untouched fields come from the default.
	if !impl.AllowsTool("write_file") || impl.SystemPrompt() == "" {
		t.Error("default fields lost in the merge")
	}
	if !strings.Contains(impl.Source(), "default/implementer.json over ../testdata/policies/override/roles/implementer.json") {
		t.Errorf("source %q", impl.Source())
	}
	tr := role(t, p, "translator")
	if tr.CheckWrite("docs/i18n/fr/x.md") != nil || tr.CheckWrite("docs/x.md") == nil {
		t.Error("translator write rules")
	}
	l := p.Landing()
	if l.TargetAllowed("release/1.2") != nil || l.TargetAllowed("release/1/2") == nil {
		t.Error("release/* target")
	}
	if g := l.Gate(); len(g) != 1 || g[0].Name != "unit" || g[0].Timeout.Seconds() != 120 {
		t.Errorf("gate %+v", g)
	}
	// Kept from the default policy file.
	if l.RequiredOption() != "merge" || !l.IsForbidden("v1/x") {
		t.Error("landing defaults lost in the merge")
	}
}

func TestLoadFSEdgeCases(t *testing.T) {
	tests := []struct {
		name string
		repo fstest.MapFS
		want string // substring of the error, "" = ok
	}{
		{"empty repo folder", fstest.MapFS{}, ""},
		{"schema file ignored", fstest.MapFS{"contract.schema.json": {Data: []byte("not json")}}, ""},
		{"subfolder ignored", fstest.MapFS{"sub/x.json": {Data: []byte("not json")}}, ""},
		{"role name mismatch", fstest.MapFS{"qa.json": {Data: []byte(`{"contractVersion":1,"role":"other","harness":"review","systemPrompt":"x","tools":["grep"]}`)}}, `role: "other" does not match the file name qa.json`},
		{"new role missing fields", fstest.MapFS{"qa.json": {Data: []byte(`{}`)}}, "qa.json: contractVersion: want 1"},
		{"null value", fstest.MapFS{"reviewer.json": {Data: []byte(`{"tools": null}`)}}, "tools: null is not allowed"},
		{"top-level array", fstest.MapFS{"reviewer.json": {Data: []byte(`[]`)}}, "want a JSON object at the top level"},
		{"trailing data", fstest.MapFS{"reviewer.json": {Data: []byte(`{} {}`)}}, "trailing data"},
		{"empty file", fstest.MapFS{"reviewer.json": {Data: nil}}, "empty file"},
		{"bad sandbox", fstest.MapFS{"reviewer.json": {Data: []byte(`{"sandbox":"podman"}`)}}, `unknown sandbox "podman"`},
		{"negative limit", fstest.MapFS{"reviewer.json": {Data: []byte(`{"limits":{"maxSteps":-1}}`)}}, "limits.maxSteps: must not be negative"},
		{"memory too small", fstest.MapFS{"implementer.json": {Data: []byte(`{"limits":{"memoryBytes":1048576}}`)}}, "limits.memoryBytes: 1048576"},
		{"memory negative", fstest.MapFS{"implementer.json": {Data: []byte(`{"limits":{"memoryBytes":-1}}`)}}, "limits.memoryBytes: -1"},
		{"memory 2 GiB", fstest.MapFS{"implementer.json": {Data: []byte(`{"limits":{"memoryBytes":2147483648}}`)}}, ""},
		{"write without write tools", fstest.MapFS{"reviewer.json": {Data: []byte(`{"write":{"allow":["docs/**"]}}`)}}, "write.allow: contradictory"},
		{"write tools without rules", fstest.MapFS{"qa.json": {Data: []byte(`{"contractVersion":1,"role":"qa","harness":"code","systemPrompt":"x","tools":["write_file"]}`)}}, "may write nothing"},
		{"bad glob", fstest.MapFS{"doc-writer.json": {Data: []byte(`{"write":{"allow":["/abs/**","a/[x"]}}`)}}, "write.allow[0]"},
		{"forbid everything", fstest.MapFS{"conductor-policy.json": {Data: []byte(`{"landing":{"forbiddenPaths":["**"]}}`)}}, "forbids every path"},
		{"reject option", fstest.MapFS{"conductor-policy.json": {Data: []byte(`{"landing":{"requiredOption":"reject"}}`)}}, "landing.requiredOption: contradictory"},
		{"verdict", fstest.MapFS{"conductor-policy.json": {Data: []byte(`{"landing":{"requiredVerdict":"lgtm"}}`)}}, "landing.requiredVerdict"},
		{"duplicate gate", fstest.MapFS{"conductor-policy.json": {Data: []byte(`{"landing":{"gate":[{"name":"a","argv":["x"],"timeoutSeconds":1},{"name":"a","argv":["y"],"timeoutSeconds":1}]}}`)}}, "landing.gate[1].name"},
		{"target refs", fstest.MapFS{"conductor-policy.json": {Data: []byte(`{"landing":{"targets":["refs/heads/main"]}}`)}}, "without refs/heads/"},
		{"syntax check empty argv", fstest.MapFS{"conductor-policy.json": {Data: []byte(`{"review":{"syntaxChecks":[{"glob":"*.go","argv":[]}]}}`)}}, "review.syntaxChecks[0].argv"},
		{"env secret", fstest.MapFS{"implementer.json": {Data: []byte(`{"env":["OPENAI_API_KEY","LD_PRELOAD","GOFLAGS"]}`)}}, `env[1]: "LD_PRELOAD"`},
		{"duplicate tool", fstest.MapFS{"reviewer.json": {Data: []byte(`{"tools":["grep","grep"]}`)}}, `tools[1]: tool "grep" listed twice`},
		{"shell string", fstest.MapFS{"implementer.json": {Data: []byte(`{"commands":[["go test ./..."]]}`)}}, "looks like a shell string"},
		{"denied args without run_command", fstest.MapFS{"reviewer.json": {Data: []byte(`{"deniedArgs":["-x"]}`)}}, "deniedArgs: contradictory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.LoadFS(roles.FS, tt.repo, "repo")
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestLoadBadDir(t *testing.T) {
	if _, err := policy.Load(roles.FS, filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing dir: %v", err)
	}
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Load(roles.FS, f); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Errorf("file: %v", err)
	}
	if _, err := policy.LoadFS(fstest.MapFS{}, nil, ""); err == nil || !strings.Contains(err.Error(), "no conductor-policy.json") {
		t.Errorf("no policy: %v", err)
	}
}

// FuzzLoad feeds arbitrary bytes as a repository's contract files: loading
// must never panic, and a failure is always a *ValidationError naming a file.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"commands": [["go", "test"]], "limits": {"maxSteps": 3}}`), []byte(`{"landing": {"targets": ["main"]}}`))
	f.Add([]byte(`{"tools": null}`), []byte(`{"landing": {"gate": [{"name": "", "argv": [""]}]}}`))
	f.Add([]byte(`[`), []byte(`{"review": {"syntaxChecks": [{"glob": "a/[", "argv": ["x"]}]}}`))
	f.Fuzz(func(t *testing.T, role, pol []byte) {
		p, err := policy.LoadFS(roles.FS, fstest.MapFS{
			"implementer.json":      {Data: role},
			"conductor-policy.json": {Data: pol},
		}, "repo")
		if err != nil {
			var ve *policy.ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("error %T %v", err, err)
			}
			for _, pr := range ve.Problems {
				if pr.File == "" || pr.Message == "" {
					t.Fatalf("problem %+v", pr)
				}
			}
			return
		}
		r, err := p.Role("implementer")
		if err != nil {
			t.Fatal(err)
		}
		_ = r.CheckCommand([]string{"go", "test"})
		_ = r.CheckWrite("pkg/x.go")
		_ = p.Landing().CheckChanges([]policy.Change{{Status: 'A', Path: "x/y"}}, nil)
	})
}

// TestLoadCachesByContent: the same files give the same Policy without
// parsing again; any change to a file (the same size, even), a new file
// or another label gives a newly parsed one; a broken folder is parsed
// (and refused) every time, and once fixed loads.
func TestLoadCachesByContent(t *testing.T) {
	dir := t.TempDir()
	impl := `{"role": "implementer", "limits": {"maxSteps": 12}}`
	if err := os.WriteFile(filepath.Join(dir, "implementer.json"), []byte(impl), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := policy.Load(roles.FS, dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := policy.Load(roles.FS, dir)
	if err != nil || a != b {
		t.Fatalf("the same files parsed again (%p, %p, %v)", a, b, err)
	}
	same := strings.Replace(impl, "12", "13", 1) // same size
	os.WriteFile(filepath.Join(dir, "implementer.json"), []byte(same), 0o644)
	c, err := policy.Load(roles.FS, dir)
	if err != nil || c == a || role(t, c, "implementer").MaxSteps() != 13 {
		t.Fatalf("a changed file was not parsed again: %v", err)
	}
	if d, err := policy.LoadRepo(roles.FS, dir); err != nil || d == c {
		t.Fatalf("a repository's folder shares the operator's policy: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "reviewer.json"), []byte(`{"role": "reviewer", "maxSteps": "x"}`), 0o644)
	for i := 0; i < 2; i++ {
		if _, err := policy.Load(roles.FS, dir); err == nil || !strings.Contains(err.Error(), "reviewer.json") {
			t.Fatalf("load %d of a broken folder: %v", i, err)
		}
	}
	os.Remove(filepath.Join(dir, "reviewer.json"))
	if e, err := policy.Load(roles.FS, dir); err != nil || e != c {
		t.Fatalf("after the fix: %v (same policy as before the break: %v)", err, e == c)
	}
}
