package policy_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	b, err := fs.ReadFile(roles.FS, "contract.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("contract.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("contract.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func schemaValid(t *testing.T, s *jsonschema.Schema, data []byte) error {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return s.Validate(inst)
}

// TestShippedContractsMatchSchema validates every default contract against
// roles/contract.schema.json (and, by loading them, against package policy).
func TestShippedContractsMatchSchema(t *testing.T) {
	s := compileSchema(t)
	files, err := fs.Glob(roles.FS, "*.json")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".schema.json") {
			continue
		}
		n++
		b, err := fs.ReadFile(roles.FS, f)
		if err != nil {
			t.Fatal(err)
		}
		if err := schemaValid(t, s, b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if n < 4 {
		t.Errorf("only %d contracts shipped", n)
	}
	defaults(t)
}

// TestSchemaAndPolicyAgree mutates complete contracts and checks that the
// schema and package policy both reject (or both accept) each one.
func TestSchemaAndPolicyAgree(t *testing.T) {
	s := compileSchema(t)
	base := func(t *testing.T, name string) map[string]any {
		b, err := fs.ReadFile(roles.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	tests := []struct {
		name   string
		file   string
		mutate func(m map[string]any)
		valid  bool
	}{
		{"unchanged implementer", "implementer.json", func(map[string]any) {}, true},
		{"unknown field", "implementer.json", func(m map[string]any) { m["toolz"] = []any{} }, false},
		{"wrong type", "implementer.json", func(m map[string]any) { m["limits"] = map[string]any{"maxSteps": "9"} }, false},
		{"unknown tool", "reviewer.json", func(m map[string]any) { m["tools"] = []any{"read_file", "shell"} }, false},
		{"empty argv", "implementer.json", func(m map[string]any) { m["commands"] = []any{[]any{}} }, false},
		{"empty argv entry", "implementer.json", func(m map[string]any) { m["commands"] = []any{[]any{"go", ""}} }, false},
		{"commands without run_command", "reviewer.json", func(m map[string]any) { m["commands"] = []any{[]any{"go", "test"}} }, false},
		{"run_command without commands", "implementer.json", func(m map[string]any) { delete(m, "commands") }, false},
		{"doc harness runs commands", "doc-writer.json", func(m map[string]any) {
			m["tools"] = []any{"read_file", "write_file", "run_command"}
			m["commands"] = []any{[]any{"make", "docs"}}
		}, false},
		{"review harness writes", "reviewer.json", func(m map[string]any) { m["tools"] = []any{"read_file", "write_file"} }, false},
		{"bad sandbox", "reviewer.json", func(m map[string]any) { m["sandbox"] = "podman" }, false},
		{"negative limit", "reviewer.json", func(m map[string]any) { m["limits"] = map[string]any{"maxSteps": -1} }, false},
		{"version 2", "reviewer.json", func(m map[string]any) { m["contractVersion"] = 2 }, false},
		{"gate without timeout", "conductor-policy.json", func(m map[string]any) {
			m["landing"].(map[string]any)["gate"] = []any{map[string]any{"name": "t", "argv": []any{"make"}}}
		}, false},
		{"verdict", "conductor-policy.json", func(m map[string]any) { m["landing"].(map[string]any)["requiredVerdict"] = "lgtm" }, false},
		{"absolute forbidden path", "conductor-policy.json", func(m map[string]any) {
			m["landing"].(map[string]any)["forbiddenPaths"] = []any{"/src/**"}
		}, false},
		{"unchanged policy", "conductor-policy.json", func(map[string]any) {}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base(t, tt.file)
			tt.mutate(m)
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			schemaErr := schemaValid(t, s, b)
			// Replace the default wholly (a repository file would merge).
			defs := fstest.MapFS{}
			files, _ := fs.Glob(roles.FS, "*.json")
			for _, f := range files {
				data, err := fs.ReadFile(roles.FS, f)
				if err != nil {
					t.Fatal(err)
				}
				defs[f] = &fstest.MapFile{Data: data}
			}
			defs[tt.file] = &fstest.MapFile{Data: b}
			_, policyErr := policy.LoadFS(defs, nil, "")
			if (schemaErr == nil) != tt.valid {
				t.Errorf("schema: valid=%v, want %v (%v)", schemaErr == nil, tt.valid, schemaErr)
			}
			if (policyErr == nil) != tt.valid {
				t.Errorf("policy: valid=%v, want %v (%v)", policyErr == nil, tt.valid, policyErr)
			}
		})
	}
}
