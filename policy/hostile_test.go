package policy_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
)

// withPolicy loads the defaults with a repository conductor-policy.json
// holding json.
func withPolicy(t *testing.T, json string) *policy.Policy {
	t.Helper()
	p, err := policy.LoadFS(roles.FS, fstest.MapFS{policy.PolicyFile: {Data: []byte(json)}}, "repo/roles")
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return p
}

func codes(rs []*refusal.Refusal) []string {
	var out []string
	for _, r := range rs {
		out = append(out, string(r.Code))
	}
	return out
}

// TestCheckChangesUnicodeFold: with caseInsensitivePaths, a path matches a
// forbidden pattern under full Unicode case folding and NFC normalisation
// (issue 16 item 5): strings.ToLower does not fold ſ to s, K (Kelvin) is
// lower-cased but ß is not expanded, and a Turkish i must not slip through.
func TestCheckChangesUnicodeFold(t *testing.T) {
	l := withPolicy(t, `{"landing": {"forbiddenPaths": ["lib/secret/**", "lib/key/**", "lib/strasse/**", "lib/mix/**", "lib/café/**", "lib/Straße/**"],
		"caseInsensitivePaths": true}}`).Landing()
	tree := exists("lib")
	forbidden := []string{
		"lib/secret/x.txt",
		"lib/SECRET/x.txt",
		"lib/ſecret/x.txt",       // U+017F LATIN SMALL LETTER LONG S
		"lib/ſECRET/x.txt",       //
		"lib/\u212Aey/x.txt",     // U+212A KELVIN SIGN
		"lib/straße/x.txt",       // ß folds to ss
		"lib/STRAẞE/x.txt",       // U+1E9E capital sharp s
		"lib/mİx/x.txt",          // U+0130 dotted capital I
		"lib/mıx/x.txt",          // U+0131 dotless small i
		"lib/MIX/x.txt",          //
		"lib/cafe\u0301/x.txt",   // NFD é
		"lib/CAFÉ/x.txt",         //
		"lib/se\u200ccret/x.txt", // an HFS+-ignorable code point
	}
	for _, p := range forbidden {
		t.Run(p, func(t *testing.T) {
			got := codes(l.CheckChanges([]policy.Change{{Status: 'A', Path: p}}, tree))
			if !slices.Contains(got, "forbidden-path") {
				t.Errorf("CheckChanges(%q) = %v, want forbidden-path", p, got)
			}
		})
	}
	for _, p := range []string{"lib/secrets.txt", "lib/keys/x", "lib/other/ſ.txt", "lib/mi/x"} {
		if got := l.CheckChanges([]policy.Change{{Status: 'A', Path: p}}, tree); len(got) != 0 {
			t.Errorf("CheckChanges(%q) = %v, want nothing", p, got)
		}
	}
	// Without caseInsensitivePaths only exact (NFC) spellings match.
	cs := withPolicy(t, `{"landing": {"forbiddenPaths": ["lib/secret/**", "lib/café/**"], "caseInsensitivePaths": false}}`).Landing()
	if got := cs.CheckChanges([]policy.Change{{Status: 'A', Path: "lib/ſecret/x"}}, tree); len(got) != 0 {
		t.Errorf("case-sensitive: lib/ſecret/x = %v, want nothing", got)
	}
	if got := codes(cs.CheckChanges([]policy.Change{{Status: 'A', Path: "lib/cafe\u0301/x"}}, tree)); !slices.Equal(got, []string{"forbidden-path"}) {
		t.Errorf("case-sensitive: NFD café = %v, want forbidden-path", got)
	}
	// A role's write.deny folds the same way.
	impl := role(t, defaults(t), "implementer")
	for _, p := range []string{"ROLES/x.json", "roleſ/x.json", ".GITHUB/workflows/x.yml", ".gitmodule\u017F"} {
		if impl.MayWrite(p) {
			t.Errorf("implementer may write %q", p)
		}
	}
}

