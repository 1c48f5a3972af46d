package runtask

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/filelock"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/patch"
	pgit "github.com/conductor-dev/conductor/patch/git" // git names a test helper in this package
)

// Pool keeps finished worktrees of one repository warm: a released worktree
// is reset completely (tracked files, index, untracked and ignored files,
// stash entries and the branch it was left on) and kept for the next task,
// which resets it to its own base instead of checking out a new tree. The
// pool is bounded by count and disk and evicts the least recently used
// worktree; a worktree that cannot be verified clean is discarded, never
// reused. Slots are guarded by flock(2), so worker processes on one host
// share a pool safely; a crashed process's lock is released by the kernel.
type Pool struct {
	Dir      string    // this repository's pool folder: WORKER_WORKTREE_BASE/<repo-key>
	Repo     patch.Git // the repository (its common git dir)
	MaxCount int       // free worktrees kept; 0 keeps none (every release discards)
	MaxBytes int64     // disk bound of the free worktrees; 0: unbounded
	Now      func() time.Time
}

// Slot states.
const (
	SlotFree = "free"
	SlotBusy = "busy"
)

// SlotMeta is a slot's metadata file (<slot>.json beside the worktree).
type SlotMeta struct {
	Slot     string    `json:"slot"`
	Worktree string    `json:"worktree"`
	GitDir   string    `json:"gitDir"` // the linked worktree's private git dir
	State    string    `json:"state"`
	Owner    string    `json:"owner,omitempty"` // workspace/session holding it
	Base     string    `json:"base"`            // the commit it was (reset) at
	LastUsed time.Time `json:"lastUsed"`
	Bytes    int64     `json:"bytes,omitempty"`
	// Baselines taken when the lease began, for a complete reset.
	StashCount int      `json:"stashCount"`
	StashTip   string   `json:"stashTip,omitempty"`
	Branches   []string `json:"branches,omitempty"`
}

// Lease is one worktree held by one process.
type Lease struct {
	Meta  SlotMeta
	Git   patch.Git // the worktree's git dir and the worktree
	Fresh bool      // created for this lease (not taken from the pool)
	pool  *Pool
	lock  *os.File

	// scan is what the last checkHazards with stats saw (scanAt: when it
	// began); verified is the worktree as taken, known exactly its base,
	// for ReleaseKnown to leave a clean mark from (see cleanmark.go).
	scan     patch.Stats
	scanAt   time.Time
	verified *cleanMark
}

// Dir is the worktree path.
func (l *Lease) Dir() string { return l.Meta.Worktree }

// NewPool returns the pool of repo under base (the worktree base), bounded
// by the operator's pool knobs (conductor.Config.Pool, PoolMaxBytes).
func NewPool(base string, repo patch.Git, cfg conductor.Config) *Pool {
	common := repo.CommonDir()
	return &Pool{
		Dir:      filepath.Join(base, RepoKey(common)),
		Repo:     patch.Git{GitDir: common},
		MaxCount: cfg.Pool(),
		MaxBytes: cfg.PoolMaxBytes,
		Now:      time.Now,
	}
}

var unsafeKey = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// RepoKey names a repository's pool folder: a readable base name plus a hash
// of its common git dir.
func RepoKey(commonDir string) string {
	abs, _ := filepath.Abs(commonDir)
	name := filepath.Base(strings.TrimSuffix(abs, string(filepath.Separator)+".git"))
	name = strings.TrimSuffix(name, ".git")
	name = unsafeKey.ReplaceAllString(name, "_")
	if len(name) > 40 {
		name = name[:40]
	}
	sum := sha256.Sum256([]byte(abs))
	return name + "-" + hex.EncodeToString(sum[:5])
}

func (p *Pool) metaPath(slot string) string { return filepath.Join(p.Dir, slot+".json") }
func (p *Pool) lockPath(slot string) string { return filepath.Join(p.Dir, slot+".lock") }

// neutralPath is the neutral git dir kept for the slot's extractions
// (patch.ExtractOptions.NeutralDir): the slot's lease makes them one at a
// time, and it goes with the slot.
func (p *Pool) neutralPath(slot string) string { return filepath.Join(p.Dir, slot+".git") }

// neutralDir is the lease's kept neutral git dir.
func (l *Lease) neutralDir() string { return l.pool.neutralPath(l.Meta.Slot) }

