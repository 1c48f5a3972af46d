package land

import (
	"os/exec"
	"testing"
)

// TestBranchNameFollowsGit: every name `git check-ref-format --branch`
// rejects, branchName rejects too (it may reject more: HEAD, refs/…,
// non-ASCII).
func TestBranchNameFollowsGit(t *testing.T) {
	for _, name := range []string{
		"main", "feature/x", "a.b", "v1.2", "x@y", "a-b_c", "refs/heads/main",
		"", "-x", ".hidden", "a/.b", "a..b", "a.lock", "a/b.lock/c", "a.lock/b", "x.", "a/", "/a", "a//b",
		"@", "x@{1}", "a b", "a\tb", "a\nb", "a\x01b", "a\x7fb", "a~1", "a^", "a:b", "a?", "a*", "a[b", `a\b`,
		"HEAD", "refs/x", "é", "a/./b", "a/../b",
	} {
		t.Run(name, func(t *testing.T) {
			gitOK := exec.Command("git", "check-ref-format", "--branch", name).Run() == nil
			_, err := branchName(name)
			if !gitOK && err == nil {
				t.Errorf("branchName(%q) accepted a name git rejects", name)
			}
			if gitOK && err != nil {
				switch name {
				case "HEAD", "@", "refs/x", "é": // stricter on purpose (git takes "@" as HEAD's branch)
				default:
					t.Errorf("branchName(%q) = %v, git accepts it", name, err)
				}
			}
		})
	}
}

// FuzzBranchName: branchName never accepts a name with a byte git forbids
// in every ref, and what it returns is the name without refs/heads/.
func FuzzBranchName(f *testing.F) {
	for _, s := range []string{"main", "refs/heads/a/b", "a..b", "x.lock", "é", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		b, err := branchName(name)
		if err != nil {
			return
		}
		for _, r := range b {
			if r < 0x20 || r >= 0x7f || r == ' ' || r == '~' || r == '^' || r == ':' || r == '?' || r == '*' || r == '[' || r == '\\' {
				t.Fatalf("branchName(%q) = %q: forbidden character %q", name, b, r)
			}
		}
		if b == "" || (name != b && name != "refs/heads/"+b) {
			t.Fatalf("branchName(%q) = %q", name, b)
		}
	})
}