// TestCheckChangesUnsafeNames: a path with control characters or invalid
// UTF-8, on either side of a change, is unsafe-path-name.
func TestCheckChangesUnsafeNames(t *testing.T) {
	l := defaults(t).Landing()
	tree := exists("lib")
	for name, ch := range map[string]policy.Change{
		"escape":          {Status: 'A', Path: "lib/a\x1b]52;c;aGk=\x07.txt"},
		"newline":         {Status: 'A', Path: "lib/a\nb.txt"},
		"tab":             {Status: 'M', Path: "lib/a\tb.txt"},
		"del":             {Status: 'D', Path: "lib/a\x7f"},
		"c1":              {Status: 'A', Path: "lib/a\u009b2J"},
		"invalid utf-8":   {Status: 'A', Path: "lib/\xff\xfe.txt"},
		"rename from bad": {Status: 'R', OldPath: "lib/\x1b[2J", Path: "lib/ok.txt"},
		"bidi override":   {Status: 'A', Path: "lib/txt.\u202egnp"},
		"link target":     {Status: 'A', Path: "lib/l", NewMode: "120000", LinkTarget: "a\x1b[2Jb"},
	} {
		t.Run(name, func(t *testing.T) {
			rs := l.CheckChanges([]policy.Change{ch}, tree)
			if !slices.Contains(codes(rs), "unsafe-path-name") {
				t.Fatalf("got %v, want unsafe-path-name", rs)
			}
			for _, r := range rs {
				if why := policy.UnsafeName(r.Reason + r.Fix); why != "" {
					t.Errorf("refusal text %s: %q", why, r.Reason)
				}
			}
		})
	}
	// The write tools refuse such a name before it exists.
	impl := role(t, defaults(t), "implementer")
	for _, p := range []string{"lib/a\x1b[2J", "lib/\xff", "lib/a\u202eb"} {
		if got := refusalCode(t, impl.CheckWrite(p)); got != "write-not-allowed" {
			t.Errorf("CheckWrite(%q) = %q, want write-not-allowed", p, got)
		}
	}
	if rs := l.CheckChanges([]policy.Change{{Status: 'A', Path: "lib/café ünïcode.txt"}}, tree); len(rs) != 0 {
		t.Errorf("ordinary non-ASCII name refused: %v", rs)
	}
}

