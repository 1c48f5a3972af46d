package land

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
	"github.com/conductor-dev/conductor/policy"
)

// changes parses the canonical diff from the merge base of tip and the
// approved commit to the approved commit, which diff writes (and whose
// patch-id it returns), into policy changes. patch.ErrNoMergeBase when
// they share no history.
func (l *lander) changes(ctx context.Context, tip, approved string, diff func(io.Writer) (string, error)) ([]policy.Change, string, error) {
	pr, pw := io.Pipe()
	type diffed struct {
		pid string
		err error
	}
	done := make(chan diffed, 1)
	go func() {
		pid, err := diff(pw)
		pw.CloseWithError(err)
		done <- diffed{pid, err}
	}()
	cs, perr := policy.ParseChanges(pr)
	if perr == nil {
		_, perr = io.Copy(io.Discard, pr)
	}
	pr.CloseWithError(errors.New("diff consumer stopped"))
	r := <-done
	if r.err != nil {
		if errors.Is(r.err, patch.ErrNoMergeBase) {
			return nil, "", r.err
		}
		return nil, "", fmt.Errorf("diff %s...%s: %w", patch.Short(tip), patch.Short(approved), r.err)
	}
	if perr != nil {
		return nil, "", fmt.Errorf("diff %s...%s: %w", patch.Short(tip), patch.Short(approved), perr)
	}
	return cs, r.pid, nil
}

// existsAt answers "does this path exist in the tip's tree?" for the
// landing policy. Top-level names come from the root tree; deeper paths are
// asked one at a time and cached. An error answers "no", which can only
// make the policy stricter.
func (l *lander) existsAt(root git.Object) (func(string) bool, error) {
	es, err := git.ParseTree(root.Content)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", root.ID, err)
	}
	known := map[string]bool{}
	for _, e := range es {
		known[e.Name] = true
	}
	return func(p string) bool {
		p = strings.Trim(p, "/")
		if v, ok := known[p]; ok || !strings.Contains(p, "/") {
			return v
		}
		o, err := l.cat.Get(root.ID + ":" + p)
		v := err == nil && o.ID != ""
		known[p] = v
		return v
	}, nil
}

// linkAt answers "is this path a symlink in the tip's tree, and to what?"
// for the landing policy, which follows a new link through the tip's links.
// Each parent folder is read once; an error answers "no link".
func (l *lander) linkAt(root git.Object) func(string) (string, bool) {
	entries := map[string][]git.TreeEntry{}
	dirEntries := func(dir string) []git.TreeEntry {
		if es, ok := entries[dir]; ok {
			return es
		}
		name := root.ID
		if dir != "" {
			name += ":" + dir
		}
		var es []git.TreeEntry
		if o, err := l.cat.Get(name); err == nil && o.Type == "tree" {
			es, _ = git.ParseTree(o.Content)
		}
		entries[dir] = es
		return es
	}
	return func(p string) (string, bool) {
		dir, base := "", p
		if i := strings.LastIndexByte(p, '/'); i >= 0 {
			dir, base = p[:i], p[i+1:]
		}
		for _, e := range dirEntries(dir) {
			if e.Name == base && e.Mode == git.ModeSymlink {
				o, err := l.cat.Get(e.Hash.String())
				if err != nil || o.Type != "blob" {
					return "/", true // unreadable: taken as a link out of the repository
				}
				return string(o.Content), true
			}
		}
		return "", false
	}
}

