package patch

import (
	"context"
	"path/filepath"
)

// UserIdentity reads user.name and user.email the way git itself would for
// a commit in repo: the repository's own configuration, then the operator's
// global one (home's .gitconfig and $XDG_CONFIG_HOME/git/config, with their
// includes). Only those two values are read: nothing in either file is run.
// Empty strings mean git has no identity configured.
func UserIdentity(ctx context.Context, repo Git, home, xdgConfig string) (name, email string) {
	g := repo
	g.WorkTree = ""
	if home != "" {
		// Later entries win: the global file replaces the /dev/null guard.
		g = g.WithEnv("GIT_CONFIG_GLOBAL="+filepath.Join(home, ".gitconfig"), "HOME="+home)
		if xdgConfig != "" {
			g = g.WithEnv("XDG_CONFIG_HOME=" + xdgConfig)
		}
	}
	name, _ = g.Line(ctx, "config", "--includes", "--get", "user.name")
	email, _ = g.Line(ctx, "config", "--includes", "--get", "user.email")
	return name, email
}