// TestCheckChangesPolicyFiles: roles/**, .ci/** and the policy file are
// forbidden by default, and a change to roles/** needs landing.policyChanges
// even when a repository drops roles/** from forbiddenPaths (issue 14 item
// 4, issue 16 item 4).
func TestCheckChangesPolicyFiles(t *testing.T) {
	def := defaults(t).Landing()
	tree := exists("lib", "roles", ".ci")
	for _, tt := range []struct {
		l    *policy.Landing
		name string
		ch   policy.Change
		want []string
	}{
		{def, "modify role", policy.Change{Status: 'M', Path: "roles/implementer.json"}, []string{"forbidden-path", "policy-change"}},
		{def, "modify policy", policy.Change{Status: 'M', Path: "roles/conductor-policy.json"}, []string{"forbidden-path", "policy-change"}},
		{def, "add ci", policy.Change{Status: 'A', Path: ".ci/run.sh"}, []string{"forbidden-path"}},
		{def, "rename out of roles", policy.Change{Status: 'R', OldPath: "roles/implementer.json", Path: "lib/x.json"}, []string{"forbidden-path", "policy-change"}},
		{def, "mode change", policy.Change{Status: 'M', Path: "roles/x.json", OldMode: "100644", NewMode: "100755"}, []string{"forbidden-path", "policy-change"}},
		{def, "ordinary", policy.Change{Status: 'M', Path: "lib/roles.go"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := codes(tt.l.CheckChanges([]policy.Change{tt.ch}, tree)); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	// A repository policy that narrows forbiddenPaths still cannot let a
	// roles change through...
	narrowed := withPolicy(t, `{"landing": {"forbiddenPaths": ["src/**"]}}`).Landing()
	for _, p := range []string{"roles/implementer.json", "ROLES/implementer.json", "roles/new-role.json"} {
		if got := codes(narrowed.CheckChanges([]policy.Change{{Status: 'A', Path: p}}, tree)); !slices.Equal(got, []string{"policy-change"}) {
			t.Errorf("narrowed: %s = %v, want [policy-change]", p, got)
		}
	}
	// ...only the explicit permission does.
	open := withPolicy(t, `{"landing": {"forbiddenPaths": ["src/**"], "policyChanges": true}}`).Landing()
	if got := open.CheckChanges([]policy.Change{{Status: 'M', Path: "roles/implementer.json"}}, tree); len(got) != 0 {
		t.Errorf("policyChanges true: got %v", got)
	}
	if def.Rules().Landing.PolicyChanges {
		t.Error("policyChanges must be off by default")
	}
	for _, p := range []string{"roles/**", ".ci/**"} {
		if !slices.Contains(def.ForbiddenPaths(), p) {
			t.Errorf("default forbiddenPaths %v lack %s", def.ForbiddenPaths(), p)
		}
	}
}

// linkTree is a tree with regular paths and symlinks.
func linkTree(paths []string, links map[string]string) policy.Tree {
	return policy.Tree{
		Exists: func(p string) bool {
			_, ok := links[p]
			return ok || slices.Contains(paths, p)
		},
		Link: func(p string) (string, bool) { t, ok := links[p]; return t, ok },
	}
}

// TestCheckChangesSymlinkChains: a new link is resolved through the tree's
// links and the diff's own links (bounded) before the rules see it (issue
// 16 item 6).
func TestCheckChangesSymlinkChains(t *testing.T) {
	l := defaults(t).Landing()
	tree := linkTree([]string{"docs", "src", "lib", "src/keep.txt", "src/deep", "lib/x", "docs/guide.md"},
		map[string]string{
			"docs/srclink": "../src",
			"docs/liblink": "../lib",
			"docs/up":      "../..",
			"docs/loop1":   "loop2",
			"docs/loop2":   "loop1",
			"docs/deep":    "srclink",
			"docs/srcdeep": "../src/deep",
		})
	link := func(p, target string) policy.Change {
		return policy.Change{Status: 'A', Path: p, NewMode: "120000", LinkTarget: target}
	}
	tests := []struct {
		name    string
		changes []policy.Change
		want    []string
	}{
		{"through an existing link", []policy.Change{link("docs/l", "srclink/keep.txt")}, []string{"forbidden-path"}},
		{"to an existing link", []policy.Change{link("docs/l", "srclink")}, []string{"forbidden-path"}},
		{"two hops", []policy.Change{link("docs/l", "deep/keep.txt")}, []string{"forbidden-path"}},
		{"through a fine link", []policy.Change{link("docs/l", "liblink/x")}, nil},
		{"out of the repository", []policy.Change{link("docs/l", "up/etc/passwd")}, []string{"forbidden-path"}},
		{"a loop", []policy.Change{link("docs/l", "loop1/x")}, []string{"forbidden-path"}},
		{"dot-dot after a link", []policy.Change{link("docs/l", "srcdeep/../keep.txt")}, []string{"forbidden-path"}},
		{"dot-dot through plain folders", []policy.Change{link("docs/l", "../lib/../docs/guide.md")}, nil},
		{"a link to itself", []policy.Change{link("docs/self", "self")}, []string{"forbidden-path"}},
		{"the root", []policy.Change{link("docs/l", "..")}, []string{"forbidden-path"}},
		{"into .git", []policy.Change{link("docs/l", "../.GIT/config")}, []string{"forbidden-path"}},
		{"through a link of the same diff", []policy.Change{link("lib/a", "../src"), link("docs/b", "../lib/a/keep.txt")}, []string{"forbidden-path"}},
		{"a link of the same diff, fine", []policy.Change{link("lib/a", "x"), link("docs/b", "../lib/a")}, nil},
		{"the diff deletes the link", []policy.Change{{Status: 'D', Path: "docs/srclink", OldMode: "120000"}, link("docs/l", "srclink/keep.txt")}, nil},
		{"the diff retargets the link", []policy.Change{
			{Status: 'M', Path: "docs/liblink", OldMode: "120000", NewMode: "120000", LinkTarget: "../src"},
			link("docs/l", "liblink/keep.txt")}, []string{"forbidden-path"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := l.CheckChangesOn(tt.changes, tree)
			got := codes(rs)
			if !slices.Equal(slices.Compact(got), tt.want) {
				t.Errorf("got %v, want %v", rs, tt.want)
			}
		})
	}
}

// TestRoleChangeWrites: the role's write rules apply to every path of the
// extracted diff, however it was written (issue 14 item 4).
func TestRoleChangeWrites(t *testing.T) {
	p := defaults(t)
	impl, doc := role(t, p, "implementer"), role(t, p, "doc-writer")
	tests := []struct {
		name string
		r    *policy.Role
		ch   policy.Change
		want string // a word the reason must hold; "" means allowed
	}{
		{"role file", impl, policy.Change{Status: 'M', Path: "roles/implementer.json"}, "roles/**"},
		{"new role file", impl, policy.Change{Status: 'A', Path: "roles/x.json"}, "roles/**"},
		{"workflow", impl, policy.Change{Status: 'A', Path: ".github/workflows/ci.yml"}, ".github/**"},
		{"case", impl, policy.Change{Status: 'A', Path: ".GitHub/workflows/ci.yml"}, ".github/**"},
		{"rename out of", impl, policy.Change{Status: 'R', OldPath: ".gitmodules", Path: "lib/modules"}, ".gitmodules"},
		{"delete", impl, policy.Change{Status: 'D', Path: ".gitmodules"}, ".gitmodules"},
		{"mode", impl, policy.Change{Status: 'M', Path: "roles/x.json", OldMode: "100644", NewMode: "100755"}, "roles/**"},
		{"ordinary", impl, policy.Change{Status: 'M', Path: "lib/x.go"}, ""},
		{"copy from a denied path", impl, policy.Change{Status: 'C', OldPath: "roles/implementer.json", Path: "lib/x.json"}, ""},
		{"doc-writer code", doc, policy.Change{Status: 'M', Path: "main.go"}, "main.go"},
		{"doc-writer docs", doc, policy.Change{Status: 'A', Path: "docs/guide.md"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := tt.r.CheckChangeWrites([]policy.Change{tt.ch})
			if tt.want == "" {
				if len(rs) != 0 {
					t.Errorf("got %v, want nothing", rs)
				}
				return
			}
			if len(rs) != 1 || rs[0].Code != "role-write-denied" || !strings.Contains(rs[0].Reason, tt.want) || rs[0].Fix == "" {
				t.Errorf("got %v, want one role-write-denied naming %s", rs, tt.want)
			}
		})
	}
	rs := impl.CheckChangeWrites([]policy.Change{{Status: 'R', OldPath: "roles/a.json", Path: ".github/a.json"}})
	if len(rs) != 2 {
		t.Errorf("a rename from one denied path to another: got %v, want both names", rs)
	}
}

// TestRepositoryRoleCannotDropSandbox: "sandbox": "none" from a
// repository's roles folder is refused; the operator's own folder may say
// it (issue 14 item 4).
func TestRepositoryRoleCannotDropSandbox(t *testing.T) {
	files := fstest.MapFS{"implementer.json": {Data: []byte(`{"sandbox": "none"}`)}}
	_, err := policy.LoadRepoFS(roles.FS, files, "repo/roles")
	if err == nil || !strings.Contains(err.Error(), "sandbox") || !strings.Contains(err.Error(), "repo/roles/implementer.json") {
		t.Fatalf("repository sandbox none: got %v, want a problem naming the file and the field", err)
	}
	// A new role in the repository may not say none either.
	files = fstest.MapFS{"mine.json": {Data: []byte(`{"contractVersion": 1, "role": "mine", "harness": "code", "systemPrompt": "x",
		"tools": ["read_file"], "sandbox": "none"}`)}}
	if _, err := policy.LoadRepoFS(roles.FS, files, "repo/roles"); err == nil {
		t.Fatal("a new repository role with sandbox none loaded")
	}
	// bwrap (stricter) is fine.
	files = fstest.MapFS{"implementer.json": {Data: []byte(`{"sandbox": "bwrap"}`)}}
	p, err := policy.LoadRepoFS(roles.FS, files, "repo/roles")
	if err != nil {
		t.Fatal(err)
	}
	if got := role(t, p, "implementer").SandboxBackend(); got != "bwrap" {
		t.Errorf("sandbox %q", got)
	}
	// The operator's folder (LoadFS, --roles DIR) may.
	files = fstest.MapFS{"implementer.json": {Data: []byte(`{"sandbox": "none"}`)}}
	p, err = policy.LoadFS(roles.FS, files, "operator/roles")
	if err != nil {
		t.Fatal(err)
	}
	if got := role(t, p, "implementer").SandboxBackend(); got != "none" {
		t.Errorf("operator's sandbox %q", got)
	}
}

// FuzzSymlinkResolution: any link target over any tree of links ends (at
// most 40 hops), never panics, and a link refused for leaving the repository
// or for a forbidden path says so with a reason and a fix.
func FuzzSymlinkResolution(f *testing.F) {
	f.Add("docs/l", "srclink/keep.txt", "docs/srclink", "../src")
	f.Add("a/b", "../../x", "a/c", "..")
	f.Add("l", "l/l/l", "l", "l")
	f.Add("x/y", "z/../../src", "x/z", "q/r")
	l := defaults(f).Landing()
	f.Fuzz(func(t *testing.T, p, target, linkPath, linkTarget string) {
		tree := linkTree([]string{"docs", "src", "lib"}, map[string]string{linkPath: linkTarget})
		for _, r := range l.CheckChangesOn([]policy.Change{{Status: 'A', Path: p, NewMode: "120000", LinkTarget: target}}, tree) {
			if r.Code == "" || r.Reason == "" || r.Fix == "" {
				t.Fatalf("refusal %+v", r)
			}
		}
	})
}

// TestLoadRepoFiles: contracts read from a commit load like a folder's,
// under the repository's rules.
func TestLoadRepoFiles(t *testing.T) {
	p, err := policy.LoadRepoFiles(roles.FS, map[string][]byte{
		policy.PolicyFile:  []byte(`{"landing": {"forbiddenPaths": ["lib/**"]}}`),
		"implementer.json": []byte(`{"sandbox": "bwrap"}`),
	}, "HEAD:roles")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Landing().ForbiddenPaths(); !slices.Equal(got, []string{"lib/**"}) {
		t.Errorf("forbidden %v", got)
	}
	if !strings.Contains(p.Landing().Source(), "HEAD:roles/conductor-policy.json") {
		t.Errorf("source %q", p.Landing().Source())
	}
	if _, err := policy.LoadRepoFiles(roles.FS, map[string][]byte{"implementer.json": []byte(`{"sandbox": "none"}`)}, "HEAD:roles"); err == nil {
		t.Error("sandbox none from a commit loaded")
	}
}

func TestRoleRuntime(t *testing.T) {
	for _, tc := range []struct{ runtime, problem string }{{"", ""}, {"builtin", ""}, {"pi", ""}, {"claude", `unknown runtime "claude"`}} {
		dir := t.TempDir()
		body := `{"contractVersion": 1, "role": "r", "harness": "code", "systemPrompt": "x", "tools": ["read_file"], "sandbox": "bwrap", "limits": {}` +
			map[bool]string{true: `, "runtime": "` + tc.runtime + `"`, false: ""}[tc.runtime != ""] + `}`
		if err := os.WriteFile(filepath.Join(dir, "r.json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		pol, err := policy.Load(roles.FS, dir)
		if tc.problem != "" {
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Fatalf("%s: err %v", tc.runtime, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		r, err := pol.Role("r")
		if err != nil || r.Runtime() != tc.runtime {
			t.Fatalf("%s: %v %q", tc.runtime, err, r.Runtime())
		}
	}
}
