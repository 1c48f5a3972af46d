package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
)

// enforcedPolicy loads the contracts a review or a landing enforces: the
// defaults merged with --roles DIR when the operator names one, else with
// the roles/ folder of the committed tree at rev in the repository
// gitDir. Never a working tree: a worker, a gate or a landed change could
// have written one, and the policy must not be loosened by what it checks.
// A rev that does not resolve (no such target yet) leaves the defaults.
func enforcedPolicy(ctx context.Context, flag, gitDir, rev string) (*policy.Policy, error) {
	if flag != "" {
		dir, err := resolveRolesDir(flag)
		if err != nil {
			return nil, err
		}
		if in, wt := inWorkTree(dir, gitDir); in {
			return nil, usagef("--roles %s is inside the repository's working tree %s, which a gate or a change can write: "+
				"pass a roles folder outside the repository, or leave --roles out to use the policy committed on the target", flag, wt)
		}
		return policy.Load(roles.FS, dir)
	}
	if gitDir == "" || rev == "" {
		return policy.Load(roles.FS, "")
	}
	files, label, err := committedRoles(ctx, patch.Git{GitDir: gitDir}, rev)
	if err != nil {
		return nil, err
	}
	if files == nil {
		return policy.Load(roles.FS, "")
	}
	return policy.LoadRepoFiles(roles.FS, files, label)
}

// committedRoles reads the contract files of roles/ in the tree of rev
// (regular files only; a symlink is not followed). nil when rev does not
// resolve or its tree has no roles/ folder.
func committedRoles(ctx context.Context, g patch.Git, rev string) (map[string][]byte, string, error) {
	tree, err := g.Line(ctx, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{tree}")
	if err != nil || !git.IsObjectID(tree) {
		return nil, "", nil
	}
	out, err := g.Run(ctx, "ls-tree", "-z", tree, "--", "roles/")
	if err != nil {
		return nil, "", fmt.Errorf("policy: list roles/ at %s: %w", rev, err)
	}
	files := map[string][]byte{}
	for _, rec := range strings.Split(string(out), "\x00") {
		meta, name, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		base, inRoles := strings.CutPrefix(name, "roles/")
		if !ok || len(f) != 3 || !inRoles || strings.Contains(base, "/") || !strings.HasSuffix(base, ".json") ||
			f[1] != "blob" || (f[0] != "100644" && f[0] != "100755") {
			continue
		}
		data, err := g.Run(ctx, "cat-file", "blob", f[2])
		if err != nil {
			return nil, "", fmt.Errorf("policy: read %s at %s: %w", name, rev, err)
		}
		files[base] = data
	}
	if len(files) == 0 {
		return nil, "", nil
	}
	return files, rev + ":roles", nil
}

// inWorkTree reports whether dir lies in the main working tree of the
// repository whose git dir is gitDir (".../repo/.git").
func inWorkTree(dir, gitDir string) (bool, string) {
	if filepath.Base(gitDir) != ".git" {
		return false, ""
	}
	wt, err := filepath.EvalSymlinks(filepath.Dir(gitDir))
	if err != nil {
		return false, ""
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, ""
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	rel, err := filepath.Rel(wt, abs)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)), wt
}
