package git

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// OpenRepo returns a Git for the operator's repository at path: a non-bare
// repository (path/.git is a directory), a bare repository (path holds HEAD
// and objects/) or a linked worktree of the operator's (path/.git is a file
// naming its git dir). It is for repositories the operator owns; a worker's
// worktree is never opened this way — callers use the git dir they created.
func OpenRepo(path string) (Git, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Git{}, fmt.Errorf("open repository %s: %w", path, err)
	}
	dotgit := filepath.Join(abs, ".git")
	fi, err := os.Lstat(dotgit)
	switch {
	case err == nil && fi.IsDir():
		return Git{GitDir: dotgit, WorkTree: abs}, nil
	case err == nil && fi.Mode().IsRegular():
		b, err := os.ReadFile(dotgit)
		if err != nil {
			return Git{}, fmt.Errorf("open repository %s: %w", path, err)
		}
		line := strings.TrimSpace(string(b))
		if !strings.HasPrefix(line, "gitdir: ") {
			return Git{}, fmt.Errorf("open repository %s: .git file does not name a git dir", path)
		}
		gd := strings.TrimPrefix(line, "gitdir: ")
		if !filepath.IsAbs(gd) {
			gd = filepath.Join(abs, gd)
		}
		return Git{GitDir: filepath.Clean(gd), WorkTree: abs}, nil
	}
	if isGitDir(abs) {
		return Git{GitDir: abs}, nil
	}
	return Git{}, fmt.Errorf("open repository %s: not a git repository", path)
}

func isGitDir(dir string) bool {
	for _, name := range []string{"HEAD", "objects", "refs"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return false
		}
	}
	return true
}

// CommonDir returns the repository's common git dir: for a linked worktree's
// private git dir, the main repository's; otherwise GitDir itself.
func (g Git) CommonDir() string {
	b, err := os.ReadFile(filepath.Join(g.GitDir, "commondir"))
	if err != nil {
		return g.GitDir
	}
	cd := strings.TrimSpace(string(b))
	if !filepath.IsAbs(cd) {
		cd = filepath.Join(g.GitDir, cd)
	}
	return filepath.Clean(cd)
}
