package land

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/policy"
)

// TestSquashInProcess: the squash applied in process is merge-tree's tree
// whenever it is made, and it is made in the common case (the target moved
// elsewhere); when the squash changes exactly what the policy diff changes,
// its canonical diff is the policy diff byte for byte (so the patch-id
// taken from it is the squash's own); whenever the two differ, sameChanges
// says so and git diffs the squash.
func TestSquashInProcess(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name      string
		work, tip map[string]string
		want      bool // the squash has the policy diff's changes
		apply     bool // and is made in process
	}{
		{name: "disjoint files", work: map[string]string{"lib/new.go": "package lib\n", "src/keep.txt": "changed\n"},
			tip: map[string]string{"README.md": "# demo, edited\n"}, want: true, apply: true},
		{name: "new nested folders", work: map[string]string{"a/b/c/d.txt": "d\n", "a/e.txt": "e\n", "lib/x/y.go": "package y\n"},
			tip: map[string]string{"src/other.txt": "o\n"}, want: true, apply: true},
		{name: "new folders and a removed folder", work: map[string]string{"a/b/c/d.txt": "d\n", "docs/guide.md": ""},
			tip: map[string]string{"src/other.txt": "o\n"}, want: true},
		{name: "a file replaced by a folder", work: map[string]string{"src/keep.txt": "", "src/keep.txt/inner": "i\n"},
			tip: map[string]string{"README.md": "# x\n"}, want: true, apply: true},
		{name: "symlink and executable", work: map[string]string{"lib/link": "-> calc.go", "bin/run": "x> #!/bin/sh\n"},
			tip: map[string]string{"docs/other.md": "o\n"}, want: true, apply: true},
		{name: "a deletion only", work: map[string]string{"docs/guide.md": ""},
			tip: map[string]string{"README.md": "# x\n"}, want: true, apply: true},
		{name: "the tip added the folder the work adds", work: map[string]string{"new/a.txt": "a\n"},
			tip: map[string]string{"new/b.txt": "b\n"}, want: true, apply: true},
		{name: "same file, other hunk", work: map[string]string{"lib/calc.go": strings.Replace(calcGo, "// seven", "// SEVEN", 1)},
			tip: map[string]string{"lib/calc.go": strings.Replace(calcGo, "func Add", "// Add adds.\nfunc Add", 1)}, want: false},
		{name: "mode change only", work: map[string]string{"src/keep.txt": "x> keep\n"},
			tip: map[string]string{"README.md": "# y\n"}, want: false},
		{name: "the tip removed a folder the work adds to", work: map[string]string{"docs/new.md": "n\n"},
			tip: map[string]string{"docs/guide.md": ""}, want: true},
		{name: "the tip moved a folder the work adds to", work: map[string]string{"docs/new.md": "n\n"},
			tip: map[string]string{"docs/guide.md": "", "manual/guide.md": "guide\n"}, want: false},
		{name: "the work removes a folder the tip adds to", work: map[string]string{"docs/guide.md": ""},
			tip: map[string]string{"docs/more.md": "m\n"}, want: true, apply: true},
		{name: "the work moves a folder the tip adds to", work: map[string]string{"docs/guide.md": "", "manual/guide.md": "guide\n"},
			tip: map[string]string{"docs/more.md": "m\n"}, want: false},
		{name: "the work empties a folder and adds another", work: map[string]string{"docs/guide.md": "", "doc2/guide.md": "guide\n"},
			tip: map[string]string{"README.md": "# z\n"}, want: true},
		{name: "the tip made one of the changes already", work: map[string]string{"lib/new.go": "package lib\n", "README.md": "# same\n"},
			tip: map[string]string{"README.md": "# same\n"}, want: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			base := f.rev("refs/heads/main")
			work := f.commit("refs/heads/work/x", base, tc.work, "work")
			tip := f.commit("refs/heads/main", base, tc.tip, "tip")
			tipTree := f.rev(tip + "^{tree}")
			// Applied in process first: the trees it lists are exactly the
			// ones the store lacks (before merge-tree writes them).
			var policyDiff bytes.Buffer
			if _, err := patch.DiffTrees(ctx, f.g, base, work, &policyDiff); err != nil {
				t.Fatal(err)
			}
			changes, err := policy.ParseChanges(bytes.NewReader(policyDiff.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			l2 := &lander{cat: newBatch(ctx, f.g)}
			defer l2.cat.close()
			applied, trees, ok := l2.applyChanges(tipTree, f.rev(work+"^{tree}"), changes)
			for _, o := range trees {
				if f.rev(o.oid+"^{tree}") != "" {
					t.Fatalf("tree %s listed to write, but already stored", o.oid)
				}
			}
			if tc.name == "disjoint files" && len(trees) != 1 {
				t.Fatalf("disjoint files: %d new trees, want only the root (the changed folders are the work's own)", len(trees))
			}
			cmd := exec.Command("git", "--git-dir="+f.gitdir, "merge-tree", "--write-tree", tip, work)
			cmd.Env = gitEnv(f.home)
			mt, err := cmd.Output()
			var ee *exec.ExitError
			conflict := errors.As(err, &ee) && ee.ExitCode() == 1
			if err != nil && !conflict {
				t.Fatalf("merge-tree: %v", err)
			}
			merged := strings.Fields(string(mt))[0]
			l := &lander{cat: newBatch(ctx, f.g)}
			defer l.cat.close()
			// same says whether from..to has the policy diff's changes; it
			// must never say so when their diffs differ.
			same := func(from, to string) (bool, bool) {
				var d bytes.Buffer
				if _, err := patch.DiffTrees(ctx, f.g, from, to, &d); err != nil {
					t.Fatal(err)
				}
				equal := bytes.Equal(d.Bytes(), policyDiff.Bytes())
				got := l.sameChanges(from, to, changes)
				if got && !equal {
					t.Fatalf("%s..%s: same changes, different diffs:\n%s\n---\n%s", from, to, policyDiff.Bytes(), d.Bytes())
				}
				return got, equal
			}
			if conflict {
				if ok {
					t.Fatalf("merge-tree finds a conflict, the change was applied in process as %s", applied)
				}
				return
			}
			if ok != tc.apply {
				t.Fatalf("applied in process: %v, want %v", ok, tc.apply)
			}
			if ok {
				if applied != merged {
					t.Fatalf("applied tree %s, merge-tree's %s", applied, merged)
				}
				for _, o := range trees {
					if got := f.git("cat-file", "-t", o.oid); got != "tree" { // merge-tree wrote the same trees
						t.Fatalf("tree object %s: %s", o.oid, got)
					}
				}
			}
			got, equal := same(tipTree, merged)
			if got != tc.want {
				t.Fatalf("sameChanges = %v, want %v", got, tc.want)
			}
			if !got && equal && tc.name != "mode change only" {
				t.Fatal("identical diffs not recognised")
			}
			// Other pairs of trees: the work's own, the base to the squash.
			if got, _ := same(f.rev(base+"^{tree}"), f.rev(work+"^{tree}")); !got && tc.name != "mode change only" {
				t.Fatal("the policy diff's own trees do not match its changes")
			}
			same(f.rev(base+"^{tree}"), merged)
			same(tipTree, f.rev(work+"^{tree}"))
		})
	}
}

