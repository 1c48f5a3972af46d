package patch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/conductor-dev/conductor/patch/git"
)

// CanonicalDiffArgs returns the options of the one canonical diff form that
// Extract and DiffTrees produce (after "diff-tree <from> <to>" semantics):
// recursive, full 40-hex index lines, no rename or copy detection, no
// external diff driver, no textconv, no colour, exactly three lines of
// context, full binary content (`--binary`, base85 literal or delta), the
// default (Myers) algorithm with git's default indent heuristic, no order
// file, and fixed a/ b/ prefixes. Together with the neutral attributes and
// configuration of the git dir these run in, the same change always gives
// the same bytes.
func CanonicalDiffArgs() []string {
	return []string{
		"-r", "-p", "--binary", "--full-index", "--no-renames",
		"--no-ext-diff", "--no-textconv", "--no-color", "-U3",
		"--src-prefix=a/", "--dst-prefix=b/",
		"--diff-algorithm=myers", "--indent-heuristic", "--inter-hunk-context=0",
		"--ignore-submodules=none", "-O/dev/null",
	}
}

// ExtractOptions says what to extract.
type ExtractOptions struct {
	// Repo is the repository the worktree belongs to: its git dir, or a
	// linked worktree's private git dir. Nothing inside WorkTree (its .git
	// file or directory included) is ever used to find the repository.
	Repo Git
	// WorkTree is the worktree whose content is extracted. It must be the
	// main worktree of Repo or one of its registered linked worktrees.
	WorkTree string
	// Base is the commit (or tree) the diff is taken against.
	Base string
	// Out receives the canonical diff; nil discards it.
	Out io.Writer
	// RemoveHazards removes every nested .git and special file the scan
	// finds (a worker's worktree: neither can be part of a diff). Without
	// it a worktree holding one is refused and left as it is (it may be
	// the operator's own, with initialised submodules).
	RemoveHazards bool
	// NoTree skips writing the worktree's tree (Extracted.Tree is empty):
	// for a caller that keeps only the diff, one git process fewer.
	NoTree bool
	// NeutralDir, when set, is a neutral git dir kept at that path for
	// this caller's extractions, one at a time (a pooled worktree's slot:
	// its lease is the guarantee). It is checked before every use and
	// replaced when anything in it is not ours; empty makes and removes a
	// throw-away one per extraction. Either way the files are the same.
	NeutralDir string
}

// Extracted describes an extracted diff.
type Extracted struct {
	// PatchID is BindingPatchID of the diff; empty when nothing changed.
	PatchID string `json:"patchId"`
	// Files lists the paths the diff touches, in git's path order.
	Files []string `json:"files"`
	// Tree is the id of the tree holding the worktree's whole content,
	// written into the repository's object store (empty with NoTree).
	Tree string `json:"tree"`
	// BaseTree is the tree of Base.
	BaseTree string `json:"baseTree"`
	// Bytes is the size of the diff.
	Bytes int64 `json:"bytes"`
	// Hazards are what ScanWorktree found (and removed) in the worktree
	// before git ran on it.
	Hazards []Hazard `json:"hazards,omitempty"`
}