// gate runs the gate on exactly tree, in a scratch root under the data
// root: root/tree is an empty folder (ModeTree) or a detached checkout of
// tree with its .git link removed before any gate command runs (ModeWorktree),
// so nothing the gate runs can reach the repository through git; root/home
// and root/tmp are the commands' HOME and TMPDIR. The root and the worktree's
// admin folder are removed before it returns.
func (l *lander) gate(ctx context.Context, cmds []policy.GateCommand, mode, tip, tree string) ([]sandbox.GateResult, error) {
	if len(cmds) == 0 && mode == ModeTree {
		return nil, nil
	}
	sb, err := l.gateSandbox()
	if err != nil {
		return nil, err
	}
	scratchDir := filepath.Join(l.dataDir, "scratch")
	var suffix [4]byte
	rand.Read(suffix[:])
	root := filepath.Join(scratchDir, "land-"+safeName(l.d.ID)+"-"+hex.EncodeToString(suffix[:]))
	dir := filepath.Join(root, "tree")
	for _, d := range []string{filepath.Join(root, "home"), filepath.Join(root, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	defer l.removeScratch(context.WithoutCancel(ctx), root)
	// The gate's worktree is always its own, removed with the scratch
	// root (never a worker pool's: a gate runs worker-written code, and
	// what it leaves, a repository planted in a submodule's folder for
	// one, must never reach a later task's host git).
	switch {
	case mode == ModeTree:
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
	default:
		if _, err := l.g.Run(ctx, "worktree", "add", "--detach", "--no-checkout", dir, tip); err != nil {
			return nil, fmt.Errorf("scratch worktree: %w", err)
		}
		wg, err := l.scratchGit(dir)
		if err != nil {
			return nil, err
		}
		if err := checkoutTree(ctx, wg, tree); err != nil {
			return nil, err
		}
		l.o.Fault("worktree")
	}
	sbRoot := filepath.Join(root, "sandbox") // HOME and TMPDIR, outside dir
	env := gateEnv(l.o.Getenv, sbRoot,
		"CONDUCTOR_LAND_DECISION="+l.d.ID,
		"CONDUCTOR_LAND_TARGET="+l.target,
		"CONDUCTOR_LAND_PARENT="+tip,
		"CONDUCTOR_LAND_TREE="+tree,
		"CONDUCTOR_LAND_REVIEWED="+l.approved.ID,
		"CONDUCTOR_LAND_MODE="+mode,
	)
	return runGate(ctx, sb, cmds, dir, sbRoot, env)
}

// checkoutTree makes the worktree's index and files exactly tree, checks
// it, and unlinks the worktree's .git so that nothing the gate runs reaches
// the repository through git.
func checkoutTree(ctx context.Context, wg git.Git, tree string) error {
	if _, err := wg.Run(ctx, "read-tree", "--reset", "-u", tree); err != nil {
		return fmt.Errorf("gate worktree: check out %s: %w", patch.Short(tree), err)
	}
	got, err := wg.Line(ctx, "write-tree")
	if err != nil {
		return err
	}
	if got != tree {
		return fmt.Errorf("gate worktree holds tree %s, expected %s", got, tree)
	}
	if err := os.Remove(filepath.Join(wg.WorkTree, ".git")); err != nil {
		return fmt.Errorf("gate worktree: unlink .git: %w", err)
	}
	return nil
}

func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	if b.Len() > 40 {
		return b.String()[:40]
	}
	return b.String()
}

// scratchGit returns a Git for a scratch worktree created by land: its admin
// dir is found among the repository's worktrees by the path it records.
func (l *lander) scratchGit(dir string) (git.Git, error) {
	admin, ok := l.adminDirs()[dir]
	if !ok {
		return git.Git{}, fmt.Errorf("scratch worktree %s: no admin dir in %s", dir, l.g.GitDir)
	}
	return git.Git{GitDir: admin, WorkTree: dir, Env: l.g.Env, Config: l.g.Config, Scratch: l.g.Scratch}, nil
}

// adminDirs maps the worktree path recorded in each admin dir under
// <gitdir>/worktrees to that admin dir.
func (l *lander) adminDirs() map[string]string {
	m := map[string]string{}
	base := filepath.Join(l.g.GitDir, "worktrees")
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		admin := filepath.Join(base, e.Name())
		b, err := os.ReadFile(filepath.Join(admin, "gitdir"))
		if err != nil {
			continue
		}
		m[filepath.Dir(strings.TrimSpace(string(b)))] = admin
	}
	return m
}

