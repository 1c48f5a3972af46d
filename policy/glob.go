package policy

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Path patterns in contracts are slash-separated and anchored at the
// repository root. Each segment is a path.Match pattern ("*", "?", "[a-z]");
// a segment that is exactly "**" matches zero or more whole segments. So
// "src/**" matches "src" and everything under it, "*.md" matches Markdown
// files at the root only and "**/*.md" matches them at any depth.

// matchGlob reports whether the clean, slash-separated name matches pattern.
// Both sides are NFC-normalised first (a file system that normalises names,
// as HFS+ and APFS do, writes café and cafe\u0301 to one file). With fold,
// the comparison ignores case the way the most permissive case-insensitive
// file system would: see foldName.
func matchGlob(pattern, name string, fold bool) bool {
	if fold {
		pattern, name = foldName(pattern), foldName(name)
	} else {
		pattern, name = norm.NFC.String(pattern), norm.NFC.String(name)
	}
	return matchSegs(strings.Split(pattern, "/"), strings.Split(name, "/"))
}

// foldName is the form in which two names a case-insensitive file system
// may take as one are equal: NFC, without the code points HFS+ ignores,
// with both Turkish i's (İ U+0130, ı U+0131) taken as i (a Turkic-locale
// folding maps them so, and full folding turns İ into i plus a combining
// dot), then full Unicode case folding (ſ → s, K (Kelvin) → k, ß → ss),
// and NFC again. strings.ToLower is not enough: it leaves ſ and ß alone.
func foldName(s string) string {
	s = norm.NFC.String(s)
	s = strings.Map(func(r rune) rune {
		switch {
		case r == 'İ' || r == 'ı':
			return 'i'
		case hfsIgnorable(r):
			return -1
		}
		return r
	}, s)
	return norm.NFC.String(cases.Fold().String(s))
}

// hfsIgnorable reports the code points HFS+ leaves out of a name when it
// compares names.
func hfsIgnorable(r rune) bool {
	return r >= 0x200c && r <= 0x200f || r >= 0x202a && r <= 0x202e ||
		r >= 0x206a && r <= 0x206f || r == 0xfeff
}

// UnsafeName reports why a path (or a symlink target) is not safe to show
// or to land, or "" when it is: invalid UTF-8, a control character (C0, DEL,
// C1: they reach terminals and split lines of git's output) or a
// bidirectional override (it makes a name read as another).
func UnsafeName(p string) string {
	if !utf8.ValidString(p) {
		return "is not valid UTF-8"
	}
	for _, r := range p {
		switch {
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
			return fmt.Sprintf("contains the control character %U", r)
		case r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069:
			return fmt.Sprintf("contains the bidirectional control %U", r)
		}
	}
	return ""
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
		if hfsIgnorable(r) {
			return -1
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
