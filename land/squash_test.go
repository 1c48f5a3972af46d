package land

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
)

// squashCase is one generated pair of changes from a common base: the
// target's (tip) and the work's. quiet cases make the work on top of the
// tip itself (the target did not move since the work's base).
type squashCase struct {
	base, tip, work map[string]string // path → "mode content" ("" absent)
	quiet           bool
}

// corpusFile is a file of a generated tree: mode and content.
func corpusFile(rng *rand.Rand, tag string) string {
	switch rng.IntN(6) {
	case 0:
		return "100755 #!/bin/sh\necho " + tag + "\n"
	case 1:
		return "120000 ../target-" + tag
	default:
		var b strings.Builder
		for i := range 3 + rng.IntN(5) {
			fmt.Fprintf(&b, "line %d %s\n", i, tag)
		}
		return "100644 " + b.String()
	}
}

// corpusEdit changes files: additions, deletions, edits, mode changes,
// renames (a file removed and its content added elsewhere), a file
// replaced by a folder and a folder by a file.
func corpusEdit(rng *rand.Rand, files map[string]string, paths []string, tag string) map[string]string {
	out := maps.Clone(files)
	present := func() []string { return slices.Sorted(maps.Keys(out)) }
	for range 1 + rng.IntN(5) {
		ps := present()
		switch op := rng.IntN(8); {
		case op == 0 || len(ps) == 0: // add
			out[paths[rng.IntN(len(paths))]] = corpusFile(rng, tag)
		case op == 1: // delete
			delete(out, ps[rng.IntN(len(ps))])
		case op == 2: // mode change, same content
			p := ps[rng.IntN(len(ps))]
			mode, body, _ := strings.Cut(out[p], " ")
			switch mode {
			case "100644":
				out[p] = "100755 " + body
			case "100755":
				out[p] = "100644 " + body
			}
		case op == 3: // rename, maybe into another folder
			p := ps[rng.IntN(len(ps))]
			q := paths[rng.IntN(len(paths))]
			if _, taken := out[q]; !taken {
				out[q] = out[p]
				delete(out, p)
			}
		case op == 4: // a file becomes a folder
			p := ps[rng.IntN(len(ps))]
			delete(out, p)
			out[p+"/inner.txt"] = "100644 inner " + tag + "\n"
		default: // edit one line (so both sides may touch the same file)
			p := ps[rng.IntN(len(ps))]
			mode, body, _ := strings.Cut(out[p], " ")
			if mode == "120000" {
				out[p] = mode + " ../moved-" + tag
				continue
			}
			lines := strings.SplitAfter(body, "\n")
			i := rng.IntN(len(lines))
			lines[i] = "edited by " + tag + "\n"
			out[p] = mode + " " + strings.Join(lines, "")
		}
	}
	// A path that is now both a file and a folder's prefix keeps the folder.
	for p := range out {
		for dir := filepath.Dir(p); dir != "."; dir = filepath.Dir(dir) {
			delete(out, dir)
		}
	}
	return out
}