// removeScratch removes a scratch root and the admin folder of the
// worktree at root/tree, if any.
func (l *lander) removeScratch(ctx context.Context, root string) {
	if admin, ok := l.adminDirs()[filepath.Join(root, "tree")]; ok {
		os.RemoveAll(admin)
	}
	// A gate may leave read-only folders (Go's module cache does).
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	os.RemoveAll(root)
	// git removes worktrees/ when it becomes empty; do the same.
	os.Remove(filepath.Join(l.g.GitDir, "worktrees"))
}

// cleanStale removes scratch roots and worktree admin folders left by
// killed landings on this target. The caller holds the target's lock, so
// none is in use.
func (l *lander) cleanStale(ctx context.Context) error {
	scratchDir := filepath.Join(l.dataDir, "scratch")
	for path := range l.adminDirs() {
		if filepath.Dir(filepath.Dir(path)) == scratchDir {
			l.removeScratch(ctx, filepath.Dir(path))
		}
	}
	ents, err := os.ReadDir(scratchDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		l.removeScratch(ctx, filepath.Join(scratchDir, e.Name()))
	}
	return nil
}

// targetWT is a worktree that has the target branch checked out.
type targetWT struct {
	path string
	g    git.Git
	ref  string
}

// targetWorktree finds the worktree (main or linked) whose HEAD is the
// target branch, or nil.
func (l *lander) targetWorktree(ctx context.Context) (*targetWT, error) {
	want := "ref: " + l.ref
	head := func(gitdir string) bool {
		b, err := os.ReadFile(filepath.Join(gitdir, "HEAD"))
		return err == nil && strings.TrimSpace(string(b)) == want
	}
	if filepath.Base(l.g.GitDir) == ".git" && head(l.g.GitDir) {
		bare, _ := l.g.Line(ctx, "config", "--bool", "core.bare")
		if bare != "true" {
			wt := filepath.Dir(l.g.GitDir)
			return &targetWT{path: wt, ref: l.ref, g: git.Git{GitDir: l.g.GitDir, WorkTree: wt, Env: l.g.Env, Config: l.g.Config, Scratch: l.g.Scratch}}, nil
		}
	}
	for path, admin := range l.adminDirs() {
		if head(admin) {
			return &targetWT{path: path, ref: l.ref, g: git.Git{GitDir: admin, WorkTree: path, Env: l.g.Env, Config: l.g.Config, Scratch: l.g.Scratch}}, nil
		}
	}
	return nil, nil
}

// check refuses when the worktree could not follow the target from tip to
// tree: local changes to tracked files, or files in the way.
func (w *targetWT) check(ctx context.Context, tip, tree string) error {
	st, err := w.g.Run(ctx, "status", "--porcelain", "-z", "--untracked-files=no", "--ignore-submodules=all")
	if err != nil {
		return fmt.Errorf("status of %s: %w", w.path, err)
	}
	refuse := func(detail string) error {
		r := refusal.New("target-checked-out-dirty",
			fmt.Sprintf("%s is checked out in %s, which has local changes the landing would clash with", strings.TrimPrefix(w.ref, "refs/heads/"), w.path),
			"commit, stash or discard the changes in that worktree (or switch it to another branch), then land again")
		r.Detail = detail
		return r
	}
	if len(st) > 0 {
		return refuse(strings.ReplaceAll(strings.TrimRight(string(st), "\x00"), "\x00", "\n"))
	}
	if _, err := w.g.Run(ctx, "read-tree", "-m", "-u", "-n", tip, tree); err != nil {
		var ge *git.GitError
		if errors.As(err, &ge) {
			return refuse(strings.TrimSpace(string(ge.Stderr)))
		}
		return err
	}
	return nil
}

// sync moves the worktree's index and files from tip to commit (a two-tree
// fast-forward: git refuses rather than lose a local change).
func (w *targetWT) sync(ctx context.Context, tip, commit string) error {
	_, err := w.g.Run(ctx, "read-tree", "-m", "-u", tip, commit)
	return err
}
