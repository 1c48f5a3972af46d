package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/land"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
	"github.com/conductor-dev/conductor/runtask"
)

// poolOf is a configuration whose pool keeps n free worktrees.
func poolOf(n int) conductor.Config { return conductor.Config{PoolSize: &n} }

// envWith is a getenv that overrides some variables.
func envWith(over map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := over[k]; ok {
			return v
		}
		return os.Getenv(k)
	}
}

// dirty leaves what a finished task leaves: edited, untracked and ignored
// files, so that every pool reset has real work to do.
func dirty(wt string, i int) error {
	for k := 0; k < 5; k++ {
		p := filepath.Join(wt, "scratch", fmt.Sprintf("t%d-%d.go", i, k))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte("package scratch\n"), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(wt, ".gitignore"), []byte("*.o\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(wt, "build.o"), []byte("object"), 0o644); err != nil {
		return err
	}
	p := filepath.Join(wt, "pkg00", "d0000", "f0.go")
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return os.WriteFile(p, append(data, "// edited by a task\n"...), 0o644)
}

// rowPrep: taking a warm pooled worktree (reset to a nearby commit) against
// `git worktree add --detach`.
func (b *bench) rowPrep() error {
	pool := runtask.NewPool(filepath.Join(b.tmp, "pool"), patch.Git{GitDir: b.gitDir}, poolOf(2))
	l, err := pool.Acquire(b.ctx, b.base, "bench")
	if err != nil {
		return fmt.Errorf("fill the pool: %w", err)
	}
	if err := dirty(l.Dir(), -1); err != nil {
		return err
	}
	if err := l.Release(b.ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	warm, err := b.worktree("prep-warm", b.base)
	if err != nil {
		return err
	}
	if err := b.removeWorktree(warm); err != nil {
		return err
	}
	r := row{name: "task preparation (pool hit) vs `git worktree add --detach`", goal: "≤ 0.05×", oursLabel: "pool", floorLabel: "worktree add"}
	var releases []time.Duration
	for i := 0; i < b.sz.runs; i++ {
		dir := filepath.Join(b.tmp, "wt", fmt.Sprintf("prep-%d", i))
		d, err := timed(func() error {
			_, err := b.git(b.repo, "--git-dir="+b.gitDir, "worktree", "add", "-q", "--detach", dir, b.base)
			return err
		})
		if err != nil {
			return err
		}
		if err := b.removeWorktree(dir); err != nil {
			return err
		}
		r.floor = append(r.floor, d)

		rev := b.near // alternate between two nearby commits: every take resets files
		if i%2 == 1 {
			rev = b.base
		}
		var l *runtask.Lease
		d, err = timed(func() (err error) {
			l, err = pool.Acquire(b.ctx, rev, "bench")
			return err
		})
		if err != nil {
			return fmt.Errorf("acquire: %w", err)
		}
		if l.Fresh {
			return fmt.Errorf("run %d: the pool missed (a new worktree was checked out)", i)
		}
		r.ours = append(r.ours, d)
		if head, err := b.git(l.Dir(), "--git-dir="+l.Git.GitDir, "--work-tree="+l.Dir(), "rev-parse", "HEAD"); err != nil || head != rev {
			return fmt.Errorf("pooled worktree at %q, want %s (%v)", head, rev, err)
		}
		if err := dirty(l.Dir(), i); err != nil {
			return err
		}
		d, err = timed(func() error { return l.Release(b.ctx) })
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		releases = append(releases, d)
	}
	med, lo, hi := stats(secs(releases))
	r.note = fmt.Sprintf("a take resets a dirty pooled worktree (edited, untracked and ignored files) to a commit 20 files away; the release that reset it after the previous task took %s (%s–%s) off the critical path", fmtDur(med), fmtDur(lo), fmtDur(hi))
	b.rows = append(b.rows, r)
	return nil
}

// rowExtract: `conductor extract` against `git add -A -N . && git diff --binary HEAD`.
func (b *bench) rowExtract() error {
	wt, err := b.worktree("extract", b.base)
	if err != nil {
		return err
	}
	if err := b.change(wt, 2, 200); err != nil {
		return err
	}
	floor := func() (proc, error) {
		return b.runProc(wt, "", nil, "sh", "-c", "git add -A -N . && git diff --binary HEAD")
	}
	ours := func() (proc, error) {
		return b.runProc(b.tmp, "", nil, b.bin, "extract", "--repo", b.repo, "--worktree", wt, "--base", b.base)
	}
	var out bytes.Buffer
	if _, err := b.runProc(b.tmp, "", &out, b.bin, "extract", "--repo", b.repo, "--worktree", wt, "--base", b.base); err != nil {
		return err
	}
	size := out.Len()
	if _, err := floor(); err != nil { // warm the index and the page cache for both
		return err
	}
	r := row{name: "extract vs `git add -A -N . && git diff --binary HEAD`", goal: "≤ 1.10×", oursLabel: "extract", floorLabel: "git"}
	for i := 0; i < b.sz.fastRuns; i++ {
		f, err := floor()
		if err != nil {
			return err
		}
		o, err := ours()
		if err != nil {
			return err
		}
		r.floor, r.ours = append(r.floor, f.dur), append(r.ours, o.dur)
	}
	r.note = fmt.Sprintf("`conductor extract` as a process (temporary index, canonical diff and its patch-id) on a worktree with ~200 edits, 50 new files, deletions, a mode change and a binary file; diff %.1f MB", float64(size)/1e6)
	b.rows = append(b.rows, r)
	return nil
}

// rowPatchID: `conductor patch-id --stable` against `git patch-id --stable`.
func (b *bench) rowPatchID() error {
	diff := filepath.Join(b.tmp, "patchid.diff")
	f, err := os.Create(diff)
	if err != nil {
		return err
	}
	_, err = b.runProc(b.repo, "", f, "git", "--git-dir="+b.gitDir, "diff", "--full-index", "--binary", b.base, "big")
	f.Close()
	if err != nil {
		return err
	}
	fi, err := os.Stat(diff)
	if err != nil {
		return err
	}
	// Same answer first: a fast wrong patch-id is worth nothing.
	var gitOut, ourOut bytes.Buffer
	if _, err := b.runProc("", diff, &gitOut, "git", "patch-id", "--stable"); err != nil {
		return err
	}
	if _, err := b.runProc("", diff, &ourOut, b.bin, "patch-id", "--stable"); err != nil {
		return err
	}
	if gitOut.String() != ourOut.String() {
		return fmt.Errorf("patch-id differs from git's: %q vs %q", ourOut.String(), gitOut.String())
	}
	r := row{name: fmt.Sprintf("patch-id --stable on a %.0f MB diff vs `git patch-id --stable`", float64(fi.Size())/1e6), goal: "≤ 0.80×", oursLabel: "Go", floorLabel: "git"}
	for i := 0; i < b.sz.fastRuns; i++ {
		g, err := b.runProc("", diff, nil, "git", "patch-id", "--stable")
		if err != nil {
			return err
		}
		o, err := b.runProc("", diff, nil, b.bin, "patch-id", "--stable")
		if err != nil {
			return err
		}
		r.floor, r.ours = append(r.floor, g.dur), append(r.ours, o.dur)
	}
	// Peak memory from one more, sampled, run of each.
	g, err := b.runSampled("", diff, nil, "git", "patch-id", "--stable")
	if err != nil {
		return err
	}
	o, err := b.runSampled("", diff, nil, b.bin, "patch-id", "--stable")
	if err != nil {
		return err
	}
	orss, frss := o.ownHWM, g.ownHWM
	om, _, _ := stats(secs(r.ours))
	fm, _, _ := stats(secs(r.floor))
	mb := float64(fi.Size()) / 1e6
	r.note = fmt.Sprintf("both as processes reading the diff on stdin, same output checked; %.0f MB/s vs %.0f MB/s; peak RSS %.1f MB vs %.1f MB", mb/om, mb/fm, float64(orss)/1e6, float64(frss)/1e6)
	b.rows = append(b.rows, r)
	return nil
}

// noGate is the default landing policy without gate commands: the row
// measures landing, not the repository's tests.
type noGate struct{ *policy.Landing }

func (noGate) Gate() []policy.GateCommand { return nil }

// rowLand: land.Run (no gate, so no checkout) against merge-tree +
// commit-tree + update-ref by hand, and against a fresh-worktree landing.
func (b *bench) rowLand() error {
	dataRoot := filepath.Join(b.tmp, "land-data")
	st, err := bus.Open(b.ctx, bus.Options{DataRoot: dataRoot})
	if err != nil {
		return fmt.Errorf("open the store: %w", err)
	}
	defer st.Close()
	pol, err := policy.Load(roles.FS, "")
	if err != nil {
		return err
	}
	rules := noGate{pol.Landing()}
	g := func(args ...string) (string, error) {
		return b.git(b.repo, append([]string{"--git-dir=" + b.gitDir}, args...)...)
	}
	work, err := g("rev-parse", "work/bench")
	if err != nil {
		return err
	}
	tip, err := g("rev-parse", "main")
	if err != nil {
		return err
	}
	pid, err := patch.DiffTrees(b.ctx, patch.Git{GitDir: b.gitDir}, b.base, work, io.Discard)
	if err != nil {
		return err
	}
	tok := int64(1)
	if err := st.PutRun(b.ctx, bus.Run{ID: "run-bench", TaskID: "t-bench", Status: "succeeded", ModelAlias: "bench", TotalTokens: &tok,
		Repo: b.gitDir, BaseCommit: b.base, PatchID: pid, StartedAt: time.Now()}); err != nil {
		return err
	}
	if _, err := st.PutVerdict(b.ctx, bus.Verdict{RunID: "run-bench", WorkRef: "work/bench", Commit: work, PatchID: pid,
		Verdict: bus.VerdictApprove, Reviewer: "bench"}); err != nil {
		return err
	}
	diffFile := filepath.Join(b.tmp, "work.diff")
	diff, err := g("diff", "--binary", "--full-index", b.base, work)
	if err != nil {
		return err
	}
	if err := os.WriteFile(diffFile, []byte(diff+"\n"), 0o644); err != nil {
		return err
	}
	// at is the target tip a landing starts from: tip (the target moved
	// since the work's base) or b.base (a quiet target).
	at := tip
	reset := func() error {
		if _, err := g("update-ref", "refs/heads/main", at); err != nil {
			return err
		}
		if _, err := g("show-ref", "--verify", "-q", land.NotesRef); err == nil {
			_, err = g("update-ref", "-d", land.NotesRef)
			return err
		}
		return nil
	}
	landOnce := func() (time.Duration, error) {
		d, err := st.RaiseDecision(b.ctx, bus.Decision{Kind: bus.KindMergeProtected, RaisedBy: "bench", Repo: b.gitDir,
			WorkRef: "work/bench", Commit: work, Target: "main", RunID: "run-bench"})
		if err != nil {
			return 0, err
		}
		if _, err := st.ResolveDecision(b.ctx, d.ID, bus.OptionMerge, "bench"); err != nil {
			return 0, err
		}
		if err := reset(); err != nil {
			return 0, err
		}
		var out land.Outcome
		dur, err := timed(func() (err error) {
			out, err = land.Run(b.ctx, land.Options{Store: st, Rules: rules, DecisionID: d.ID, DataRoot: dataRoot})
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("land: %w", err)
		}
		if out.Commit == "" || out.Mode != "tree" {
			return 0, fmt.Errorf("land did not land without a checkout: %+v", out)
		}
		return dur, nil
	}
	byHand := func() error {
		out, err := g("merge-tree", "--write-tree", at, work)
		if err != nil {
			return err
		}
		c, err := g("commit-tree", strings.Fields(out)[0], "-p", at, "-m", "by hand")
		if err != nil {
			return err
		}
		_, err = g("update-ref", "refs/heads/main", c, at)
		return err
	}
	naive := func() error {
		dir := filepath.Join(b.tmp, "wt", "naive-land")
		if _, err := g("worktree", "add", "-q", "--detach", dir, tip); err != nil {
			return err
		}
		if _, err := b.git(dir, "apply", "--index", diffFile); err != nil {
			return err
		}
		if _, err := b.git(dir, "commit", "-q", "-m", "naive"); err != nil {
			return err
		}
		head, err := b.git(dir, "rev-parse", "HEAD")
		if err != nil {
			return err
		}
		if _, err := b.git(dir, "update-ref", "refs/heads/main", head, tip); err != nil {
			return err
		}
		return b.removeWorktree(dir)
	}
	// Warm the object store and the page cache for all three.
	for _, fn := range []func() error{reset, byHand, reset, naive} {
		if err := fn(); err != nil {
			return err
		}
	}
	if _, err := landOnce(); err != nil {
		return err
	}
	hand := row{name: "land (gate excluded, no checkout) vs merge-tree + commit-tree + update-ref", goal: "≤ 3×", oursLabel: "land", floorLabel: "by hand"}
	fresh := row{name: "land (gate excluded, no checkout) vs naive fresh-worktree land", goal: "report (issue 7: ≤ 1.0×)", oursLabel: "land", floorLabel: "naive"}
	for i := 0; i < max(b.sz.fastRuns, b.sz.runs); i++ {
		d, err := landOnce()
		if err != nil {
			return err
		}
		hand.ours = append(hand.ours, d)
		x := []struct {
			r  *row
			fn func() error
		}{{&hand, byHand}}
		if i < b.sz.runs { // the naive land checks out the whole tree: fewer runs
			fresh.ours = append(fresh.ours, d)
			x = append(x, struct {
				r  *row
				fn func() error
			}{&fresh, naive})
		}
		for _, x := range x {
			if err := reset(); err != nil {
				return err
			}
			d, err := timed(x.fn)
			if err != nil {
				return err
			}
			x.r.floor = append(x.r.floor, d)
		}
	}
	// A quiet target: nothing landed since the work's base, so the tip is
	// the work commit's parent (land then needs no merge-tree).
	at = b.base
	quiet := row{name: "land on a quiet target (the tip is the work's base) vs merge-tree + commit-tree + update-ref", goal: "≤ 3×", oursLabel: "land", floorLabel: "by hand"}
	for i := 0; i < b.sz.fastRuns; i++ {
		d, err := landOnce()
		if err != nil {
			return err
		}
		if err := reset(); err != nil {
			return err
		}
		f, err := timed(byHand)
		if err != nil {
			return err
		}
		quiet.ours, quiet.floor = append(quiet.ours, d), append(quiet.floor, f)
	}
	at = tip // the repository as the rows after this one expect it
	if err := reset(); err != nil {
		return err
	}
	hand.note = "land.Run in process on a target with one unrelated commit since the work's base: store reads, every check, the policy diff, the squash (`git merge-tree --write-tree`), the patch-id measured from the squash's tree (a canonical diff of tip..squash), the commit with trailers and the receipt note (fsynced loose objects), the compare-and-swap and the store row; gate excluded"
	fresh.note = fmt.Sprintf("naive = `worktree add --detach` + `apply --index` + `commit` + `update-ref` + `worktree remove`; paired with the first %d land runs of the row above", len(fresh.ours))
	quiet.note = "the same landing when the target is still at the work's base: the squash is the approved tree itself (no merge-tree; its patch-id still measured from that tree)"
	b.rows = append(b.rows, hand, fresh, quiet)
	return nil
}

// rowMemory: peak memory of `conductor extract -o FILE` then `conductor
// patch-id` on a diff of memoryBytes, against the diff's size.
func (b *bench) rowMemory() error {
	wt, err := b.worktree("memory", b.base)
	if err != nil {
		return err
	}
	t := newText(3)
	for i, total := 0, int64(0); total < b.sz.memoryBytes; i++ {
		data := t.lines(4000)
		p := filepath.Join(wt, "big", fmt.Sprintf("d%d", i%40), fmt.Sprintf("f%d.go", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
		total += int64(len(data))
	}
	out := filepath.Join(b.tmp, "memory.diff")
	ex, err := b.runSampled(b.tmp, "", nil, b.bin, "extract", "--repo", b.repo, "--worktree", wt, "--base", b.base, "-o", out)
	if err != nil {
		return err
	}
	fi, err := os.Stat(out)
	if err != nil {
		return err
	}
	pid, err := b.runSampled(b.tmp, out, nil, b.bin, "patch-id", "--stable")
	if err != nil {
		return err
	}
	gd, err := b.runSampled(wt, "", nil, "sh", "-c", "git add -A -N . && git diff --binary HEAD")
	if err != nil {
		return err
	}
	gp, err := b.runSampled("", out, nil, "git", "patch-id", "--stable")
	if err != nil {
		return err
	}
	size := float64(fi.Size())
	own := max(ex.ownHWM, pid.ownHWM)
	tree := max(ex.tree, pid.tree)
	b.rows = append(b.rows, row{
		name:      fmt.Sprintf("peak memory, extract + patch-id on a %.0f MB diff", size/1e6),
		oursCell:  fmt.Sprintf("extract %.1f MB, patch-id %.1f MB", float64(ex.ownHWM)/1e6, float64(pid.ownHWM)/1e6),
		floorCell: fmt.Sprintf("git add -N + diff %.1f MB, git patch-id %.1f MB", float64(gd.tree)/1e6, float64(gp.ownHWM)/1e6),
		ratioCell: fmt.Sprintf("**%s** the diff", fmtRatio(float64(own)/size)),
		goal:      "≤ 2× the diff",
		note: fmt.Sprintf("conductor processes' own peak RSS (VmHWM sampled every 3 ms); including the git children extract starts, the largest process peaked at %.1f MB (%s the diff); one run (extract %s, patch-id %s)",
			float64(tree)/1e6, fmtRatio(float64(tree)/size), fmtDur(ex.dur.Seconds()), fmtDur(pid.dur.Seconds())),
	})
	return nil
}