// Extract writes ONE canonical diff of everything in the worktree against
// the base — modified, added (untracked and not ignored), deleted, binary
// (with full content), executable-bit and symlink changes — to opts.Out, and
// returns its binding patch-id, the paths it touches and the tree of the
// worktree's content.
//
// It works through a temporary index in a neutral git dir that shares only
// the repository's object store (see newNeutralRepo): the worker's own index
// is never written (a copy of it lends stat data, see seedIndex), no hook,
// fsmonitor, filter, textconv or external diff can run, and no attribute or
// configuration can change the bytes.
// The git dir and config found in the worktree are never looked at.
//
// Before git runs, the worktree is scanned (ScanWorktree): with
// RemoveHazards every nested .git and special file is removed (neither can
// be part of a diff), without it a worktree holding one is refused; every
// hazard is returned in Extracted.Hazards. The base's gitlinks
// (submodules) are kept as the base has them: whatever a worker put in or
// instead of a gitlink's folder is not collected, so git never reads a
// worker's repository there. A gitlink change cannot be extracted.
func Extract(ctx context.Context, opts ExtractOptions) (Extracted, error) {
	var ex Extracted
	wt, err := checkWorktree(opts.Repo, opts.WorkTree)
	if err != nil {
		return ex, fmt.Errorf("extract: %w", err)
	}
	if ex.Hazards, err = ScanWorktree(wt, ScanOptions{Remove: opts.RemoveHazards}); err != nil {
		return ex, fmt.Errorf("extract: %w", err)
	}
	if !opts.RemoveHazards {
		var bad []string
		for _, h := range ex.Hazards {
			if h.Code != HazardUnsafeName {
				bad = append(bad, h.String())
			}
		}
		if len(bad) > 0 {
			return ex, fmt.Errorf("extract: worktree %s holds what git must not see (remove it first): %s", wt, strings.Join(bad, "; "))
		}
	}
	// The base is resolved while the worktree is collected.
	type resolved struct {
		tree string
		err  error
	}
	base := make(chan resolved, 1)
	go func() {
		tree, err := resolveTree(ctx, opts.Repo, "base", opts.Base)
		base <- resolved{tree, err}
	}()
	baseTree := sync.OnceValues(func() (string, error) { r := <-base; return r.tree, r.err })
	var n *neutralRepo
	if opts.NeutralDir != "" {
		n, err = keptExtractRepo(opts.Repo, opts.NeutralDir, wt)
	} else {
		n, err = newNeutralRepo(opts.Repo, wt)
	}
	if err != nil {
		return ex, fmt.Errorf("extract: %w", err)
	}
	defer n.close()

	if !seedIndex(n, opts.Repo.GitDir) {
		bt, err := baseTree()
		if err != nil {
			return ex, fmt.Errorf("extract: %w", err)
		}
		if _, err := n.Run(ctx, "read-tree", bt); err != nil {
			return ex, fmt.Errorf("extract: read base tree: %w", err)
		}
	}
	add := []string{"add", "--all"}
	links, err := IndexGitlinks(n.indexFile())
	if err != nil {
		return ex, fmt.Errorf("extract: %w", err)
	}
	if len(links) > 0 {
		add = append(add, "--", ".")
		for _, l := range links {
			add = append(add, ":(exclude,literal)"+l)
		}
	}
	if _, err := n.Run(ctx, add...); err != nil {
		return ex, fmt.Errorf("extract: collect worktree %s: %w", wt, err)
	}
	if ex.BaseTree, err = baseTree(); err != nil {
		return ex, fmt.Errorf("extract: %w", err)
	}
	// The tree is written while the index is diffed against the base: the
	// same bytes as diffing the two trees (write-tree replaces the index
	// file atomically, so the diff reads one whole index either way).
	type written struct {
		tree string
		err  error
	}
	wrote := make(chan written, 1)
	if opts.NoTree {
		wrote <- written{}
	} else {
		go func() {
			tree, err := n.Line(ctx, "write-tree")
			wrote <- written{tree, err}
		}()
	}
	bare := Git{GitDir: n.GitDir, Env: n.Env, Config: n.Config}
	id, files, size, err := canonicalDiff(ctx, bare, []string{"diff-index", "--cached", "--raw"}, []string{ex.BaseTree}, opts.Out, true)
	w := <-wrote
	if w.err != nil {
		return ex, fmt.Errorf("extract: write tree: %w", w.err)
	}
	if err != nil {
		return ex, fmt.Errorf("extract: %w", err)
	}
	ex.Tree = w.tree
	ex.PatchID, ex.Files, ex.Bytes = id, files, size
	return ex, nil
}

// seedIndex starts the temporary index as a copy of the worktree's own
// index (its mtime kept, so git's racy-entry checks stay right): `add --all`
// then hashes just the files whose stat data changed and rewrites only the
// trees they are in, instead of hashing every file. The result is the
// worktree's content either way: an entry whose stat data is unchanged holds
// the file's blob. Only the index is read, never changed. An index that
// cannot lend its stat data that way falls back to an empty start (false):
// one with entries git would not look at (assume-unchanged, skip-worktree),
// conflicts, a split or sparse index, or one it cannot parse.
func seedIndex(n *neutralRepo, gitDir string) bool {
	src := filepath.Join(gitDir, "index")
	fi, err := os.Lstat(src)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	b, err := os.ReadFile(src)
	if err != nil || !git.IndexSeedable(b) {
		return false
	}
	err = os.WriteFile(n.indexFile(), b, 0o600)
	if err == nil {
		err = os.Chtimes(n.indexFile(), fi.ModTime(), fi.ModTime())
	}
	if err != nil {
		os.Remove(n.indexFile())
		return false
	}
	return true
}

// IndexIsPlain is git.IndexIsPlain: whether every entry of an index file
// is one git refreshes from the file's stat data.
func IndexIsPlain(path string) bool { return git.IndexIsPlain(path) }

// DiffTrees writes the canonical diff (the form Extract produces) between
// two commits or trees of g's repository to w and returns its binding
// patch-id (empty when the trees are equal). Land uses it for the squash's
// patch-id, review for a work commit.
func DiffTrees(ctx context.Context, g Git, from, to string, w io.Writer) (string, error) {
	d, err := NewTreeDiffer(g)
	if err != nil {
		return "", err
	}
	defer d.Close()
	return d.Diff(ctx, from, to, w)
}