// withPoolLock runs fn holding the pool-wide lock: the scans that pick
// slots by their metadata and the adding and removing of slots. A slot's
// own metadata is written by the holder of its lock file alone (every
// process tries that lock before it acts on a slot, and ReplaceFile
// swaps the file whole), so those writes, and their fsyncs, happen
// outside the pool-wide lock. Slow git work happens outside it too.
func (p *Pool) withPoolLock(fn func() error) error {
	l, err := filelock.Lock(filepath.Join(p.Dir, "pool.lock"))
	if err != nil {
		return err
	}
	defer filelock.Unlock(l)
	return fn()
}

// withGitLock serialises `git worktree add/remove/prune` on the repository:
// git reads every registered worktree's admin folder while it adds one, and
// fails on one that another process is creating at the same moment.
func (p *Pool) withGitLock(fn func() error) error {
	l, err := filelock.Lock(filepath.Join(p.Dir, "git.lock"))
	if err != nil {
		return err
	}
	defer filelock.Unlock(l)
	return fn()
}

func (p *Pool) readMeta(slot string) (SlotMeta, error) {
	var m SlotMeta
	b, err := os.ReadFile(p.metaPath(slot))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("pool slot %s: %w", slot, err)
	}
	return m, nil
}

func (p *Pool) writeMeta(m SlotMeta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return runrec.ReplaceFile(p.metaPath(m.Slot), append(b, '\n'), 0o644)
}

