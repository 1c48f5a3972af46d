package patch

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestApplyToBaseRefusesWhatATreeCannotTake: a patch that would write
// outside the tree, into a .git folder, a gitlink, or onto a file that is
// not as the patch expects is refused, and nothing is written where it
// could be read back as part of the base (the base tree is unchanged).
func TestApplyToBaseRefusesWhatATreeCannotTake(t *testing.T) {
	requireGit(t)
	repo, _, g, base := linkedWorktree(t, 31)
	name := ""
	for _, n := range g.names() {
		if f := g.files[n]; f.mode == "100644" && len(f.data) > 0 && !strings.ContainsRune(string(f.data), 0) {
			name = n
			break
		}
	}
	first := strings.SplitAfter(string(testGit(t, repo, nil, "show", base+":"+name)), "\n")[0]
	if !strings.HasSuffix(first, "\n") {
		first += "\n\\ No newline at end of file\n"
	}
	edit := "diff --git a/" + name + " b/" + name + "\n--- a/" + name + "\n+++ b/" + name + "\n@@ -1 +1 @@\n-" + first + "+changed\n"
	gd := Git{GitDir: filepath.Join(repo, ".git")}
	baseTree := strings.TrimSpace(string(testGit(t, repo, nil, "rev-parse", base+"^{tree}")))
	for _, tc := range []struct{ name, diff string }{
		{"not a diff", "hello\n"},
		{"path outside", "diff --git a/../x b/../x\nnew file mode 100644\n--- /dev/null\n+++ b/../x\n@@ -0,0 +1 @@\n+x\n"},
		{"absolute path", "diff --git a//etc/x b//etc/x\nnew file mode 100644\n--- /dev/null\n+++ b//etc/x\n@@ -0,0 +1 @@\n+x\n"},
		{"into .git", "diff --git a/.git/config b/.git/config\nnew file mode 100644\n--- /dev/null\n+++ b/.git/config\n@@ -0,0 +1 @@\n+x\n"},
		{"into a nested .GIT", "diff --git a/sub/.GIT/hooks/x b/sub/.GIT/hooks/x\nnew file mode 100755\n--- /dev/null\n+++ b/sub/.GIT/hooks/x\n@@ -0,0 +1 @@\n+x\n"},
		{"missing file", "diff --git a/nope.txt b/nope.txt\n--- a/nope.txt\n+++ b/nope.txt\n@@ -1 +1 @@\n-a\n+b\n"},
		{"new file exists", "diff --git a/" + name + " b/" + name + "\nnew file mode 100644\n--- /dev/null\n+++ b/" + name + "\n@@ -0,0 +1 @@\n+x\n"},
		{"context mismatch", strings.Replace(edit, "-"+first, "-not the line\n", 1)},
		{"truncated binary", "diff --git a/b b/b\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..18aef5763fe1040a10d67ed620cf0c919b484327\nGIT binary patch\nliteral 99\nUcmc~u&B@7UD9<m-Nm1ki03s0tXaE2J\n\nliteral 0\nHcmV?d00001\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := ApplyToBase(context.Background(), gd, base, []byte(tc.diff))
			if err == nil {
				t.Fatalf("applied, giving tree %s", tree)
			}
		})
	}
	t.Run("good edit", func(t *testing.T) {
		fresh := "diff --git a/fresh.txt b/fresh.txt\nnew file mode 100644\n--- /dev/null\n+++ b/fresh.txt\n@@ -0,0 +1 @@\n+x\n"
		tree, err := ApplyToBase(context.Background(), gd, base, []byte(fresh))
		if err != nil || tree == baseTree {
			t.Fatalf("tree %s (base %s), %v", tree, baseTree, err)
		}
	})
	if got := strings.TrimSpace(string(testGit(t, repo, nil, "rev-parse", base+"^{tree}"))); got != baseTree {
		t.Fatalf("the base's tree changed: %s, was %s", got, baseTree)
	}
}
