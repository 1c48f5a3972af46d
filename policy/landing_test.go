package policy_test

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
)

func TestTargetAllowed(t *testing.T) {
	l := defaults(t).Landing()
	tests := []struct {
		target string
		want   string
	}{
		{"main", ""},
		{"refs/heads/main", ""},
		{"Main", "target-not-allowed"},
		{"master", "target-not-allowed"},
		{"main2", "target-not-allowed"},
		{"refs/tags/main", "target-not-allowed"},
		{"", "target-not-allowed"},
		{"work/t-1", "target-not-allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			if got := refusalCode(t, l.TargetAllowed(tt.target)); got != tt.want {
				t.Errorf("TargetAllowed(%q) = %q, want %q", tt.target, got, tt.want)
			}
		})
	}
}

func TestLandingBasics(t *testing.T) {
	l := defaults(t).Landing()
	if l.RequiredOption() != "merge" || l.RequiredVerdict() != "approve" {
		t.Errorf("required option %q verdict %q", l.RequiredOption(), l.RequiredVerdict())
	}
	gate := l.Gate()
	if len(gate) == 0 || gate[0].Timeout <= 0 || len(gate[0].Argv) == 0 || gate[0].Name == "" {
		t.Fatalf("gate %+v", gate)
	}
	gate[0].Argv[0] = "MUTATED"
	if l.Gate()[0].Argv[0] == "MUTATED" {
		t.Error("Gate returned the policy's own slice")
	}
	sl := l.SizeLimits()
	if sl.MaxFiles <= 0 || sl.MaxChangedLines <= 0 || sl.MaxFileBytes <= 0 {
		t.Errorf("size limits %+v", sl)
	}
	checks := map[string][]string{
		"cmd/main.go":     {"gofmt"},
		"main.go":         {"gofmt"},
		"scripts/x.sh":    {"bash"},
		"web/app.js":      {"node"},
		"roles/x.json":    {"python3"},
		"docs/readme.txt": nil,
	}
	for p, want := range checks {
		var got []string
		for _, c := range l.SyntaxChecksFor(p) {
			got = append(got, c.Argv[0])
			if c.Timeout <= 0 || !c.IfPresent {
				t.Errorf("%s: check %+v", p, c)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("SyntaxChecksFor(%q) = %v, want %v", p, got, want)
		}
	}
}

// exists is a target tree for CheckChanges: the files and folders it holds.
func exists(paths ...string) func(string) bool {
	return func(p string) bool { return slices.Contains(paths, p) }
}

func TestCheckChanges(t *testing.T) {
	l := defaults(t).Landing()
	target := exists("README.md", "go.mod", "pkg", "docs", "src", "v1", "lib")
	tests := []struct {
		name    string
		changes []policy.Change
		want    []string // refusal codes, in order
	}{
		{"modify existing", []policy.Change{{Status: 'M', Path: "pkg/x.go"}}, nil},
		{"add under existing dir", []policy.Change{{Status: 'A', Path: "pkg/new.go"}}, nil},
		{"add deep under existing dir", []policy.Change{{Status: 'A', Path: "docs/a/b/c.md"}}, nil},
		{"modify root file", []policy.Change{{Status: 'M', Path: "README.md"}}, nil},
		{"add root file", []policy.Change{{Status: 'A', Path: "NOTES.txt"}}, []string{"adds-root-file"}},
		{"add root file existing at target", []policy.Change{{Status: 'A', Path: "go.mod"}}, nil},
		{"add ./root file", []policy.Change{{Status: 'A', Path: "./x"}}, []string{"adds-root-file"}},
		{"add new top-level dir", []policy.Change{{Status: 'A', Path: "tools/gen.go"}}, []string{"adds-top-level-dir"}},
		{"add a/../newdir", []policy.Change{{Status: 'A', Path: "pkg/../tools/x"}}, []string{"adds-top-level-dir"}},
		{"case-only new dir", []policy.Change{{Status: 'A', Path: "Pkg/x.go"}}, []string{"adds-top-level-dir"}},
		{"add src", []policy.Change{{Status: 'A', Path: "src/x"}}, []string{"forbidden-path"}},
		{"modify src", []policy.Change{{Status: 'M', Path: "src/main.c"}}, []string{"forbidden-path"}},
		{"delete src", []policy.Change{{Status: 'D', Path: "src/main.c"}}, []string{"forbidden-path"}},
		{"./src/x", []policy.Change{{Status: 'M', Path: "./src/x"}}, []string{"forbidden-path"}},
		{"SRC/x case-insensitive", []policy.Change{{Status: 'M', Path: "SRC/x"}}, []string{"forbidden-path"}},
		{"Src/x mixed case", []policy.Change{{Status: 'A', Path: "Src/x"}}, []string{"forbidden-path"}},
		{"a/../src/x", []policy.Change{{Status: 'M', Path: "a/../src/x"}}, []string{"forbidden-path"}},
		{"v1 nested", []policy.Change{{Status: 'M', Path: "v1/a/b/c.go"}}, []string{"forbidden-path"}},
		{"src as a file", []policy.Change{{Status: 'A', Path: "src"}}, []string{"forbidden-path"}},
		{"srcx is allowed name", []policy.Change{{Status: 'M', Path: "lib/srcx.go"}}, nil},
		{"nested src is not top src", []policy.Change{{Status: 'M', Path: "lib/src/x.go"}}, nil},
		{"rename into src", []policy.Change{{Status: 'R', OldPath: "lib/x.go", Path: "src/x.go"}}, []string{"forbidden-path"}},
		{"rename into SRC", []policy.Change{{Status: 'R', OldPath: "lib/x.go", Path: "SRC/x.go"}}, []string{"forbidden-path"}},
		{"rename out of src", []policy.Change{{Status: 'R', OldPath: "src/x.go", Path: "lib/x.go"}}, []string{"forbidden-path"}},
		{"rename within allowed", []policy.Change{{Status: 'R', OldPath: "lib/x.go", Path: "pkg/x.go"}}, nil},
		{"rename to new root file", []policy.Change{{Status: 'R', OldPath: "lib/x.go", Path: "x.go"}}, []string{"adds-root-file"}},
		{"copy out of src is fine", []policy.Change{{Status: 'C', OldPath: "src/x.go", Path: "lib/x.go"}}, nil},
		{"symlink into src", []policy.Change{{Status: 'A', Path: "lib/link", NewMode: "120000", LinkTarget: "../src/secret"}}, []string{"forbidden-path"}},
		{"symlink into SRC", []policy.Change{{Status: 'A', Path: "lib/link", NewMode: "120000", LinkTarget: "../SRC"}}, []string{"forbidden-path"}},
		{"symlink to src dir", []policy.Change{{Status: 'A', Path: "lib/link", NewMode: "120000", LinkTarget: "../src"}}, []string{"forbidden-path"}},
		{"symlink absolute", []policy.Change{{Status: 'A', Path: "lib/link", NewMode: "120000", LinkTarget: "/etc/passwd"}}, []string{"forbidden-path"}},
		{"symlink escapes", []policy.Change{{Status: 'A', Path: "lib/link", NewMode: "120000", LinkTarget: "../../outside"}}, []string{"forbidden-path"}},
		{"symlink to .git", []policy.Change{{Status: 'A', Path: "lib/link", NewMode: "120000", LinkTarget: "../.git/config"}}, []string{"forbidden-path"}},
		{"symlink fine", []policy.Change{{Status: 'A', Path: "lib/link", NewMode: "120000", LinkTarget: "x.go"}}, nil},
		{"type change to symlink into src", []policy.Change{{Status: 'T', Path: "lib/x", OldMode: "100644", NewMode: "120000", LinkTarget: "../src/x"}}, []string{"forbidden-path"}},
		{"modified symlink into v1", []policy.Change{{Status: 'M', Path: "lib/l", OldMode: "120000", NewMode: "120000", LinkTarget: "../v1"}}, []string{"forbidden-path"}},
		{"escape path", []policy.Change{{Status: 'A', Path: "../x"}}, []string{"forbidden-path"}},
		{"absolute path", []policy.Change{{Status: 'A', Path: "/etc/x"}}, []string{"forbidden-path"}},
		{".git path", []policy.Change{{Status: 'A', Path: "lib/.git/hooks/x"}}, []string{"forbidden-path"}},
		{"several problems", []policy.Change{
			{Status: 'A', Path: "NEW"},
			{Status: 'M', Path: "src/a"},
			{Status: 'A', Path: "tools/x"},
			{Status: 'M', Path: "pkg/ok.go"},
		}, []string{"adds-root-file", "forbidden-path", "adds-top-level-dir"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			refusals := l.CheckChanges(tt.changes, target)
			var got []string
			for _, r := range refusals {
				got = append(got, string(r.Code))
				if r.Reason == "" || r.Fix == "" {
					t.Errorf("refusal without reason or fix: %+v", r)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("CheckChanges = %v, want %v (%v)", got, tt.want, refusals)
			}
		})
	}
}

func TestCheckChangesNilExists(t *testing.T) {
	l := defaults(t).Landing()
	got := l.CheckChanges([]policy.Change{{Status: 'A', Path: "x"}, {Status: 'A', Path: "d/x"}, {Status: 'M', Path: "d/y"}}, nil)
	if len(got) != 2 || got[0].Code != "adds-root-file" || got[1].Code != "adds-top-level-dir" {
		t.Errorf("got %v", got)
	}
	if !strings.Contains(got[1].Reason, "d/") {
		t.Errorf("reason should name the folder: %q", got[1].Reason)
	}
}

func TestCleanPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a/b", "a/b"},
		{"./a", "a"},
		{"a//b", "a/b"},
		{"a/./b/", "a/b"},
		{"a/../b", "b"},
		{"..", ""},
		{"../a", ""},
		{"a/../..", ""},
		{"/a", ""},
		{`\a`, ""},
		{"C:/x", ""},
		{"", ""},
		{".", ""},
		{".git", ""},
		{"a/.Git/x", ""},
		{".git ", ""},
		{".gitattributes", ".gitattributes"},
		{"a\x00b", ""},
	}
	for _, tt := range tests {
		got, err := policy.CleanPath(tt.in)
		if (err != nil) != (tt.want == "") || got != tt.want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestRecordRules(t *testing.T) {
	t.Parallel()
	if r := withPolicy(t, `{"landing": {}}`).Landing().Record(); r != (policy.RecordRules{Mode: policy.RecordFiles, BuildLog: "BUILD-LOG.md", Current: "CURRENT.md"}) {
		t.Errorf("defaults %+v", r)
	}
	if r := withPolicy(t, `{"landing": {"record": {"mode": "commit", "buildLog": "docs/BUILD-LOG.md"}}}`).Landing().Record(); r.Mode != policy.RecordCommit || r.BuildLog != "docs/BUILD-LOG.md" || r.Current != "CURRENT.md" {
		t.Errorf("set %+v", r)
	}
	for name, tc := range map[string]struct{ json, field string }{
		"mode":      {`{"mode": "push"}`, "landing.record.mode"},
		"absolute":  {`{"buildLog": "/etc/passwd"}`, "landing.record.buildLog"},
		"dotdot":    {`{"current": "../outside.md"}`, "landing.record.current"},
		"unclean":   {`{"current": "docs//x.md"}`, "landing.record.current"},
		"git":       {`{"buildLog": ".git/hooks/post-commit"}`, "landing.record.buildLog"},
		"git-case":  {`{"buildLog": ".GIT/config"}`, "landing.record.buildLog"},
		"control":   {`{"buildLog": "log\u001b.md"}`, "landing.record.buildLog"},
		"same file": {`{"buildLog": "X.md", "current": "X.md"}`, "landing.record.current"},
		"unknown":   {`{"mode": "files", "path": "x"}`, "landing.record.path"},
	} {
		_, err := policy.LoadFS(roles.FS, fstest.MapFS{policy.PolicyFile: {Data: []byte(`{"landing": {"record": ` + tc.json + `}}`)}}, "repo/roles")
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want a problem naming %s", name, err, tc.field)
		}
	}
}