// TestSquashInProcessRandom: on random changes of both sides (files added,
// edited and removed, folders created and emptied), a squash applied in
// process is always merge-tree's clean result.
func TestSquashInProcessRandom(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	rng := rand.New(rand.NewPCG(7, 11))
	dirs := []string{"", "docs/", "lib/", "lib/sub/", "src/", "new/", "new/deep/"}
	names := []string{"a.txt", "b.go", "c.md"}
	files := map[string]string{}
	for _, d := range dirs[:5] {
		for _, n := range names {
			files[d+n] = d + n + "\n"
		}
	}
	base := f.commit("refs/heads/base", f.rev("refs/heads/main"), files, "base")
	edit := func(tag string) map[string]string {
		m := map[string]string{}
		for range 1 + rng.IntN(4) {
			p := dirs[rng.IntN(len(dirs))] + names[rng.IntN(len(names))]
			if rng.IntN(3) == 0 {
				m[p] = ""
			} else {
				m[p] = p + " by " + tag + "\n"
			}
		}
		return m
	}
	applied := 0
	for i := range 60 {
		tip := f.commit("refs/heads/tip", base, edit("tip"), "tip")
		work := f.commit("refs/heads/work", base, edit("work"), "work")
		var d bytes.Buffer
		if _, err := patch.DiffTrees(ctx, f.g, base, work, &d); err != nil {
			t.Fatal(err)
		}
		changes, err := policy.ParseChanges(&d)
		if err != nil {
			t.Fatal(err)
		}
		l := &lander{cat: newBatch(ctx, f.g)}
		tree, _, ok := l.applyChanges(f.rev(tip+"^{tree}"), f.rev(work+"^{tree}"), changes)
		l.cat.close()
		if !ok {
			continue
		}
		applied++
		cmd := exec.Command("git", "--git-dir="+f.gitdir, "merge-tree", "--write-tree", tip, work)
		cmd.Env = gitEnv(f.home)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("case %d: applied in process as %s, merge-tree: %v\n%s", i, tree, err, out)
		}
		if merged := strings.Fields(string(out))[0]; merged != tree {
			t.Fatalf("case %d: applied %s, merge-tree %s", i, tree, merged)
		}
	}
	t.Logf("%d of 60 applied in process", applied)
	if applied < 10 {
		t.Fatalf("only %d of 60 cases were applied in process", applied)
	}
}
