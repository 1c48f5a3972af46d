package policy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/policy"
)

// git runs git in dir with an isolated environment and fails the test on error.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HOME="+home, "XDG_CONFIG_HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=T", "GIT_AUTHOR_EMAIL=t@example.test", "GIT_COMMITTER_NAME=T",
		"GIT_COMMITTER_EMAIL=t@example.test", "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z",
		"GIT_COMMITTER_DATE=2026-01-01T00:00:00Z")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestParseChangesRealGit parses a real git diff holding every kind of
// change and checks the landing rules over it.
func TestParseChangesRealGit(t *testing.T) {
	dir := t.TempDir()
	git(t, dir, "init", "-q", "-b", "main")
	write(t, dir, "README.md", "hello\n")
	write(t, dir, "lib/old.go", "package lib\n\nfunc Old() {}\n// padding so the rename is detected\n")
	write(t, dir, "lib/gone.txt", "bye\n")
	write(t, dir, "lib/run.sh", "echo hi\n")
	write(t, dir, "src/keep.c", "int x;\n")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "base")

	write(t, dir, "README.md", "hello\nworld\n")
	git(t, dir, "mv", "lib/old.go", "src/moved.go")
	git(t, dir, "rm", "-q", "lib/gone.txt")
	if err := os.Chmod(filepath.Join(dir, "lib/run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "lib/caf\u00e9 \"q\".txt", "quoted\n")
	if err := os.Symlink("../src/keep.c", filepath.Join(dir, "lib/link")); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "lib/blob.bin", "\x00\x01\x02binary")
	git(t, dir, "add", "-A")
	diff := git(t, dir, "-c", "core.quotePath=true", "diff", "--cached", "-M", "--binary", "--full-index", "HEAD")

	changes, err := policy.ParseChanges(strings.NewReader(diff))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]policy.Change{}
	for _, c := range changes {
		got[c.Path] = c
	}
	want := []policy.Change{
		{Status: 'M', Path: "README.md", OldMode: "100644", NewMode: "100644", Added: 1},
		{Status: 'R', Path: "src/moved.go", OldPath: "lib/old.go"}, // a pure rename carries no modes
		{Status: 'D', Path: "lib/gone.txt", OldMode: "100644", Deleted: 1},
		{Status: 'M', Path: "lib/run.sh", OldMode: "100644", NewMode: "100755"},
		{Status: 'A', Path: "lib/caf\u00e9 \"q\".txt", NewMode: "100644", Added: 1},
		{Status: 'A', Path: "lib/link", NewMode: "120000", LinkTarget: "../src/keep.c", Added: 1},
		{Status: 'A', Path: "lib/blob.bin", NewMode: "100644", Binary: true},
	}
	if len(changes) != len(want) {
		t.Fatalf("got %d changes, want %d: %+v", len(changes), len(want), changes)
	}
	for _, w := range want {
		g, ok := got[w.Path]
		if !ok {
			t.Errorf("missing change for %q (got %+v)", w.Path, changes)
			continue
		}
		// The blob ids are the index line's: the staged and HEAD blobs,
		// none for a change of mode only or a pure rename.
		wantOld, wantNew := "", ""
		if w.Status != 'R' && w.Path != "lib/run.sh" {
			if w.Status != 'A' {
				wantOld = strings.TrimSpace(git(t, dir, "rev-parse", "HEAD:"+w.Path))
			}
			if w.Status != 'D' {
				wantNew = strings.TrimSpace(git(t, dir, "rev-parse", ":"+w.Path))
			}
		}
		if g.OldOID != wantOld || g.NewOID != wantNew {
			t.Errorf("change %q: blob ids %q..%q, want %q..%q", w.Path, g.OldOID, g.NewOID, wantOld, wantNew)
		}
		g.OldOID, g.NewOID = "", ""
		if g != w {
			t.Errorf("change %q:\n got %+v\nwant %+v", w.Path, g, w)
		}
	}

	refusals := defaults(t).Landing().CheckChanges(changes, exists("README.md", "lib", "src"))
	var codes []string
	for _, r := range refusals {
		codes = append(codes, string(r.Code)+": "+r.Reason)
	}
	joined := strings.Join(codes, "\n")
	for _, w := range []string{"renaming into src/moved.go", "symlink lib/link points into forbidden path src/**"} {
		if !strings.Contains(joined, w) {
			t.Errorf("refusals lack %q:\n%s", w, joined)
		}
	}
	if len(refusals) != 2 {
		t.Errorf("want 2 refusals, got:\n%s", joined)
	}
}

func TestParseChangesBadInput(t *testing.T) {
	for name, in := range map[string]string{
		"garbage hunk": "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n",
		"bad mode":     "diff --git a/x b/x\nold mode 10x644\nnew mode 100755\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := policy.ParseChanges(strings.NewReader(in)); err == nil {
				t.Error("want an error")
			}
		})
	}
	got, err := policy.ParseChanges(strings.NewReader(""))
	if err != nil || len(got) != 0 {
		t.Errorf("empty diff: %v %v", got, err)
	}
}

func FuzzParseChanges(f *testing.F) {
	f.Add("diff --git a/x b/x\nnew file mode 120000\n--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+../src\n\\ No newline at end of file\n")
	f.Add("diff --git \"a/caf\\303\\251\" \"b/caf\\303\\251\"\nnew file mode 100644\n")
	f.Fuzz(func(t *testing.T, in string) {
		changes, err := policy.ParseChanges(strings.NewReader(in))
		if err != nil {
			return
		}
		// Whatever parses must be answerable by the landing rules.
		l := defaults(t).Landing()
		_ = l.CheckChanges(changes, nil)
	})
}
