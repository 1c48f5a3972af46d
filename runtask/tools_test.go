package runtask

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/conductor-dev/conductor/conductor/sandbox"
	pgit "github.com/conductor-dev/conductor/patch/git" // git names a test helper in this package
)

func newToolbox(t *testing.T) (*toolbox, string, string) {
	t.Helper()
	repo := newTestRepo(t, nil)
	outside := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(outside, []byte("TOP SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(repo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	g, err := pgit.OpenRepo(repo)
	if err != nil {
		t.Fatal(err)
	}
	tb := &toolbox{root: root, dir: repo, git: g, role: &testRole{commands: [][]string{{"cat"}}, denyWrite: "vendor/"},
		allowed: map[string]bool{}, sb: &execSandbox{}, env: []string{"PATH=" + os.Getenv("PATH")},
		lim: limits{OutputLimit: DefaultOutputLimit, CommandTimeout: DefaultCommandTimeout}}
	for _, c := range CanonicalTools {
		tb.allowed[c] = true
	}
	return tb, repo, outside
}

func args(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestToolConfinement(t *testing.T) {
	tb, repo, outside := newToolbox(t)
	// Planted links: out of the tree, into .git, and a harmless one.
	if err := os.Link(outside, filepath.Join(repo, "hardlink")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(repo, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"out-abs": outside, "out-rel": "../../" + filepath.Base(filepath.Dir(outside)) + "/secret.txt",
		"dir-out": filepath.Dir(outside), "gitlink": ".git", "gitcfg": ".git/config", "lib/up": "..", "ok-link": "lib/util.go",
	} {
		if err := os.Symlink(target, filepath.Join(repo, link)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, tool string
		args       any
		wantErr    string // "" = success
	}{
		{"read dotdot", ToolReadFile, map[string]any{"path": "../secret.txt"}, "uses '..'"},
		{"read nested dotdot", ToolReadFile, map[string]any{"path": "lib/../../x"}, "uses '..'"},
		{"read absolute", ToolReadFile, map[string]any{"path": outside}, "is absolute"},
		{"read home", ToolReadFile, map[string]any{"path": "~/.ssh/id_rsa"}, "is absolute"},
		{"read symlink abs out", ToolReadFile, map[string]any{"path": "out-abs"}, "points outside"},
		{"read symlink rel out", ToolReadFile, map[string]any{"path": "out-rel"}, "points outside"},
		{"read through dir link", ToolReadFile, map[string]any{"path": "dir-out/secret.txt"}, "points outside"},
		{"read .git", ToolReadFile, map[string]any{"path": ".git/config"}, ".git is not accessible"},
		{"read .GIT", ToolReadFile, map[string]any{"path": ".GIT/HEAD"}, ".git is not accessible"},
		{"read nested .git", ToolReadFile, map[string]any{"path": "lib/.git/x"}, ".git is not accessible"},
		{"read link to .git", ToolReadFile, map[string]any{"path": "gitlink/config"}, "leads into .git"},
		{"read link to .git file", ToolReadFile, map[string]any{"path": "gitcfg"}, "leads into .git"},
		{"read link via ..", ToolReadFile, map[string]any{"path": "lib/up/README.md"}, ""},
		{"read inside link", ToolReadFile, map[string]any{"path": "ok-link"}, ""},
		{"read hard link", ToolReadFile, map[string]any{"path": "hardlink"}, "2 hard links"},
		{"write hard link", ToolWriteFile, map[string]any{"path": "hardlink", "content": "x"}, "2 hard links"},
		{"read named pipe", ToolReadFile, map[string]any{"path": "pipe"}, "not a regular file"},
		{"write named pipe", ToolWriteFile, map[string]any{"path": "pipe", "content": "x"}, "not a regular file"},
		{"edit named pipe", ToolEditFile, map[string]any{"path": "pipe", "old_string": "a", "new_string": "b"}, "not a regular file"},
		{"list named pipe", ToolListDir, map[string]any{"path": "pipe"}, "not a folder"},
		{"edit hard link", ToolEditFile, map[string]any{"path": "hardlink", "old_string": "TOP", "new_string": "x"}, "2 hard links"},
		{"write dotdot", ToolWriteFile, map[string]any{"path": "../evil", "content": "x"}, "uses '..'"},
		{"write absolute", ToolWriteFile, map[string]any{"path": filepath.Join(t.TempDir(), "evil"), "content": "x"}, "is absolute"},
		{"write .git", ToolWriteFile, map[string]any{"path": ".git/hooks/pre-commit", "content": "x"}, ".git is not accessible"},
		{"write via link out", ToolWriteFile, map[string]any{"path": "dir-out/new.txt", "content": "x"}, "points outside"},
		{"write via link .git", ToolWriteFile, map[string]any{"path": "gitlink/config", "content": "x"}, "leads into .git"},
		{"write refused by role", ToolWriteFile, map[string]any{"path": "vendor/x.go", "content": "x"}, "refused (path-not-writable)"},
		{"edit .git", ToolEditFile, map[string]any{"path": ".git/config", "old_string": "a", "new_string": "b"}, ".git is not accessible"},
		{"list .git", ToolListDir, map[string]any{"path": ".git"}, ".git is not accessible"},
		{"list link out", ToolListDir, map[string]any{"path": "dir-out"}, "points outside"},
		{"grep in .git", ToolGrep, map[string]any{"pattern": "x", "path": ".git"}, ".git is not accessible"},
		{"grep dotdot", ToolGrep, map[string]any{"pattern": "x", "path": ".."}, "uses '..'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := tb.call(context.Background(), tc.tool, args(tc.args))
			if tc.wantErr == "" {
				if res.IsError {
					t.Fatalf("unexpected error: %s", res.Content)
				}
				return
			}
			if !res.IsError || !strings.Contains(res.Content, tc.wantErr) {
				t.Fatalf("result %q, want an error containing %q", res.Content, tc.wantErr)
			}
			if strings.Contains(res.Content, "TOP SECRET") {
				t.Fatal("secret content leaked")
			}
		})
	}
	// Nothing was written outside or into .git.
	if b, _ := os.ReadFile(outside); string(b) != "TOP SECRET" {
		t.Fatal("outside file changed")
	}
	for _, p := range []string{filepath.Join(filepath.Dir(outside), "new.txt"), filepath.Join(repo, ".git", "hooks", "pre-commit")} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("%s was written", p)
		}
	}
	// grep skips the hard link (the file is untracked, so it is listed).
	if res := tb.call(context.Background(), ToolGrep, `{"pattern":"TOP SECRET"}`); res.Content != "no matches" {
		t.Fatalf("grep through a hard link: %q", res.Content)
	}
	// The listing hides .git.
	res := tb.call(context.Background(), ToolListDir, `{}`)
	if strings.Contains(res.Content, ".git/") || !strings.Contains(res.Content, "lib/") {
		t.Fatalf("list_dir = %q", res.Content)
	}
}

func TestFileTools(t *testing.T) {
	tb, repo, _ := newToolbox(t)
	ctx := context.Background()
	if err := os.WriteFile(filepath.Join(repo, "build.log"), []byte("Answer in ignored file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "notes.txt"), []byte("Answer untracked\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, tool string
		args       any
		want       string
		isErr      bool
	}{
		{"read whole", ToolReadFile, map[string]any{"path": "lib/util.go"}, "package lib\n\n// Answer is the answer.\nconst Answer = 41\n", false},
		{"read range", ToolReadFile, map[string]any{"path": "lib/util.go", "start_line": 3, "end_line": 4}, "// Answer is the answer.\nconst Answer = 41\n", false},
		{"read range open end", ToolReadFile, map[string]any{"path": "lib/util.go", "start_line": 4}, "const Answer = 41\n", false},
		{"read past end", ToolReadFile, map[string]any{"path": "lib/util.go", "start_line": 9}, "past the end", true},
		{"read missing", ToolReadFile, map[string]any{"path": "nope.go"}, "no such file", true},
		{"read folder", ToolReadFile, map[string]any{"path": "lib"}, "is a folder", true},
		{"read bad args", ToolReadFile, `{"file":"x"}`, "invalid arguments for read_file", true},
		{"read non-JSON args", ToolReadFile, `not json`, "invalid arguments for read_file", true},
		{"edit missing match", ToolEditFile, map[string]any{"path": "lib/util.go", "old_string": "= 40", "new_string": "= 42"}, "old_string not found", true},
		{"edit non-unique", ToolEditFile, map[string]any{"path": "lib/util.go", "old_string": "Answer", "new_string": "X"}, "matches 2 places", true},
		{"edit unique", ToolEditFile, map[string]any{"path": "lib/util.go", "old_string": "= 41", "new_string": "= 42"}, "edited lib/util.go", false},
		{"read edited", ToolReadFile, map[string]any{"path": "lib/util.go", "start_line": 4, "end_line": 4}, "const Answer = 42\n", false},
		{"write new nested", ToolWriteFile, map[string]any{"path": "a/b/c.txt", "content": "hi\n"}, "wrote a/b/c.txt (3 bytes)", false},
		{"write missing content", ToolWriteFile, map[string]any{"path": "x.txt"}, "content is required", true},
		{"grep respects gitignore", ToolGrep, map[string]any{"pattern": "Answer"}, "lib/util.go:3:// Answer is the answer.\nlib/util.go:4:const Answer = 42\nnotes.txt:1:Answer untracked\n", false},
		{"grep path", ToolGrep, map[string]any{"pattern": "(?i)hello", "path": "main.go"}, "main.go:4:\tprintln(\"hello\")\n", false},
		{"grep limit", ToolGrep, map[string]any{"pattern": "Answer", "max_results": 1}, "stopped at 1 matches", false},
		{"grep bad regex", ToolGrep, map[string]any{"pattern": "("}, "invalid pattern", true},
		{"grep none", ToolGrep, map[string]any{"pattern": "zzz-no"}, "no matches", false},
		{"list root", ToolListDir, map[string]any{}, ".gitignore\nREADME.md\na/\nbuild.log\nlib/\nmain.go\nnotes.txt\n", false},
		{"run allowed", ToolRunCommand, map[string]any{"argv": []string{"cat", "lib/util.go"}}, "exit status 0\npackage lib", false},
		{"run failing", ToolRunCommand, map[string]any{"argv": []string{"cat", "missing"}}, "exit status 1", true},
		{"run refused", ToolRunCommand, map[string]any{"argv": []string{"rm", "-rf", "."}}, "refused (command-not-allowed)", true},
		{"run shell string", ToolRunCommand, map[string]any{"argv": "cat x"}, "there is no shell", true},
		{"unknown tool", "shell", map[string]any{}, `unknown tool "shell"`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, ok := tc.args.(string)
			if !ok {
				a = args(tc.args)
			}
			res := tb.call(ctx, tc.tool, a)
			if res.IsError != tc.isErr || !strings.Contains(res.Content, tc.want) {
				t.Fatalf("%s(%s) = %q (error %v), want %q (error %v)", tc.tool, a, res.Content, res.IsError, tc.want, tc.isErr)
			}
		})
	}
}

func TestToolNotAllowed(t *testing.T) {
	tb, _, _ := newToolbox(t)
	delete(tb.allowed, ToolRunCommand)
	res := tb.call(context.Background(), ToolRunCommand, `{"argv":["cat","x"]}`)
	if !res.IsError || !strings.Contains(res.Content, "not allowed for this task and role") {
		t.Fatalf("got %q", res.Content)
	}
}

func TestOutputCap(t *testing.T) {
	tb, repo, _ := newToolbox(t)
	tb.lim.OutputLimit = 1000
	big := strings.Repeat("head ", 100) + strings.Repeat("x", 10000) + strings.Repeat(" tail", 100)
	if err := os.WriteFile(filepath.Join(repo, "big.txt"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	res := tb.call(context.Background(), ToolReadFile, `{"path":"big.txt"}`)
	if len(res.Content) > 1200 || !strings.HasPrefix(res.Content, "head head") || !strings.HasSuffix(res.Content, "tail tail") ||
		!strings.Contains(res.Content, "bytes omitted") {
		t.Fatalf("capped output (%d bytes) = %.200q…", len(res.Content), res.Content)
	}
	if string(res.Full) != big {
		t.Fatal("full output not kept")
	}
	// Empty results are never empty for the model.
	if err := os.WriteFile(filepath.Join(repo, "empty.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if res := tb.call(context.Background(), ToolReadFile, `{"path":"empty.txt"}`); res.Content == "" {
		t.Fatal("empty tool result")
	}
}

func TestCommandEnv(t *testing.T) {
	env := map[string]string{"PATH": "/bin", "GOFLAGS": "-mod=mod", "OPENAI_API_KEY": "sk-secret", "GITEA_TOKEN": "tok",
		"AWS_SECRET_ACCESS_KEY": "aws", "MY_MODEL_KEY_VAR": "k", "CGO_ENABLED": "0", "GIT_DIR": "/x", "UNSET_ONE": ""}
	role := &testRole{env: []string{"GOFLAGS", "OPENAI_API_KEY", "GITEA_TOKEN", "AWS_SECRET_ACCESS_KEY", "CGO_ENABLED", "GIT_DIR", "UNSET_ONE", "MODELCRED"}}
	got, dropped := commandEnv(testEnv(env), role, "/scratch", []string{"MODELCRED"})
	want := append([]string{"PATH=/bin", "HOME=/scratch/home", "TMPDIR=/scratch/tmp", "LANG=C.UTF-8"}, sandbox.ToolConfigEnv()...)
	want = append(want, "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("env = %q, want %q", got, want)
	}
	if strings.Join(dropped, ",") != "AWS_SECRET_ACCESS_KEY,GITEA_TOKEN,GIT_DIR,MODELCRED,OPENAI_API_KEY" {
		t.Fatalf("dropped = %q", dropped)
	}
}

// FuzzCleanPath: whatever the model sends, an accepted path is relative,
// has no "..", and no component named .git in any case.
func FuzzCleanPath(f *testing.F) {
	repo := newTestRepo(f, nil)
	root, err := os.OpenRoot(repo)
	if err != nil {
		f.Fatal(err)
	}
	defer root.Close()
	if err := os.Symlink(".git", filepath.Join(repo, "gl")); err != nil {
		f.Fatal(err)
	}
	tb := &toolbox{root: root}
	for _, s := range []string{"a", "../x", "/etc", "lib/../.GIT/config", ".git", "gl/config", "lib/./util.go", " x ", "a\x00b", ".git./x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := tb.cleanPath(p, true)
		if err != nil {
			return
		}
		if strings.HasPrefix(got, "/") || got == ".." || strings.HasPrefix(got, "../") {
			t.Fatalf("%q accepted as %q", p, got)
		}
		for _, c := range strings.Split(got, "/") {
			if c == ".." || strings.EqualFold(c, ".git") {
				t.Fatalf("%q accepted as %q", p, got)
			}
		}
		if strings.HasPrefix(got, "gl/") || got == "gl" {
			t.Fatalf("%q: symlink into .git accepted", p)
		}
	})
}
