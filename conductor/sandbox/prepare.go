package sandbox

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// PrepareWorktree makes dir usable by the sandbox uid. Call it after
// creating a worktree (or a scratch folder) and before the first command
// runs in it. The bwrap backend repeats the ownership step before every
// command, so files a tool wrote as root in between stay writable by the
// worker.
//
// When the conductor runs as root it checks that every ancestor of dir
// can be traversed by the sandbox uid (bwrap resolves the bind source as
// that user) and hands every entry of dir to the sandbox uid with lchown,
// except the worktree's own .git, which stays the conductor's. It never
// follows a symlink. When the conductor is not root the sandbox runs as
// the conductor's own uid and nothing needs to change: it only checks that
// dir is a directory.
func (o Options) PrepareWorktree(dir string) error {
	id, err := o.identity()
	if err != nil {
		return err
	}
	real, err := resolveDir("worktree", dir)
	if err != nil {
		return err
	}
	if !id.drop {
		return nil
	}
	if err := checkReachable("worktree", real, id); err != nil {
		return err
	}
	return handOver(real, id)
}

// Reachable reports whether the sandbox uid can reach path (which need not
// exist yet: its nearest existing ancestor is checked), with an error naming
// the folder that blocks it and the fix. It is always nil when the
// conductor is not root (the sandbox then runs as the conductor's uid).
func (o Options) Reachable(path string) error {
	id, err := o.identity()
	if err != nil {
		return err
	}
	if !id.drop {
		return nil
	}
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%q is not an absolute path", path)
	}
	p := filepath.Clean(path)
	for {
		fi, err := os.Stat(p)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s is not a folder", p)
			}
			break
		}
		if p == "/" {
			return err
		}
		p = filepath.Dir(p)
	}
	// p itself must be traversable too: worktrees are created below it.
	if b := blockedFolder(p, id); b != "" {
		return unreachable(path, b, id)
	}
	return nil
}

// checkReachable verifies that the sandbox uid can traverse every ancestor
// of dir (search permission), reporting the one that blocks it; what names
// dir in the message ("worktree", "scratch folder").
func checkReachable(what, dir string, id identity) error {
	if p := blockedFolder(filepath.Dir(dir), id); p != "" {
		return unreachable(what+" "+dir, p, id)
	}
	return nil
}

// blockedFolder returns the first of dir and its ancestors, from dir up,
// that the sandbox uid may not traverse ("" when none).
func blockedFolder(dir string, id identity) string {
	var blocked string
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return p
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			mode := fi.Mode().Perm()
			var can bool
			switch {
			case int(st.Uid) == id.uid:
				can = mode&0o100 != 0
			case int(st.Gid) == id.gid:
				can = mode&0o010 != 0
			default:
				can = mode&0o001 != 0
			}
			if !can {
				blocked = p // keep going: report the topmost
			}
		}
		if p == "/" || p == "." {
			return blocked
		}
	}
}

func unreachable(what, blocked string, id identity) error {
	desc := blocked
	if fi, err := os.Stat(blocked); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			desc = fmt.Sprintf("%s is mode %04o owned by %d:%d", blocked, fi.Mode().Perm(), st.Uid, st.Gid)
		}
	}
	return fmt.Errorf("%s is not reachable by the sandbox uid %d: %s; "+
		"put worktrees under a folder every user can traverse (e.g. WORKER_WORKTREE_BASE=/var/lib/conductor/worktrees) "+
		"or grant it with `chmod o+x %s`", what, id.uid, desc, blocked)
}

// handOver lchowns every entry of dir (dir included) that is not already
// the sandbox uid's, except dir/.git. It works through an os.Root opened on
// dir, so even a tree rearranged while it walks (a directory swapped for a
// symlink) cannot send it outside dir, and it never follows a symlink.
func handOver(dir string, id identity) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("prepare %s: %w", dir, err)
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("prepare %s: %w", dir, err)
		}
		if p == ".git" {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return fmt.Errorf("prepare %s: %w", dir, err)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == id.uid && int(st.Gid) == id.gid {
			return nil
		}
		if err := root.Lchown(p, id.uid, id.gid); err != nil {
			return fmt.Errorf("prepare %s: %w", dir, err)
		}
		return nil
	})
}