// slots lists the slot names that have metadata.
func (p *Pool) slots() ([]string, error) {
	entries, err := os.ReadDir(p.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() && strings.HasPrefix(name, "wt-") {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Acquire returns a worktree at base (a full commit id) for owner: the
// nearest free pooled worktree reset to base, else a new one.
func (p *Pool) Acquire(ctx context.Context, base, owner string) (*Lease, error) {
	for attempt := 0; attempt < 3; attempt++ {
		l, err := p.takeFree(ctx, base, owner)
		if err != nil {
			return nil, err
		}
		if l == nil {
			break
		}
		if err := l.prepare(ctx, base); err != nil {
			l.discard(ctx)
			continue
		}
		return l, nil
	}
	return p.create(ctx, base, owner)
}

// takeFree picks and locks the free slot nearest to base.
func (p *Pool) takeFree(ctx context.Context, base, owner string) (*Lease, error) {
	var lease *Lease
	err := p.withPoolLock(func() error {
		names, err := p.slots()
		if err != nil {
			return err
		}
		type cand struct {
			meta SlotMeta
			lock *os.File
			dist int
		}
		var cands []cand
		for _, name := range names {
			m, err := p.readMeta(name)
			if err != nil || m.State != SlotFree {
				continue
			}
			lk, err := filelock.TryLock(p.lockPath(name))
			if err != nil || lk == nil {
				continue
			}
			cands = append(cands, cand{meta: m, lock: lk, dist: p.distance(ctx, m.Base, base)})
		}
		if len(cands) == 0 {
			return nil
		}
		sort.SliceStable(cands, func(i, j int) bool {
			if cands[i].dist != cands[j].dist {
				return cands[i].dist < cands[j].dist
			}
			return cands[i].meta.LastUsed.After(cands[j].meta.LastUsed)
		})
		for _, c := range cands[1:] {
			filelock.Unlock(c.lock)
		}
		m := cands[0].meta
		m.State, m.Owner, m.LastUsed = SlotBusy, owner, p.Now()
		lease = &Lease{Meta: m, Git: patch.Git{GitDir: m.GitDir, WorkTree: m.Worktree}, pool: p, lock: cands[0].lock}
		return nil
	})
	if err != nil || lease == nil {
		return nil, err
	}
	// The slot's lock is ours: its metadata is written outside the
	// pool-wide lock.
	if err := p.writeMeta(lease.Meta); err != nil {
		filelock.Unlock(lease.lock)
		return nil, err
	}
	return lease, nil
}

// distance is how far commit a is from b (0 when equal; commits unknown to
// the repository are far).
func (p *Pool) distance(ctx context.Context, a, b string) int {
	if a == b {
		return 0
	}
	out, err := p.Repo.Line(ctx, "rev-list", "--count", a+"..."+b, "--")
	if err != nil {
		return 1 << 30
	}
	n, err := strconv.Atoi(out)
	if err != nil {
		return 1 << 30
	}
	return n
}

// Adopt takes over the worktree a session left behind (a crash, a
// cancellation, --keep-worktree) without resetting it.
func (p *Pool) Adopt(ctx context.Context, slot, owner string) (*Lease, error) {
	lk, err := filelock.TryLock(p.lockPath(slot))
	if err != nil {
		return nil, err
	}
	if lk == nil {
		return nil, fmt.Errorf("worktree %s of %s is in use by another process", slot, owner)
	}
	var lease *Lease
	err = p.withPoolLock(func() error {
		m, err := p.readMeta(slot)
		if err != nil {
			return fmt.Errorf("worktree %s: %w", slot, err)
		}
		if m.Owner != owner {
			return fmt.Errorf("worktree %s belongs to %q, not %q", slot, m.Owner, owner)
		}
		m.State, m.LastUsed = SlotBusy, p.Now()
		if err := p.writeMeta(m); err != nil {
			return err
		}
		lease = &Lease{Meta: m, Git: patch.Git{GitDir: m.GitDir, WorkTree: m.Worktree}, pool: p, lock: lk}
		return nil
	})
	if err != nil {
		filelock.Unlock(lk)
		return nil, err
	}
	if _, err := lease.Git.Line(ctx, "rev-parse", "--verify", "HEAD"); err != nil {
		lease.discard(ctx)
		return nil, fmt.Errorf("worktree %s is broken: %w", slot, err)
	}
	return lease, nil
}

// ReclaimOrphans returns to the pool the worktrees owner holds that no
// live process does: what a run killed after taking its worktree but
// before its session state named it left behind (the state is what Adopt
// goes by). Each is reset like any release (or discarded when it cannot
// be); the caller must know owner has no kept worktree of its own.
func (p *Pool) ReclaimOrphans(ctx context.Context, owner string) (int, error) {
	orphans, err := p.claimWhere(func(m SlotMeta) bool { return m.State == SlotBusy && m.Owner == owner })
	var errs []error
	for _, l := range orphans {
		l.Git = patch.Git{GitDir: l.Meta.GitDir, WorkTree: l.Meta.Worktree}
		errs = append(errs, l.Release(ctx))
	}
	return len(orphans), errors.Join(append(errs, err)...)
}

func newSlotName() string {
	var b [6]byte
	rand.Read(b[:])
	return "wt-" + hex.EncodeToString(b[:])
}

// create checks out a new linked worktree at base.
func (p *Pool) create(ctx context.Context, base, owner string) (*Lease, error) {
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("worktree pool: %w", err)
	}
	if err := p.writePoolInfo(); err != nil {
		return nil, err
	}
	slot := newSlotName()
	lk, err := filelock.Lock(p.lockPath(slot))
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(p.Dir, slot)
	m := SlotMeta{Slot: slot, Worktree: dir, State: SlotBusy, Owner: owner, Base: base, LastUsed: p.Now()}
	if err := p.writeMeta(m); err != nil {
		filelock.Unlock(lk)
		return nil, err
	}
	if err := p.withGitLock(func() error {
		_, err := p.Repo.Run(ctx, "worktree", "add", "--detach", "--quiet", dir, base)
		return err
	}); err != nil {
		p.removeSlot(ctx, m)
		filelock.Unlock(lk)
		return nil, fmt.Errorf("create worktree at %s: %w", base, err)
	}
	gd, err := p.findGitDir(dir)
	if err != nil {
		p.removeSlot(ctx, m)
		filelock.Unlock(lk)
		return nil, err
	}
	m.GitDir = gd
	l := &Lease{Meta: m, Git: patch.Git{GitDir: gd, WorkTree: dir}, pool: p, lock: lk, Fresh: true}
	if err := l.baseline(ctx); err != nil {
		l.discard(ctx)
		return nil, err
	}
	if err := p.writeMeta(l.Meta); err != nil {
		l.discard(ctx)
		return nil, err
	}
	// Just checked out by git, nothing else has written here: the state
	// a release can leave a clean mark from (a hazard here leaves none;
	// a pool that keeps nothing never takes it again).
	if p.MaxCount > 0 && l.checkHazards(true) == nil {
		l.verified = l.markHere(base)
	}
	return l, nil
}

// findGitDir finds the private git dir git made for worktree dir, reading
// only the repository's side (never the worktree's .git file).
func (p *Pool) findGitDir(dir string) (string, error) {
	want := filepath.Join(dir, ".git")
	admin := filepath.Join(p.Repo.GitDir, "worktrees")
	try := func(name string) bool {
		b, err := os.ReadFile(filepath.Join(admin, name, "gitdir"))
		return err == nil && filepath.Clean(strings.TrimSpace(string(b))) == want
	}
	if base := filepath.Base(dir); try(base) {
		return filepath.Join(admin, base), nil
	}
	entries, _ := os.ReadDir(admin)
	for _, e := range entries {
		if try(e.Name()) {
			return filepath.Join(admin, e.Name()), nil
		}
	}
	return "", fmt.Errorf("worktree %s: git did not register it under %s", dir, admin)
}

// baseline records the stash and branches present when the lease begins.
func (l *Lease) baseline(ctx context.Context) error {
	// The branches and the stash are read in process (the common git
	// dir's refs); git lists them when go-git cannot.
	refs, err := pgit.ListRefs(l.pool.Repo.CommonDir(), "refs/heads/", "refs/stash")
	if err != nil {
		out, err := l.Git.Run(ctx, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/", "refs/stash")
		if err != nil {
			return fmt.Errorf("worktree %s: list branches: %w", l.Meta.Slot, err)
		}
		refs = nil
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if id, ref, ok := strings.Cut(line, " "); ok {
				refs = append(refs, pgit.Ref{Name: ref, ID: id})
			}
		}
	}
	l.Meta.Branches, l.Meta.StashCount, l.Meta.StashTip = nil, 0, ""
	for _, r := range refs {
		switch {
		case r.Name == "refs/stash":
			l.Meta.StashCount, l.Meta.StashTip = l.stashCount(ctx, r.ID), r.ID
		case strings.HasPrefix(r.Name, "refs/heads/"):
			l.Meta.Branches = append(l.Meta.Branches, r.Name)
		}
	}
	return nil
}

// stash returns the number of stash entries and the stash tip.
func (l *Lease) stash(ctx context.Context) (int, string) {
	// refs/stash lives in the common git dir, which l.pool.Repo names.
	ids, err := pgit.ReadRefs(l.pool.Repo.CommonDir(), "refs/stash")
	if err != nil { // not an id: git says what it is
		tip, gerr := l.Git.Line(ctx, "rev-parse", "-q", "--verify", "refs/stash")
		ids, err = []string{tip}, gerr
	}
	tip := ids[0]
	if err != nil || tip == "" {
		return 0, ""
	}
	return l.stashCount(ctx, tip), tip
}

// stashCount counts the entries of a stash whose tip is tip.
func (l *Lease) stashCount(ctx context.Context, tip string) int {
	out, err := l.Git.Line(ctx, "rev-list", "--walk-reflogs", "--count", "refs/stash")
	if err != nil {
		return 1
	}
	n, _ := strconv.Atoi(out)
	return n
}

// prepare moves a pooled worktree to base and verifies it is exactly base.
//
// A worktree this process left with a clean mark, unchanged since, needs
// no git: the hazard scan doubles as the proof (see cleanmark.go).
func (l *Lease) prepare(ctx context.Context, base string) error {
	before := l.Meta
	mark, marked := takeMark(l.Meta.GitDir)
	if err := l.checkHazards(true); err != nil {
		return err
	}
	if err := l.baseline(ctx); err != nil {
		return err
	}
	if !marked || !l.stillClean(ctx, mark, base) {
		moved, err := l.moveAndVerify(ctx, base)
		if err != nil {
			return err
		}
		if moved {
			l.scan = nil // the scan is of the worktree before git changed it
		}
	}
	l.verified = l.markHere(base) // after verify: status may refresh the index
	l.Meta.Base = base
	if l.Meta.Base == before.Base && l.Meta.StashCount == before.StashCount && l.Meta.StashTip == before.StashTip &&
		slices.Equal(l.Meta.Branches, before.Branches) {
		return nil // what takeFree wrote still holds
	}
	return l.pool.writeMeta(l.Meta)
}

// moveAndVerify checks out base when the worktree is elsewhere and
// verifies it, resetting it when it is not exactly base; moved reports
// whether git changed the worktree.
func (l *Lease) moveAndVerify(ctx context.Context, base string) (moved bool, err error) {
	if l.Meta.Base != base {
		moved = true
		if _, err := l.Git.Run(ctx, "checkout", "-f", "-q", "--detach", base, "--"); err != nil {
			if err := l.reset(ctx, base); err != nil {
				return moved, err
			}
		}
	}
	if err := l.verify(ctx, base); err != nil {
		if err := l.reset(ctx, base); err != nil {
			return true, err
		}
		return true, l.verify(ctx, base)
	}
	return moved, nil
}

// checkHazards refuses a worktree that holds anything host git must never
// see, before any git runs on it: a nested .git at any depth, a special
// file (see patch.ScanWorktree), or a gitlink (submodule) folder that is
// not empty. A reset keeps a submodule folder's contents (git does not
// enter it), so a trap planted there (a repository whose filter runs a
// program) would fire in the next task's checkout or status: such a
// worktree is discarded, never reused.
//
// With stats, the scan's lstat keys are kept in l.scan.
func (l *Lease) checkHazards(stats bool) error {
	wt := l.Meta.Worktree
	var hs []patch.Hazard
	var err error
	if stats {
		l.scanAt = time.Now()
		hs, l.scan, err = patch.ScanWorktreeStats(wt)
	} else {
		hs, err = patch.ScanWorktree(wt, patch.ScanOptions{})
	}
	if err != nil {
		return fmt.Errorf("worktree %s: %w", l.Meta.Slot, err)
	}
	for _, h := range hs {
		if h.Code != patch.HazardUnsafeName {
			return fmt.Errorf("worktree %s: %s", l.Meta.Slot, h)
		}
	}
	links, err := patch.IndexGitlinks(filepath.Join(l.Meta.GitDir, "index"))
	if err != nil {
		return fmt.Errorf("worktree %s: %w", l.Meta.Slot, err)
	}
	for _, link := range links {
		p := filepath.Join(wt, filepath.FromSlash(link))
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return fmt.Errorf("worktree %s: %w", l.Meta.Slot, err)
		case !fi.IsDir():
			return fmt.Errorf("worktree %s: submodule folder %s replaced by a %s", l.Meta.Slot, patch.EscapePath(link), fi.Mode().Type())
		}
		names, err := readNames(p, 1)
		if err != nil {
			return fmt.Errorf("worktree %s: %w", l.Meta.Slot, err)
		}
		if len(names) > 0 {
			return fmt.Errorf("worktree %s: submodule folder %s is not empty", l.Meta.Slot, patch.EscapePath(link))
		}
	}
	return nil
}

// readNames lists up to n names in dir, opened without following a link
// or blocking.
func readNames(dir string, n int) ([]string, error) {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	names, err := f.Readdirnames(n)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return names, err
}

// inProgress are per-worktree state files of interrupted git operations.
var inProgress = []string{"MERGE_HEAD", "MERGE_MSG", "MERGE_MODE", "CHERRY_PICK_HEAD", "REVERT_HEAD",
	"BISECT_LOG", "BISECT_START", "BISECT_TERMS", "BISECT_EXPECTED_REV", "rebase-merge", "rebase-apply", "sequencer",
	"index.lock", "AUTO_MERGE", "ORIG_HEAD"}

// restoreDotGit makes the worktree's .git the file git wrote ("gitdir:
// <private git dir>"), replacing whatever a worker's command may have put
// there: a .git the worker wrote must never run anything for the operator
// or a later task.
func (l *Lease) restoreDotGit() error {
	p := filepath.Join(l.Meta.Worktree, ".git")
	want := "gitdir: " + l.Meta.GitDir + "\n"
	if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
		if b, err := os.ReadFile(p); err == nil && string(b) == want {
			return nil
		}
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("worktree %s: remove a replaced .git: %w", l.Meta.Slot, err)
	}
	return runrec.WriteFileAtomic(p, []byte(want), 0o644)
}

