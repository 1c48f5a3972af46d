package policy

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Path patterns in contracts are slash-separated and anchored at the
// repository root. Each segment is a path.Match pattern ("*", "?", "[a-z]");
// a segment that is exactly "**" matches zero or more whole segments. So
// "src/**" matches "src" and everything under it, "*.md" matches Markdown
// files at the root only and "**/*.md" matches them at any depth.

// matchGlob reports whether the clean, slash-separated name matches pattern.
// With fold, the comparison ignores case (Unicode simple folding via
// strings.ToLower on both sides).
func matchGlob(pattern, name string, fold bool) bool {
	if fold {
		pattern, name = strings.ToLower(pattern), strings.ToLower(name)
	}
	return matchSegs(strings.Split(pattern, "/"), strings.Split(name, "/"))
}

func matchSegs(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			rest := pat[1:]
			for i := 0; i <= len(name); i++ {
				if matchSegs(rest, name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		ok, err := path.Match(pat[0], name[0])
		if err != nil || !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// checkGlob validates a contract path pattern.
func checkGlob(p string) error {
	switch {
	case p == "":
		return errors.New("empty pattern")
	case strings.HasPrefix(p, "/"):
		return errors.New("pattern must be relative to the repository root (no leading /)")
	case strings.HasSuffix(p, "/"):
		return errors.New("pattern must not end with / (use dir/** for a folder)")
	case strings.ContainsRune(p, 0):
		return errors.New("pattern contains a NUL byte")
	}
	for _, seg := range strings.Split(p, "/") {
		switch {
		case seg == "":
			return errors.New("pattern has an empty segment (//)")
		case seg == "." || seg == "..":
			return fmt.Errorf("pattern has a %q segment", seg)
		case seg != "**" && strings.Contains(seg, "**"):
			return fmt.Errorf("segment %q: ** must be a whole segment", seg)
		}
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("segment %q: %w", seg, err)
		}
	}
	return nil
}

// CleanPath normalises a repository-relative path the way every rule sees
// it: "./src/x" and "a/../src/x" become "src/x". It refuses paths that are
// empty, absolute, escape the repository, contain a NUL byte or name a .git
// entry in any spelling a file system may treat as ".git" (any case, HFS+
// ignorable code points, NTFS trailing dots and spaces, the 8.3 name
// "git~1").
func CleanPath(p string) (string, error) {
	switch {
	case p == "":
		return "", errors.New("empty path")
	case strings.ContainsRune(p, 0):
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	case strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`) || (len(p) > 1 && p[1] == ':'):
		return "", fmt.Errorf("path %q is absolute", p)
	}
	c := path.Clean(p)
	if c == "." {
		return "", fmt.Errorf("path %q names the repository root", p)
	}
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("path %q escapes the repository", p)
	}
	for _, seg := range strings.Split(c, "/") {
		if isDotGit(seg) {
			return "", fmt.Errorf("path %q names a .git entry", p)
		}
	}
	return c, nil
}

// isDotGit reports whether a path segment may be taken as ".git" by some file
// system.
func isDotGit(seg string) bool {
	s := strings.Map(func(r rune) rune {
		switch {
		case r >= 0x200c && r <= 0x200f, r >= 0x202a && r <= 0x202e,
			r >= 0x206a && r <= 0x206f, r == 0xfeff:
			return -1 // ignored by HFS+
		}
		return r
	}, strings.ToLower(seg))
	s = strings.TrimRight(s, ". ")
	return s == ".git" || s == "git~1"
}

// patternCovers reports whether every path matched by inner is also matched
// by outer, as far as can be told cheaply: inner read as a literal path is
// matched by outer ("src/**" covers "src/x/**" and "src/**"). It is used to
// reject contradictory allow/deny rules.
func patternCovers(outer, inner string, fold bool) bool {
	return matchGlob(outer, inner, fold)
}
