package forge

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Gitea owner and repository names: letters, digits, '-', '_' and '.', not
// "." or "..".
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func validName(s string) bool {
	return nameRE.MatchString(s) && s != "." && s != ".." && !strings.HasSuffix(s, ".git")
}

// ParseRemoteURL derives owner and repository name from a git remote URL:
// https://host[/prefix]/OWNER/REPO(.git), ssh://[user@]host[:port]/OWNER/REPO,
// scp-like user@host:OWNER/REPO and file:// or plain paths ending in
// OWNER/REPO(.git). It fails when the last two path segments are not valid
// Gitea names.
func ParseRemoteURL(raw string) (owner, repo string, err error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", "", fmt.Errorf("empty remote URL")
	}
	p := raw
	switch {
	case strings.Contains(raw, "://"):
		u, perr := url.Parse(raw)
		if perr != nil {
			return "", "", fmt.Errorf("remote URL %s: %w", redactURL(raw), perr)
		}
		p = u.Path
	case isSCPLike(raw):
		_, p, _ = strings.Cut(raw, ":")
	}
	p = strings.TrimSuffix(strings.TrimRight(p, "/"), "/.git")
	segs := strings.Split(strings.Trim(p, "/"), "/")
	if len(segs) < 2 {
		return "", "", fmt.Errorf("remote URL %s: cannot derive owner/repo (need .../OWNER/REPO)", redactURL(raw))
	}
	owner, repo = segs[len(segs)-2], strings.TrimSuffix(segs[len(segs)-1], ".git")
	if !validName(owner) || !validName(repo) {
		return "", "", fmt.Errorf("remote URL %s: cannot derive owner/repo: %q/%q are not forge names", redactURL(raw), owner, repo)
	}
	return owner, repo, nil
}

// isSCPLike reports whether s is git's scp-like syntax [user@]host:path (a
// colon before any slash, and not a Windows drive letter).
func isSCPLike(s string) bool {
	colon := strings.IndexByte(s, ':')
	slash := strings.IndexByte(s, '/')
	return colon > 1 && (slash < 0 || colon < slash)
}

// redactURL drops a password from a URL before it is shown.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return u.Redacted()
	}
	return raw
}
