package runtask

import (
	"slices"
	"strings"
	"testing"
)

const validTask = `{"taskVersion":1,"id":"t-worker-x","prompt":"do it","workspace":"stack-repo",
 "capabilities":{"tools":["read","write","edit","bash"]},"session":"worker-1","timeoutSeconds":600}`

func TestParseTask(t *testing.T) {
	replace := func(old, new string) string { return strings.Replace(validTask, old, new, 1) }
	tests := []struct {
		name    string
		body    string
		wantErr string // substring; "" means valid
	}{
		{"seed template", validTask, ""},
		{"canonical tools", replace(`"read","write","edit","bash"`, `"read_file","grep","list_dir","write_file","edit_file","run_command"`), ""},
		{"optional fields", replace(`"timeoutSeconds":600`, `"timeoutSeconds":600,"role":"implementer","model":"replay:x.json","base":"main","brief":"b.md","maxSteps":5,"tokenBudget":1000,"pr":true,"issue":4,"harness":"h"`), ""},
		{"pr on-success", replace(`"timeoutSeconds":600`, `"timeoutSeconds":600,"pr":"on-success"`), ""},
		{"pr never", replace(`"timeoutSeconds":600`, `"timeoutSeconds":600,"pr":"never"`), ""},
		{"pr unknown", replace(`"timeoutSeconds":600`, `"timeoutSeconds":600,"pr":"sometimes"`), `task.json: pr: want true, false, "on-success" or "never", got "sometimes"`},
		{"unknown field", replace(`"id"`, `"colour":"red","id"`), `task.json: colour: unknown field`},
		{"unknown nested field", replace(`{"tools"`, `{"shell":true,"tools"`), `task.json: capabilities.shell: unknown field`},
		{"unknown tool", replace(`"edit","bash"`, `"edit","shell"`), `task.json: capabilities.tools[3]: unknown tool "shell"`},
		{"wrong type", replace(`"timeoutSeconds":600`, `"timeoutSeconds":"600"`), `task.json: timeoutSeconds: wrong type: want an integer, got string`},
		{"wrong type in array", replace(`"read","write"`, `"read",7`), `task.json: capabilities.tools[1]: wrong type`},
		{"fractional number", replace(`"timeoutSeconds":600`, `"timeoutSeconds":1.5`), `timeoutSeconds: wrong type`},
		{"missing required", replace(`"session":"worker-1",`, ``), `task.json: session: required field missing`},
		{"missing capabilities.tools", replace(`{"tools":["read","write","edit","bash"]}`, `{}`), `capabilities.tools: required field missing`},
		{"null", replace(`"prompt":"do it"`, `"prompt":null`), `prompt: must not be null`},
		{"version 2", replace(`"taskVersion":1`, `"taskVersion":2`), `taskVersion: unsupported version 2`},
		{"version 2 with future fields", replace(`"taskVersion":1`, `"taskVersion":2,"future":1`), `future: unknown field`},
		{"not an object", `[1,2]`, `task.json: want a JSON object, got an array`},
		{"malformed", `{"taskVersion":1,`, `task.json: line 1, column 18: not valid JSON: unexpected end of the file`},
		{"trailing data", validTask + `{}`, `trailing data`},
		{"duplicate key", replace(`"id":"t-worker-x"`, `"id":"a","id":"b"`), `id: duplicate field`},
		{"empty prompt", replace(`"prompt":"do it"`, `"prompt":"  "`), `prompt: must not be empty`},
		{"bad session", replace(`"session":"worker-1"`, `"session":"../x"`), `session: "../x" is not a valid name`},
		{"zero timeout", replace(`"timeoutSeconds":600`, `"timeoutSeconds":0`), `timeoutSeconds: must be a positive`},
		{"no tools", replace(`"read","write","edit","bash"`, ``), `capabilities.tools: must list at least one tool`},
		{"option-like base", replace(`"timeoutSeconds":600`, `"timeoutSeconds":600,"base":"--upload-pack=x"`), `base:`},
		{"negative steps", replace(`"timeoutSeconds":600`, `"timeoutSeconds":600,"maxSteps":-1`), `maxSteps: must not be negative`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTask("task.json", []byte(tc.body))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestTaskTools(t *testing.T) {
	tests := []struct {
		in   []string
		want []string
	}{
		{[]string{"read"}, []string{ToolReadFile, ToolGrep, ToolListDir}},
		{[]string{"bash", "edit"}, []string{ToolEditFile, ToolRunCommand}},
		{[]string{"write", "write_file", "grep"}, []string{ToolWriteFile, ToolGrep}},
		{[]string{"read", "write", "edit", "bash"}, CanonicalTools},
	}
	for _, tc := range tests {
		got := Task{Capabilities: Capabilities{Tools: tc.in}}.Tools()
		if !slices.Equal(got, tc.want) {
			t.Errorf("Tools(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func FuzzParseTask(f *testing.F) {
	f.Add([]byte(validTask))
	f.Add([]byte(`{"taskVersion":1}`))
	f.Add([]byte(`{"capabilities":{"tools":[1]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		task, err := ParseTask("f.json", b)
		if err == nil {
			if verr := task.Validate(); verr != nil {
				t.Fatalf("parsed task fails Validate: %v", verr)
			}
		}
	})
}