// TreeDiffer runs DiffTrees for one repository through one neutral git dir,
// made once: for a caller that diffs several pairs (land). Diff may be
// called concurrently; Close removes the git dir.
type TreeDiffer struct {
	repo Git
	n    *neutralRepo
}

// NewTreeDiffer makes the neutral git dir the diffs run in.
func NewTreeDiffer(repo Git) (*TreeDiffer, error) {
	n, err := newNeutralRepo(repo, "")
	if err != nil {
		return nil, fmt.Errorf("diff trees: %w", err)
	}
	return &TreeDiffer{repo: repo, n: n}, nil
}

// NewTreeDifferAt is NewTreeDiffer through the kept neutral git dir at
// dir (made there on first use, checked on every one, never removed: see
// keptNeutralRepo), for a caller that diffs on every run and would
// otherwise make and remove a git dir each time (land). When dir cannot
// serve, it makes a throw-away one as NewTreeDiffer does.
func NewTreeDifferAt(repo Git, dir string) (*TreeDiffer, error) {
	n, err := keptNeutralRepo(repo, dir)
	if err != nil {
		return NewTreeDiffer(repo)
	}
	return &TreeDiffer{repo: repo, n: n}, nil
}

// Close removes the neutral git dir (a kept one stays).
func (d *TreeDiffer) Close() { d.n.close() }

// Diff is DiffTrees through d.
func (d *TreeDiffer) Diff(ctx context.Context, from, to string, w io.Writer) (string, error) {
	fromTree, toTree := from, to
	// Full object ids (of commits or trees) go to diff-tree as they are;
	// anything else is resolved and checked first.
	if !git.IsObjectID(from) || !git.IsObjectID(to) {
		var err error
		if fromTree, err = resolveTree(ctx, d.repo, "from", from); err != nil {
			return "", fmt.Errorf("diff trees: %w", err)
		}
		if toTree, err = resolveTree(ctx, d.repo, "to", to); err != nil {
			return "", fmt.Errorf("diff trees: %w", err)
		}
	}
	if fromTree == toTree {
		return "", nil
	}
	id, _, _, err := canonicalDiff(ctx, d.n.Git, []string{"diff-tree"}, []string{fromTree, toTree}, w, false)
	if err != nil {
		return "", fmt.Errorf("diff trees %s..%s: %w", from, to, err)
	}
	return id, nil
}

// ErrNoMergeBase is returned by DiffFromMergeBase for commits that share
// no history.
var ErrNoMergeBase = errors.New("no merge base")

// DiffFromMergeBase writes the canonical diff from the merge base of a and
// b to b (what `git diff a...b` shows; with several merge bases, the one git
// picks) and returns its binding patch-id: the merge base and the diff in
// one git process.
func (d *TreeDiffer) DiffFromMergeBase(ctx context.Context, a, b string, w io.Writer) (string, error) {
	if !git.IsObjectID(a) || !git.IsObjectID(b) {
		return "", fmt.Errorf("diff from merge base: %q and %q must be full object ids", a, b)
	}
	id, _, _, err := canonicalDiff(ctx, d.n.Git, []string{"diff"}, []string{a + "..." + b}, w, false)
	var ge *git.GitError
	if errors.As(err, &ge) && bytes.Contains(ge.Stderr, []byte(": no merge base")) {
		return "", ErrNoMergeBase
	}
	if err != nil {
		return "", fmt.Errorf("diff %s...%s: %w", a, b, err)
	}
	return id, nil
}

// parseRawLine reads one line of `diff-tree --raw` output (without -z:
// the path is C-quoted when git quotes it) and refuses gitlinks, which a
// diff cannot carry.
func parseRawLine(line string) (string, error) {
	tab := strings.IndexByte(line, '\t')
	if !strings.HasPrefix(line, ":") || tab < 0 {
		return "", fmt.Errorf("list changes: unexpected raw line %q", line)
	}
	m := strings.Fields(line[1:tab])
	path := line[tab+1:]
	if strings.HasPrefix(path, "\"") {
		p, err := strconv.Unquote(path)
		if err != nil {
			return "", fmt.Errorf("list changes: unexpected quoted path %s", path)
		}
		path = p
	}
	if len(m) < 2 {
		return "", fmt.Errorf("list changes: unexpected raw line %q", line)
	}
	if m[0] == "160000" || m[1] == "160000" {
		return "", fmt.Errorf("%s: embedded git repository (submodule) cannot be extracted; remove it or its .git", path)
	}
	return path, nil
}

