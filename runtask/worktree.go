package runtask

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/patch"
	pgit "github.com/conductor-dev/conductor/patch/git" // git names a test helper in this package
)

// ResolveRepo finds the repository a task's workspace names: the explicit
// repo (--repo), else <cfg.RepoRoot>/<workspace> (WORKER_REPO_ROOT), else
// the conductor's clone under <data root>/workspaces/<workspace>.
func ResolveRepo(repo, workspace string, cfg conductor.Config) (patch.Git, error) {
	if repo != "" {
		g, err := pgit.OpenRepo(repo)
		if err != nil {
			return g, fmt.Errorf("workspace %s: --repo: %w", workspace, err)
		}
		return g, nil
	}
	var tried []string
	if root := cfg.RepoRoot; root != "" {
		p := filepath.Join(root, workspace)
		if _, err := os.Stat(p); err == nil {
			return pgit.OpenRepo(p)
		}
		tried = append(tried, p+" (WORKER_REPO_ROOT)")
	}
	p := filepath.Join(cfg.WorkspacesDir(), workspace)
	if _, err := os.Stat(p); err == nil {
		return pgit.OpenRepo(p)
	}
	tried = append(tried, p+" (the conductor's clone)")
	return patch.Git{}, fmt.Errorf("workspace %q: no repository found; tried %s; pass --repo DIR", workspace, strings.Join(tried, ", "))
}

// ResolveBase turns a task's base (default HEAD) into a commit id of repo.
func ResolveBase(ctx context.Context, repo patch.Git, base string) (string, error) {
	if base == "" {
		// The repository's HEAD, read in process: every task without a
		// base asks this (a branch always holds a commit).
		if ids, err := pgit.ReadRefs(repo.CommonDir(), "HEAD"); err == nil && ids[0] != "" {
			return ids[0], nil
		}
		base = "HEAD"
	}
	id, err := patch.Git{GitDir: repo.CommonDir()}.Line(ctx, "rev-parse", "--verify", "--quiet", "--end-of-options", base+"^{commit}")
	if err != nil || id == "" {
		return "", fmt.Errorf("base %q: not a commit in %s", base, repo.CommonDir())
	}
	return id, nil
}

// extractPatch writes the worktree's whole difference from base to out
// (atomically: temp file, fsync, rename) through the patch package, the one
// extraction path shared with `conductor extract`.
func extractPatch(ctx context.Context, l *Lease, base, out string) (ex patch.Extracted, err error) {
	err = runrec.WriteAtomic(out, 0o644, func(w io.Writer) error {
		ex, err = patch.Extract(ctx, patch.ExtractOptions{Repo: patch.Git{GitDir: l.Meta.GitDir}, WorkTree: l.Dir(), Base: base, Out: w,
			RemoveHazards: true, NoTree: true, NeutralDir: l.neutralDir()})
		return err
	})
	return ex, err
}

// toHazards converts what patch.ScanWorktree found into run-record hazards.
func toHazards(hs []patch.Hazard) []runrec.Hazard {
	out := make([]runrec.Hazard, 0, len(hs))
	for _, h := range hs {
		out = append(out, runrec.Hazard{Code: h.Code, Path: h.Path, Detail: h.Detail})
	}
	return out
}

// addHazards records hazards once each (by code and path), in the order
// first found, and warns about each new one.
func (r *runner) addHazards(hs []runrec.Hazard) {
	for _, h := range hs {
		if !slices.ContainsFunc(r.hazards, func(o runrec.Hazard) bool { return o.Code == h.Code && o.Path == h.Path }) {
			r.hazards = append(r.hazards, h)
			r.warnf("worktree hazard: %s %s: %s", h.Code, h.Path, h.Detail)
		}
	}
}

// clearHazards scans the worktree after a sandboxed command, before any
// host git runs on it again: nested .git entries and special files are
// removed (git would read a worker's repository configuration, or block on
// a pipe) and every hazard is recorded for the run's result. An error
// means the worktree could not be made safe: the caller must not run git.
func (r *runner) clearHazards() error {
	hs, err := patch.ScanWorktree(r.lease.Dir(), patch.ScanOptions{Remove: true})
	r.addHazards(toHazards(hs))
	return err
}

// applyPatch re-creates a session's earlier output in a fresh worktree.
func applyPatch(ctx context.Context, wt patch.Git, file string) error {
	fi, err := os.Stat(file)
	if err != nil || fi.Size() == 0 {
		return err
	}
	if _, err := wt.Run(ctx, "apply", "--binary", "--whitespace=nowarn", "--", file); err != nil {
		return fmt.Errorf("re-apply the session's patch %s: %w", file, err)
	}
	return nil
}

// changedFiles lists worktree paths that differ from HEAD or are untracked
// (not ignored). The worktree must have been scanned first (see
// clearHazards): git never enters a submodule or a nested repository.
func changedFiles(ctx context.Context, wt patch.Git) ([]string, error) {
	out, err := wt.Run(ctx, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", "--ignore-submodules=all")
	if err != nil {
		return nil, err
	}
	var files []string
	for _, rec := range strings.Split(string(out), "\x00") {
		if len(rec) > 3 {
			files = append(files, rec[3:])
		}
	}
	return files, nil
}

// hashFile returns the sha256 of a worktree file's content ("" when absent,
// "dir" for a folder, "link:<sha>" for a symlink's target).
func hashFile(root *os.Root, p string) string {
	fi, err := root.Lstat(p)
	if err != nil {
		return ""
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		t, _ := root.Readlink(p)
		sum := sha256.Sum256([]byte(t))
		return "link:" + hex.EncodeToString(sum[:])
	case fi.IsDir():
		return "dir"
	case !fi.Mode().IsRegular():
		return "special:" + fi.Mode().Type().String()
	case fi.Size() > hashMaxSize:
		// A huge (perhaps sparse) file a command wrote is not read whole.
		return fmt.Sprintf("large:%d:%d", fi.Size(), fi.ModTime().UnixNano())
	}
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	buf := hashBufs.Get().(*[]byte)
	defer hashBufs.Put(buf)
	// The reader is wrapped so that the copy uses buf (an *os.File would
	// copy through a buffer of its own, made anew for every file).
	if _, err := io.CopyBuffer(h, struct{ io.Reader }{f}, *buf); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// hashBufs are hashFile's read buffers, reused: a run hashes the files it
// touched at every step.
var hashBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// hashMaxSize bounds the files hashed for checkpoints and drift checks.
const hashMaxSize = 256 << 20

// touchedSet tracks files the worker changed, with content hashes.
type touchedSet map[string]string

func (t touchedSet) update(root *os.Root, paths ...string) {
	for _, p := range paths {
		t[p] = hashFile(root, p)
	}
}

func (t touchedSet) list() []bus.FileHash {
	out := make([]bus.FileHash, 0, len(t))
	for p, h := range t {
		out = append(out, bus.FileHash{Path: p, Hash: h})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// driftCheck compares recorded hashes with the worktree; skip lists paths a
// half-finished call may have changed.
func driftCheck(root *os.Root, files []bus.FileHash, skip map[string]bool) []string {
	var drifted []string
	for _, f := range files {
		if skip[f.Path] {
			continue
		}
		if hashFile(root, f.Path) != f.Hash {
			drifted = append(drifted, f.Path)
		}
	}
	return drifted
}
