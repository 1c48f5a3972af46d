package forge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/conductor-dev/conductor/patch"
)

// Check is one line of a forge report (conductor doctor).
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	// Skipped is set (with OK) when the check could not be made here, e.g.
	// no repository to name the forge repository.
	Skipped bool `json:"skipped,omitempty"`
}

// Report is what CheckForge found. Configured is false when no forge URL is
// set (nothing was checked).
type Report struct {
	Configured bool    `json:"configured"`
	URL        string  `json:"url,omitempty"`
	Repo       string  `json:"repo,omitempty"`
	Checks     []Check `json:"checks"`
	Works      bool    `json:"works"`
}

// CheckForge asks the forge, up front, what pr open and push will need:
// the settings, the token variable, that the URL is a Gitea that accepts
// the token, that the repository (from --owner/--repo or local's remote)
// is there and neither archived nor empty, and that the token may push to
// it (its scopes and the user's permission). It changes nothing. Each
// failure is one line naming the URL (never the token) and what to check.
func CheckForge(ctx context.Context, s Settings, local patch.Git, getenv func(string) string, log *slog.Logger) (rep Report) {
	s = s.WithDefaults(getenv)
	rep.URL = s.URL
	if s.URL == "" {
		return rep
	}
	rep.Configured = true
	add := func(name string, err error, okDetail string) bool {
		c := Check{Name: name, OK: err == nil, Detail: okDetail}
		if err != nil {
			c.Detail = err.Error()
		}
		rep.Checks = append(rep.Checks, c)
		return err == nil
	}
	defer func() {
		rep.Works = true
		for _, c := range rep.Checks {
			rep.Works = rep.Works && c.OK
		}
	}()
	if !add("settings", s.Validate(), "url "+redactURL(s.URL)+", token in $"+s.TokenEnv+", timeout "+s.Deadline().String()) {
		return rep
	}
	tok, err := s.Token(getenv)
	if !add("token", err, "$"+s.TokenEnv+" is set") {
		return rep
	}
	owner, repo, rerr := ResolveOwnerRepo(ctx, s, local)
	if rerr != nil {
		// The server and token can still be checked.
		owner, repo = "-", "-"
	}
	g, err := NewGitea(ctx, GiteaOptions{URL: s.URL, Token: tok, Owner: owner, Repo: repo, Timeout: s.Deadline(), Log: log, tokenEnv: s.TokenEnv})
	detail := "Gitea answers and accepts the token"
	if g != nil && g.VersionWarning != nil {
		detail += fmt.Sprintf(" (version: %v)", g.VersionWarning)
	}
	if !add("server", err, detail) {
		return rep
	}
	if rerr != nil {
		// Outside a repository there is nothing to check the token
		// against: said, not failed.
		rep.Checks = append(rep.Checks, Check{Name: "repository", OK: true, Skipped: true,
			Detail: "not checked: " + rerr.Error() + " (or run doctor with -C DIR)"})
		return rep
	}
	rep.Repo = g.FullName()
	r, err := g.Repository(ctx)
	if err == nil && r.Archived {
		err = fmt.Errorf("repository %s on %s is archived: unarchive it, or point --owner/--repo elsewhere", rep.Repo, g.url)
	}
	if err == nil && r.Empty && !g.hasBranch(ctx, r.DefaultBranch) {
		err = fmt.Errorf("repository %s on %s is empty: push its default branch first (conductor push %s)", rep.Repo, g.url, cmp.Or(r.DefaultBranch, "main"))
	}
	if !add("repository", err, rep.Repo+", default branch "+r.DefaultBranch) {
		return rep
	}
	ok := r.CanPush
	if ok {
		ok, err = g.CanWrite(ctx)
	}
	if err == nil && !ok {
		err = forbidden(rep.Repo, g.url)
		var re *refusalError
		if errors.As(err, &re) {
			err = fmt.Errorf("%s: %s", re.refusal.Reason, re.refusal.Fix)
		}
	}
	add("token may push", err, "the token's scopes and the user's permission allow pushing to "+rep.Repo)
	return rep
}