// canonicalDiff streams the canonical diff cmd (a git subcommand and its
// own options) writes for revs to w while hashing it, and returns the
// binding patch-id and the size. With files set, cmd has --raw: the same
// git process first lists the changed paths (read and checked before any
// byte reaches w) and they are returned too.
func canonicalDiff(ctx context.Context, g Git, cmd, revs []string, w io.Writer, withFiles bool) (string, []string, int64, error) {
	s := g.Start(ctx, append(append(slices.Clone(cmd), CanonicalDiffArgs()...), revs...)...)
	if err := s.Send(""); err != nil {
		return "", nil, 0, err
	}
	if w == nil {
		w = io.Discard
	}
	br := s.Stdout()
	var files []string
	if withFiles {
		for {
			line, err := br.ReadString('\n')
			line = strings.TrimSuffix(line, "\n")
			if err == io.EOF && line == "" {
				break
			}
			if line == "" {
				break // the blank line between the list and the patch
			}
			path, perr := parseRawLine(line)
			if perr != nil {
				s.Kill()
				s.Wait()
				return "", nil, 0, perr
			}
			files = append(files, path)
			if err != nil {
				break
			}
		}
	}

	pr, pw := io.Pipe()
	type idResult struct {
		id  string
		err error
	}
	done := make(chan idResult, 1)
	go func() {
		id, err := BindingPatchID(pr)
		io.Copy(io.Discard, pr) // never block the writer
		done <- idResult{id, err}
	}()
	cw := &countingWriter{w: w}
	_, copyErr := io.Copy(io.MultiWriter(cw, pw), br)
	if copyErr != nil {
		s.Kill()
	}
	err := s.Wait()
	pw.Close()
	res := <-done
	switch {
	case cw.err != nil:
		return "", nil, cw.n, fmt.Errorf("write diff: %w", cw.err)
	case copyErr != nil:
		return "", nil, cw.n, fmt.Errorf("read diff: %w", copyErr)
	case err != nil:
		return "", nil, cw.n, err
	}
	if res.err != nil && !(errors.Is(res.err, ErrNoPatch) && cw.n == 0) {
		return "", nil, cw.n, res.err
	}
	return res.id, files, cw.n, nil
}

type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// WorktreeRepo returns the Git of the worktree dir of repo: the main
// repository's git dir for its main worktree, or the private git dir of a
// registered linked worktree, with WorkTree set to dir. It decides from the
// repository's own records (never from dir/.git, which a worker controls)
// and fails when dir is not a worktree of repo.
func WorktreeRepo(repo Git, dir string) (Git, error) {
	abs, gitDir, err := findWorktree(repo, dir)
	if err != nil {
		return Git{}, err
	}
	g := repo
	g.GitDir, g.WorkTree = gitDir, abs
	return g, nil
}

// checkWorktree verifies that dir is a worktree of repo and returns its
// absolute path.
func checkWorktree(repo Git, dir string) (string, error) {
	abs, _, err := findWorktree(repo, dir)
	return abs, err
}

func findWorktree(repo Git, dir string) (abs, gitDir string, err error) {
	if dir == "" {
		return "", "", errors.New("no worktree given")
	}
	abs, err = filepath.Abs(dir)
	if err != nil {
		return "", "", fmt.Errorf("worktree %s: %w", dir, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", "", fmt.Errorf("worktree %s: not a worktree: %w", dir, errors.Unwrap(err))
	}
	if !fi.IsDir() {
		return "", "", fmt.Errorf("worktree %s: not a worktree (not a directory)", dir)
	}
	if repo.GitDir == "" {
		return "", "", fmt.Errorf("worktree %s: no repository given", dir)
	}
	// The candidates in turn, the first that is dir answering: the
	// private git dir given (a pool's lease names its own), the main
	// worktree, then every linked worktree git registered.
	common := repo.CommonDir()
	is := func(wt string) bool {
		cfi, err := os.Stat(wt)
		return err == nil && os.SameFile(fi, cfi)
	}
	// registered is the worktree the private git dir's gitdir file names.
	registered := func(private string) (string, bool) {
		b, err := os.ReadFile(filepath.Join(private, "gitdir"))
		if err != nil {
			return "", false
		}
		p := strings.TrimSpace(string(b))
		if !filepath.IsAbs(p) {
			p = filepath.Join(private, p)
		}
		return filepath.Dir(p), true
	}
	if wt, ok := registered(repo.GitDir); ok && is(wt) {
		return abs, repo.GitDir, nil
	}
	if filepath.Base(common) == ".git" && is(filepath.Dir(common)) {
		return abs, common, nil
	}
	if entries, err := os.ReadDir(filepath.Join(common, "worktrees")); err == nil {
		for _, e := range entries {
			private := filepath.Join(common, "worktrees", e.Name())
			if wt, ok := registered(private); ok && is(wt) {
				return abs, private, nil
			}
		}
	}
	return "", "", fmt.Errorf("worktree %s: not a worktree of repository %s", dir, common)
}
