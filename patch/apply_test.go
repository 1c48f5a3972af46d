package patch

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckPath(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"a.txt", true},
		{"dir/sub/file", true},
		{".gitignore", true},
		{"a/.gitattributes", true},
		{"...", true},
		{"", false},
		{"/etc/passwd", false},
		{"../x", false},
		{"a/../../x", false},
		{"a/./b", false},
		{"a//b", false},
		{".git/config", false},
		{"sub/.GIT/hooks/pre-commit", false},
		{"a\\b", true},
		{"a\x00b", false},
	}
	for _, tc := range tests {
		err := CheckPath(tc.path)
		if (err == nil) != tc.ok {
			t.Errorf("CheckPath(%q) = %v, want ok=%v", tc.path, err, tc.ok)
		}
	}
}

func TestApplyBadInput(t *testing.T) {
	requireGit(t)
	repo, _, g, base := linkedWorktree(t, 31)
	var name string
	for _, n := range g.names() {
		if f := g.files[n]; f.mode == "100644" && len(f.data) > 0 && bytes.IndexByte(f.data, 0) < 0 {
			name = n
			break
		}
	}
	oid := strings.TrimSpace(string(testGit(t, repo, nil, "rev-parse", base+":"+name)))
	first := string(bytes.SplitAfter(g.files[name].data, []byte("\n"))[0])
	mod := "diff --git a/" + name + " b/" + name + "\nindex " + oid + "..1111111111111111111111111111111111111111 100644\n--- a/" + name + "\n+++ b/" + name + "\n@@ -1 +1 @@\n-" + first + "+changed\n"
	tests := []struct{ name, diff, want string }{
		{"not a diff", "hello\n", "input is not a diff"},
		{"empty", "", "input is not a diff"},
		{"path outside", "diff --git a/../x b/../x\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/../x\n@@ -0,0 +1 @@\n+x\n", `path "../x" is outside the worktree`},
		{"absolute path", "diff --git a//etc/x b//etc/x\nnew file mode 100644\n--- /dev/null\n+++ b//etc/x\n@@ -0,0 +1 @@\n+x\n", "apply: parse diff: "},
		{"into .git", "diff --git a/.git/config b/.git/config\nnew file mode 100644\n--- /dev/null\n+++ b/.git/config\n@@ -0,0 +1 @@\n+x\n", "touches a .git directory"},
		{"gitlink mode", "diff --git a/sub b/sub\nnew file mode 160000\nindex 0000000..1111111\n--- /dev/null\n+++ b/sub\n@@ -0,0 +1 @@\n+Subproject commit 1111111111111111111111111111111111111111\n", "cannot be stored in a tree"},
		{"truncated binary", "diff --git a/b b/b\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..18aef5763fe1040a10d67ed620cf0c919b484327\nGIT binary patch\nliteral 99\nUcmc~u&B@7UD9<m-Nm1ki03s0tXaE2J\n\nliteral 0\nHcmV?d00001\n\n", "truncated or corrupt binary hunk"},
		{"binary without data", "diff --git a/b b/b\nindex 1111111..2222222 100644\nBinary files a/b and b/b differ\n", "binary change without data"},
		{"missing file", "diff --git a/nope.txt b/nope.txt\nindex 1111111..2222222 100644\n--- a/nope.txt\n+++ b/nope.txt\n@@ -1 +1 @@\n-a\n+b\n", "nope.txt: not in base"},
		{"wrong preimage id", strings.Replace(mod, oid, "2222222222222222222222222222222222222222", 1), "the diff expects 2222222"},
		{"new file exists", "diff --git a/" + name + " b/" + name + "\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/" + name + "\n@@ -0,0 +1 @@\n+x\n", "new file already exists"},
		{"context mismatch", strings.Replace(mod, "-"+first, "-not the line\n", 1), "apply: " + name},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Apply(context.Background(), ApplyOptions{Repo: Git{GitDir: filepath.Join(repo, ".git")}, Base: base, Patch: strings.NewReader(tc.diff)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	t.Run("good edit", func(t *testing.T) {
		if _, err := Apply(context.Background(), ApplyOptions{Repo: Git{GitDir: filepath.Join(repo, ".git")}, Base: base, Patch: strings.NewReader(mod)}); err != nil {
			t.Fatal(err)
		}
	})
}