// fastImport writes the corpus as commits with one `git fast-import` and
// returns the ids of each case's tip and work commits.
func fastImport(t *testing.T, f *fixture, cases []squashCase) [][2]string {
	t.Helper()
	var s bytes.Buffer
	mark := 0
	commit := func(from int, files map[string]string, msg string) int {
		mark++
		fmt.Fprintf(&s, "commit refs/heads/corpus\nmark :%d\ncommitter T <t@example.test> 1700000000 +0000\ndata %d\n%s\n", mark, len(msg), msg)
		if from > 0 {
			fmt.Fprintf(&s, "from :%d\n", from)
		}
		s.WriteString("deleteall\n")
		for _, p := range slices.Sorted(maps.Keys(files)) {
			mode, body, _ := strings.Cut(files[p], " ")
			fmt.Fprintf(&s, "M %s inline %s\ndata %d\n%s\n", mode, p, len(body), body)
		}
		return mark
	}
	marks := make([][2]int, len(cases))
	for i, c := range cases {
		b := commit(0, c.base, fmt.Sprintf("base %d", i))
		tip := commit(b, c.tip, fmt.Sprintf("tip %d", i))
		from := b
		if c.quiet {
			from = tip
		}
		marks[i] = [2]int{tip, commit(from, c.work, fmt.Sprintf("work %d", i))}
	}
	marksFile := filepath.Join(t.TempDir(), "marks")
	f.runIn("", &s, "git", "--git-dir="+f.gitdir, "fast-import", "--quiet", "--force", "--export-marks="+marksFile)
	raw, err := os.ReadFile(marksFile)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		m, id, _ := strings.Cut(line, " ")
		ids[m] = id
	}
	out := make([][2]string, len(cases))
	for i, m := range marks {
		out[i] = [2]string{ids[fmt.Sprintf(":%d", m[0])], ids[fmt.Sprintf(":%d", m[1])]}
	}
	return out
}

// squashCorpus generates n cases (the seed is fixed) and imports them into
// f's repository; it returns them with each case's tip and work commits.
// Every case's base is a root commit of its own.
func squashCorpus(t *testing.T, f *fixture, n int) ([]squashCase, [][2]string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(17, 2026))
	paths := corpusPaths
	cases := make([]squashCase, n)
	for i := range cases {
		base := map[string]string{}
		for _, p := range paths[:3+rng.IntN(len(paths)-3)] {
			base[p] = corpusFile(rng, fmt.Sprintf("base%d", i))
		}
		c := squashCase{base: base, quiet: rng.IntN(3) == 0}
		c.tip = base
		if !c.quiet || rng.IntN(2) == 0 {
			c.tip = corpusEdit(rng, base, paths, fmt.Sprintf("tip%d", i))
		}
		from := base
		if c.quiet {
			from = c.tip
		}
		c.work = corpusEdit(rng, from, paths, fmt.Sprintf("work%d", i))
		cases[i] = c
	}
	return cases, fastImport(t, f, cases)
}

// corpusPaths are the paths the corpus's trees are made of.
var corpusPaths = []string{"a.txt", "b.go", "run.sh", "docs/guide.md", "docs/deep/x.md", "lib/calc.go", "lib/sub/y.go", "new/z.txt", "l"}

