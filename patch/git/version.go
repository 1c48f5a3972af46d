package git

import (
	"context"
	"os/exec"
	"strings"
)

// GitVersion is `git version`'s answer ("git version 2.47.3"), run with
// the isolated environment of every conductor git (no repository needed).
func GitVersion(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "git", "version")
	cmd.Env = Git{}.Environ()
	out, err := cmd.Output()
	if err != nil {
		return "", &GitError{Args: []string{"version"}, Err: err}
	}
	return strings.TrimSpace(string(out)), nil
}
