package land

// The land rows of `make bench`: landing against the git CLI floor measured
// in the same run, on a repository the bench generates (10,000 files in
// 2,000 folders; CONDUCTOR_BENCH_SHORT=1: 1,000 files in 200 folders).
//
//	CONDUCTOR_BENCH=1 go test ./land -run TestBenchTable -count=1 -v -timeout 30m
//	CONDUCTOR_BENCH=1 CONDUCTOR_BENCH_SHORT=1 go test ./land -run TestBenchTable -count=1 -v
//
// Rows: land (no gate command, so no checkout) against `merge-tree
// --write-tree` + `commit-tree` + `update-ref` by hand, and against a naive
// fresh-worktree landing (`worktree add` + `git apply --index` + `git
// commit` + `update-ref` + `worktree remove`). land runs in process (store
// reads, every check, the patch-id, the receipt note, the store row); the
// floors run the git CLI. Numbers are printed, never asserted.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
)

type benchRow struct {
	name, goal, ours, floor string
	o, f                    []time.Duration
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func (r benchRow) line() string {
	ratios := make([]float64, len(r.o))
	for i := range r.o {
		ratios[i] = float64(r.o[i]) / float64(r.f[i])
	}
	sort.Float64s(ratios)
	return fmt.Sprintf("| %s | %s %.1f ms | %s %.1f ms | %.2f× (%.2f–%.2f) | %s |\n", r.name, r.ours,
		float64(median(r.o))/1e6, r.floor, float64(median(r.f))/1e6, ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1], r.goal)
}

// bigFixture writes a repository with folders×perFolder files through
// fast-import, a work change off the first commit and one unrelated commit
// on main.
func bigFixture(t *testing.T, folders, perFolder int) *fixture {
	f := newFixture(t)
	var in bytes.Buffer
	fmt.Fprintf(&in, "commit refs/heads/main\ncommitter Bench <b@example.test> 1767225600 +0000\ndata 4\nbig\nfrom %s\n", f.rev("refs/heads/main"))
	for d := 0; d < folders; d++ {
		for i := 0; i < perFolder; i++ {
			body := fmt.Sprintf("package p%d\n\n// file %d of folder %d\nfunc F%d() int { return %d }\n", d, i, d, i, d*i)
			fmt.Fprintf(&in, "M 100644 inline pkg/d%04d/f%d.go\ndata %d\n%s\n", d, i, len(body), body)
		}
	}
	f.runIn("", &in, "git", "--git-dir="+f.gitdir, "fast-import", "--quiet")
	return f
}

func TestBenchTable(t *testing.T) {
	if os.Getenv("CONDUCTOR_BENCH") == "" {
		t.Skip("set CONDUCTOR_BENCH=1 (and CONDUCTOR_BENCH_SHORT=1 for small sizes) to run the bench")
	}
	folders, perFolder, runs := 2000, 5, 7
	if os.Getenv("CONDUCTOR_BENCH_SHORT") != "" {
		folders, runs = 200, 3
	}
	ctx := context.Background()
	f := bigFixture(t, folders, perFolder)
	base := f.rev("refs/heads/main")
	changeSet := map[string]string{
		"pkg/d0001/f1.go":  "package p1\n\n// changed\n",
		"pkg/d0500/f2.go":  "package p500\n\n// changed too\n",
		"pkg/d0007/new.go": "package p7\n",
	}
	work := f.commit("refs/heads/work/bench", base, changeSet, "Bench change\n\nRun-Id: run-bench\nModel: fake")
	pid := f.patchID(base, work)
	if _, err := f.store.PutVerdict(ctx, bus.Verdict{RunID: "run-bench", WorkRef: "work/bench", Commit: work, PatchID: pid, Verdict: bus.VerdictApprove}); err != nil {
		t.Fatal(err)
	}
	tip := f.commit("refs/heads/main", "", map[string]string{"pkg/d1999/other.go": "package p1999\n"}, "unrelated")
	diffFile := filepath.Join(t.TempDir(), "work.diff")
	os.WriteFile(diffFile, []byte(f.git("diff", "--binary", "--full-index", base, work)+"\n"), 0o644)
	reset := func() {
		f.git("update-ref", "refs/heads/main", tip)
		exec.Command("git", "--git-dir="+f.gitdir, "update-ref", "-d", NotesRef).Run()
	}
	timed := func(fn func()) time.Duration {
		start := time.Now()
		fn()
		return time.Since(start)
	}
	git := func(dir string, args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = gitEnv(f.home)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	byHand := func() {
		tree := strings.Fields(git(f.gitdir, "--git-dir="+f.gitdir, "merge-tree", "--write-tree", tip, work))[0]
		c := git(f.gitdir, "--git-dir="+f.gitdir, "commit-tree", tree, "-p", tip, "-m", "by hand")
		git(f.gitdir, "--git-dir="+f.gitdir, "update-ref", "refs/heads/main", c, tip)
	}
	naive := func() {
		dir := filepath.Join(t.TempDir(), "wt")
		git(f.dir, "worktree", "add", "-q", "--detach", dir, tip)
		git(dir, "apply", "--index", diffFile)
		git(dir, "commit", "-q", "-m", "naive")
		git(dir, "update-ref", "refs/heads/main", git(dir, "rev-parse", "HEAD"), tip)
		git(f.dir, "worktree", "remove", "--force", dir)
	}
	var landTimes []time.Duration
	landOnce := func() {
		id := f.decide("bench", work, "main", "run-bench", bus.OptionMerge)
		reset()
		d := timed(func() {
			if _, err := f.land(id, nil); err != nil {
				t.Fatal(err)
			}
		})
		landTimes = append(landTimes, d)
	}
	// Warm the page cache and the object store for all three.
	reset()
	byHand()
	reset()
	naive()
	landTimes = nil
	landOnce()
	landTimes = nil

	hand := benchRow{name: "land (gate excluded, no checkout) vs merge-tree + commit-tree + update-ref", goal: "≤ 1.5×", ours: "land", floor: "git"}
	fresh := benchRow{name: "land (gate excluded, no checkout) vs fresh worktree + apply + commit", goal: "≤ 1.0×", ours: "land", floor: "naive"}
	for i := 0; i < runs; i++ {
		landOnce()
		reset()
		hand.f = append(hand.f, timed(byHand))
		reset()
		fresh.f = append(fresh.f, timed(naive))
	}
	hand.o, fresh.o = landTimes, landTimes
	var out strings.Builder
	fmt.Fprintf(&out, "\n| row (%d files in %d folders) | conductor | git floor | ratio median (min–max) | goal |\n|---|---|---|---|---|\n", folders*perFolder, folders)
	out.WriteString(hand.line())
	out.WriteString(fresh.line())
	fmt.Fprintf(&out, "\n%d runs per row; ratio = land time / floor time per run.\n", runs)
	t.Log(out.String())
	fmt.Print(out.String())
}
