package forge_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor/forge"
)

var forgeName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// FuzzParseRemoteURL: remote URLs come from repository configuration. The
// parser never panics, and what it returns is always a pair of valid forge
// names that appear in the input.
func FuzzParseRemoteURL(f *testing.F) {
	for _, s := range []string{
		"https://gitea.example/acme/widget.git", "git@host:acme/widget.git", "ssh://git@h:22/a/b",
		"file:///srv/a/b.git", "/a/b", "../x.git", "https://u:p@h/a/b", "C:/a/b", "h:/", "://", "a/b/.git",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		owner, repo, err := forge.ParseRemoteURL(raw)
		if err != nil {
			return
		}
		for _, n := range []string{owner, repo} {
			if !forgeName.MatchString(n) || n == "." || n == ".." {
				t.Fatalf("ParseRemoteURL(%q) = %q/%q: not a forge name", raw, owner, repo)
			}
		}
		if !strings.Contains(raw, "%") && (!strings.Contains(raw, owner) || !strings.Contains(raw, repo)) {
			t.Fatalf("ParseRemoteURL(%q) = %q/%q: not from the input", raw, owner, repo)
		}
	})
}