// TestSquashMatchesMergeTree: on a random corpus of several hundred cases
// (files added, deleted, edited, renamed, changed mode, turned into
// folders, on both sides, so some conflict), the landing's squash is
// `git merge-tree --write-tree`'s tree — its in-process shortcut (a
// target that did not move) included — or, where merge-tree conflicts, a
// conflict refusal; and its patch-id is always the one the canonical diff
// from the tip to that tree has.
func TestSquashMatchesMergeTree(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	n := 400
	if testing.Short() {
		n = 80
	}
	cases, ids := squashCorpus(t, f, n)

	l := &lander{g: f.g, bg: ctx, cat: git.NewObjects(ctx, f.g)}
	defer l.cat.Close()
	l.startDiffer()
	defer l.closeDiffer()
	defer l.wg.Wait()
	quiet, conflicts, clean := 0, 0, 0
	for i, c := range cases {
		tip, work := ids[i][0], ids[i][1]
		sp := l.at(tip, work) // what a landing runs
		got := sp.squash()
		sp.policyChanges()
		if _, ok := l.quietTarget(tip, work); ok != c.quiet {
			t.Fatalf("case %d: quiet path %v, want %v", i, ok, c.quiet)
		}
		cmd := exec.Command("git", "--git-dir="+f.gitdir, "merge-tree", "--write-tree", "--no-messages", tip, work)
		cmd.Env = gitEnv(f.home)
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 1 {
			conflicts++
			var rf *refusal.Refusal
			if !errors.As(got.err, &rf) || rf.Code != "conflict" {
				t.Fatalf("case %d: merge-tree conflicts, the landing's squash gives %s (%v)", i, got.tree, got.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("case %d: merge-tree: %v", i, err)
		}
		if got.err != nil {
			t.Fatalf("case %d: merge-tree merges cleanly, the landing's squash: %v", i, got.err)
		}
		clean++
		if c.quiet {
			quiet++
		}
		merged := strings.Fields(string(out))[0]
		if got.tree != merged {
			t.Fatalf("case %d (quiet %v): squash %s, merge-tree %s", i, c.quiet, got.tree, merged)
		}
		want, err := patch.DiffTrees(ctx, f.g, tip, merged, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if got.pid != want {
			t.Fatalf("case %d: squash patch-id %s, the canonical diff of tip..merge-tree has %s", i, orNone(got.pid), orNone(want))
		}
	}
	t.Logf("%d cases: %d clean (%d quiet), %d conflicts", n, clean, quiet, conflicts)
	if quiet < n/10 || conflicts < n/20 || clean-quiet < n/10 {
		t.Fatalf("the corpus does not cover every path: %d clean (%d quiet), %d conflicts", clean, quiet, conflicts)
	}
}

// TestNarrativeMatchesGit: what the landed commit's message reads in
// process is what git says, on the squash corpus: the work's base
// (narrativeBase against `git merge-base`, also for pairs from unrelated
// histories, where git answers) and which paths the target changed since
// (pathsChanged against `git diff-tree -r --no-renames`, for every path of
// the three trees, their folders and paths in none of them).
func TestNarrativeMatchesGit(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	n := 200
	if testing.Short() {
		n = 40
	}
	cases, ids := squashCorpus(t, f, n)
	gitOut := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"--git-dir=" + f.gitdir}, args...)...)
		cmd.Env = gitEnv(f.home)
		out, _ := cmd.Output() // merge-base exits 1 for no base
		return strings.TrimSpace(string(out))
	}
	l := &lander{g: f.g, bg: ctx, cat: git.NewObjects(ctx, f.g)}
	defer l.cat.Close()
	inProcess := 0
	for i, c := range cases {
		tip, work := ids[i][0], ids[i][1]
		pairs := [][2]string{{tip, work}}
		if i > 0 {
			pairs = append(pairs, [2]string{ids[i-1][0], work}) // no shared history
		}
		for _, pr := range pairs {
			var err error
			if l.approved, err = readCommit(ctx, f.g, pr[1]); err != nil {
				t.Fatal(err)
			}
			l.bases = nil
			got, err := l.narrativeBase(ctx, pr[0])
			if err != nil {
				t.Fatalf("case %d: %v", i, err)
			}
			if want := gitOut("merge-base", pr[0], pr[1]); got != want {
				t.Fatalf("case %d: base of %s and %s: %q in process, git merge-base says %q", i, pr[0], pr[1], got, want)
			}
			if l.bases == nil {
				inProcess++
			}
		}
		base := gitOut("rev-parse", tip+"^")
		if c.quiet || base == "" {
			continue
		}
		var paths []string
		for _, m := range []map[string]string{c.base, c.tip, c.work} {
			for p := range m {
				paths = append(paths, p, p+"/inner.txt", p+"x")
				for dir := filepath.Dir(p); dir != "."; dir = filepath.Dir(dir) {
					paths = append(paths, dir)
				}
			}
		}
		paths = append(paths, corpusPaths...)
		got, ok := l.pathsChanged(base, tip, paths)
		if !ok {
			t.Fatalf("case %d: pathsChanged could not read the trees", i)
		}
		want, err := l.pathsChangedByGit(ctx, base, tip)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			if got[p] != want[p] {
				t.Fatalf("case %d: %s changed %v in process, %v by diff-tree", i, p, got[p], want[p])
			}
		}
	}
	if inProcess != n {
		t.Fatalf("%d pairs found their base in process, want the %d related ones", inProcess, n)
	}
}