// reset returns the worktree to base completely.
func (l *Lease) reset(ctx context.Context, base string) error {
	g := l.Git
	if err := l.restoreDotGit(); err != nil {
		return err
	}
	for _, name := range inProgress {
		os.RemoveAll(filepath.Join(l.Meta.GitDir, name))
	}
	// An index with entries git would not look at again (assume-unchanged,
	// skip-worktree, a conflict) keeps them through a reset, hiding their
	// files: it is rebuilt from base instead.
	if index := filepath.Join(l.Meta.GitDir, "index"); !patch.IndexIsPlain(index) {
		if err := os.Remove(index); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("reset worktree %s: %w", l.Meta.Slot, err)
		}
	}
	branch := l.headBranch()
	if branch != "" {
		// Leave the branch first; a detached HEAD is moved by reset --hard.
		if _, err := g.Run(ctx, "checkout", "-f", "-q", "--detach", base, "--"); err != nil {
			return fmt.Errorf("reset worktree %s: %w", l.Meta.Slot, err)
		}
	}
	if _, err := g.Run(ctx, "reset", "-q", "--hard", base, "--"); err != nil {
		return fmt.Errorf("reset worktree %s: %w", l.Meta.Slot, err)
	}
	if _, err := g.Run(ctx, "clean", "-ffdxq"); err != nil {
		return fmt.Errorf("reset worktree %s: clean: %w", l.Meta.Slot, err)
	}
	// Stash entries made during the lease (newest first) are dropped.
	for n, _ := l.stash(ctx); n > l.Meta.StashCount; n, _ = l.stash(ctx) {
		if _, err := g.Run(ctx, "stash", "drop", "-q", "stash@{0}"); err != nil {
			return fmt.Errorf("reset worktree %s: drop stash: %w", l.Meta.Slot, err)
		}
	}
	// The branch the worktree was left on, if it was created during the
	// lease, is removed (others may belong to the operator).
	if name, ok := strings.CutPrefix(branch, "refs/heads/"); ok && !contains(l.Meta.Branches, branch) {
		if _, err := g.Run(ctx, "branch", "-D", "-q", "--", name); err != nil {
			return fmt.Errorf("reset worktree %s: delete branch %s: %w", l.Meta.Slot, name, err)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// verify checks the worktree is exactly base — a plain index (no entry
// git would skip), HEAD detached at base, no difference in index or files,
// nothing untracked or ignored — in one git process. Stashes are not
// checked here: prepare takes its stash baseline just before, and a stash
// made during a lease is dropped by the reset at release.
func (l *Lease) verify(ctx context.Context, base string) error {
	if !patch.IndexIsPlain(filepath.Join(l.Meta.GitDir, "index")) {
		return fmt.Errorf("worktree %s: its index hides entries from git (assume-unchanged, skip-worktree or a conflict)", l.Meta.Slot)
	}
	out, err := l.Git.Run(ctx, "status", "--porcelain=v2", "-z", "--branch", "--ignored=matching", "--untracked-files=all", "--ignore-submodules=all")
	if err != nil {
		return fmt.Errorf("worktree %s: %w", l.Meta.Slot, err)
	}
	head, detached := "", false
	for _, e := range strings.Split(string(out), "\x00") {
		switch {
		case e == "":
		case strings.HasPrefix(e, "# branch.oid "):
			head = strings.TrimPrefix(e, "# branch.oid ")
		case e == "# branch.head (detached)":
			detached = true
		case strings.HasPrefix(e, "# "):
		default:
			return fmt.Errorf("worktree %s: not clean", l.Meta.Slot)
		}
	}
	if head != base {
		return fmt.Errorf("worktree %s: HEAD is %s, want %s", l.Meta.Slot, head, base)
	}
	if !detached {
		return fmt.Errorf("worktree %s: HEAD is on a branch", l.Meta.Slot)
	}
	return nil
}

// headBranch is the branch the worktree's HEAD is on ("refs/heads/x"), ""
// when detached: read from the worktree's own git dir (never from the
// worktree).
func (l *Lease) headBranch() string {
	b, err := os.ReadFile(filepath.Join(l.Meta.GitDir, "HEAD"))
	if err != nil {
		return ""
	}
	ref, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "ref: ")
	if !ok {
		return ""
	}
	return ref
}

// Release resets the worktree and returns it to the pool (or discards it
// when the reset fails or the pool keeps none), then evicts the least
// recently used free worktrees beyond the bounds. The next Acquire verifies
// the worktree before handing it out.
func (l *Lease) Release(ctx context.Context) error {
	if l.lock == nil {
		return nil
	}
	p := l.pool
	if p.MaxCount <= 0 {
		return l.discard(ctx)
	}
	// A worktree holding what git must not see is not reset (git would
	// run on it) but discarded.
	if err := l.checkHazards(false); err != nil {
		return l.discard(ctx)
	}
	// The reset is verified when the worktree is taken again (prepare):
	// anything that changes a free worktree meanwhile is caught there too.
	if err := l.reset(ctx, l.Meta.Base); err != nil {
		return errors.Join(err, l.discard(ctx))
	}
	return l.free(ctx)
}

// free marks the reset worktree free and evicts beyond the bounds.
func (l *Lease) free(ctx context.Context) error {
	p := l.pool
	if p.MaxBytes > 0 {
		l.Meta.Bytes = dirSize(l.Meta.Worktree)
	}
	l.Meta.State, l.Meta.Owner, l.Meta.LastUsed = SlotFree, "", p.Now()
	err := p.writeMeta(l.Meta) // before the slot's lock is given up
	filelock.Unlock(l.lock)
	l.lock = nil
	if err != nil {
		return err
	}
	_, err = p.evict(ctx)
	return err
}

// Keep ends the lease but leaves the worktree with its owner, untouched, for
// the same session to continue (a crash does the same implicitly).
func (l *Lease) Keep() error {
	if l.lock == nil {
		return nil
	}
	if err := l.restoreDotGit(); err != nil {
		return err
	}
	l.Meta.LastUsed = l.pool.Now()
	err := l.pool.writeMeta(l.Meta) // before the slot's lock is given up
	filelock.Unlock(l.lock)
	l.lock = nil
	return err
}

// discard removes the worktree and its slot.
func (l *Lease) discard(ctx context.Context) error {
	err := l.pool.removeSlot(ctx, l.Meta)
	filelock.Unlock(l.lock)
	l.lock = nil
	return err
}

func (p *Pool) removeSlot(ctx context.Context, m SlotMeta) error {
	var errs []error
	// Nothing in it may reach git, not even `worktree remove`.
	if _, err := os.Lstat(m.Worktree); err == nil {
		if _, err := patch.ScanWorktree(m.Worktree, patch.ScanOptions{Remove: true}); err != nil {
			if err := os.RemoveAll(m.Worktree); err != nil {
				errs = append(errs, err)
			}
		}
	}
	err := p.withGitLock(func() error {
		if _, err := p.Repo.Run(ctx, "worktree", "remove", "--force", "--force", m.Worktree); err != nil {
			if err := os.RemoveAll(m.Worktree); err != nil {
				errs = append(errs, err)
			}
			if _, err := p.Repo.Run(ctx, "worktree", "prune"); err != nil {
				errs = append(errs, err)
			}
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	// The slot's lock file goes too (the caller holds it: a waiter finds
	// the file gone after it locks, see filelock.Lock, and locks afresh).
	if err := os.RemoveAll(p.neutralPath(m.Slot)); err != nil {
		errs = append(errs, err)
	}
	for _, f := range []string{p.metaPath(m.Slot), runrec.NextPath(p.metaPath(m.Slot)), p.lockPath(m.Slot)} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// evict discards free worktrees beyond MaxCount or MaxBytes, least recently
// used first.
func (p *Pool) evict(ctx context.Context) ([]string, error) {
	if p.MaxBytes <= 0 {
		// No more slots than MaxCount: no free one beyond it (a slot
		// added meanwhile evicts for itself when it is freed).
		if names, err := p.slots(); err == nil && len(names) <= p.MaxCount {
			return nil, nil
		}
	}
	var victims []*Lease
	err := p.withPoolLock(func() error {
		names, err := p.slots()
		if err != nil {
			return err
		}
		var free []SlotMeta
		for _, n := range names {
			if m, err := p.readMeta(n); err == nil && m.State == SlotFree {
				free = append(free, m)
			}
		}
		sort.Slice(free, func(i, j int) bool { return free[i].LastUsed.After(free[j].LastUsed) })
		var total int64
		for i, m := range free {
			total += m.Bytes
			over := i >= p.MaxCount || (p.MaxBytes > 0 && total > p.MaxBytes)
			if !over {
				continue
			}
			if v := p.tryClaim(m); v != nil {
				victims = append(victims, v)
			}
		}
		return nil
	})
	removed, derr := discardAll(ctx, victims)
	return removed, errors.Join(derr, err)
}

// tryClaim leases slot m when no live process holds it (nil when one does).
func (p *Pool) tryClaim(m SlotMeta) *Lease {
	lk, err := filelock.TryLock(p.lockPath(m.Slot))
	if err != nil || lk == nil {
		return nil
	}
	return &Lease{Meta: m, pool: p, lock: lk}
}

// claimWhere claims, under the pool lock, every slot whose metadata want
// picks and that no live process holds (tryClaim).
func (p *Pool) claimWhere(want func(SlotMeta) bool) ([]*Lease, error) {
	var claimed []*Lease
	err := p.withPoolLock(func() error {
		names, err := p.slots()
		if err != nil {
			return err
		}
		for _, n := range names {
			m, err := p.readMeta(n)
			if err != nil || !want(m) {
				continue
			}
			if l := p.tryClaim(m); l != nil { // else a live process holds it
				claimed = append(claimed, l)
			}
		}
		return nil
	})
	return claimed, err
}

// discardAll discards the claimed slots and names them all (a slot whose
// removal failed is gone from the pool all the same).
func discardAll(ctx context.Context, victims []*Lease) ([]string, error) {
	var removed []string
	var errs []error
	for _, v := range victims {
		if err := v.discard(ctx); err != nil {
			errs = append(errs, err)
		}
		removed = append(removed, v.Meta.Slot)
	}
	return removed, errors.Join(errs...)
}

// poolInfo is pool.json: which repository a pool folder belongs to.
type poolInfo struct {
	Repo string `json:"repo"` // common git dir
}

func (p *Pool) writePoolInfo() error {
	path := filepath.Join(p.Dir, "pool.json")
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	b, _ := json.Marshal(poolInfo{Repo: p.Repo.GitDir})
	return runrec.WriteFileAtomic(path, append(b, '\n'), 0o644)
}

// OpenPools returns every pool under base (WORKER_WORKTREE_BASE), for
// `conductor pool status|prune` without a repository.
func OpenPools(base string, cfg conductor.Config) ([]*Pool, error) {
	entries, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pools []*Pool
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(base, e.Name(), "pool.json"))
		if err != nil {
			continue
		}
		var info poolInfo
		if json.Unmarshal(b, &info) != nil || info.Repo == "" {
			continue
		}
		p := NewPool(base, patch.Git{GitDir: info.Repo}, cfg)
		p.Dir = filepath.Join(base, e.Name())
		pools = append(pools, p)
	}
	return pools, nil
}

// SlotStatus is one slot as `conductor pool status` shows it.
type SlotStatus struct {
	SlotMeta
	InUse  bool `json:"inUse"`  // a live process holds it
	Exists bool `json:"exists"` // the worktree folder exists
}

// Shown is the slot's state as people read it: "broken" (its worktree is
// gone), "in use" (a live process holds it), else its recorded state.
func (s SlotStatus) Shown() string {
	switch {
	case !s.Exists:
		return "broken"
	case s.InUse:
		return "in use"
	}
	return s.State
}

// Status lists the pool's slots.
func (p *Pool) Status(ctx context.Context) ([]SlotStatus, error) {
	names, err := p.slots()
	if err != nil {
		return nil, err
	}
	var out []SlotStatus
	for _, n := range names {
		m, err := p.readMeta(n)
		if err != nil {
			continue
		}
		s := SlotStatus{SlotMeta: m}
		if lk, err := filelock.TryLock(p.lockPath(n)); err == nil && lk != nil {
			filelock.Unlock(lk)
		} else {
			s.InUse = true
		}
		if _, err := os.Stat(m.Worktree); err == nil {
			s.Exists = true
			if m.Bytes == 0 {
				s.Bytes = dirSize(m.Worktree)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// Prune discards every free worktree (all) or only those beyond the bounds,
// plus slots whose worktree folder is gone. With orphans it also discards
// worktrees a dead process left with a session (not held by any process).
func (p *Pool) Prune(ctx context.Context, all, orphans bool) ([]string, error) {
	victims, err := p.claimWhere(func(m SlotMeta) bool {
		_, statErr := os.Stat(m.Worktree)
		return statErr != nil || (all && m.State == SlotFree) || (orphans && m.State == SlotBusy)
	})
	removed, derr := discardAll(ctx, victims)
	errs := []error{derr}
	if err != nil {
		return removed, errors.Join(derr, err)
	}
	if !all {
		more, err := p.evict(ctx)
		removed = append(removed, more...)
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
