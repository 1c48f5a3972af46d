package patch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/patch/git"
)

// fastImportTree writes the generator's file set as a root commit on ref
// and returns its tree id: an independent oracle for "the tree the worktree
// holds" (git's own fast-import, not git add).
func fastImportTree(t testing.TB, repo string, g *gen, ref string) string {
	t.Helper()
	var w bytes.Buffer
	fmt.Fprintf(&w, "commit %s\ncommitter Test <t@example.test> 1767225600 +0000\ndata 7\noracle\n", ref)
	w.WriteString("deleteall\n")
	for _, name := range g.names() {
		f := g.files[name]
		fmt.Fprintf(&w, "M %s inline %q\ndata %d\n", f.mode, name, len(f.data))
		w.Write(f.data)
		w.WriteByte('\n')
	}
	testGit(t, repo, w.Bytes(), "fast-import", "--quiet", "--force")
	return strings.TrimSpace(string(testGit(t, repo, nil, "rev-parse", ref+"^{tree}")))
}

// clearWorktree removes everything but the top-level .git entry.
func clearWorktree(t testing.TB, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == ".git" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// linkedWorktree makes a repository with a generated base commit and a
// linked worktree checked out at it; it returns the repository folder, the
// worktree folder, the generator and the base commit.
func linkedWorktree(t testing.TB, seed int64) (string, string, *gen, string) {
	t.Helper()
	repo := newRepo(t)
	g := newGen(seed)
	g.files[".gitignore"] = genFile{"100644", []byte("*.log\nignored-dir/\n")}
	g.mutate(40)
	fastImportTree(t, repo, g, "refs/heads/main")
	base := strings.TrimSpace(string(testGit(t, repo, nil, "rev-parse", "main")))
	wt := filepath.Join(t.TempDir(), "wt")
	testGit(t, repo, nil, "worktree", "add", "-q", "--detach", wt, base)
	return repo, wt, g, base
}

func privateGitDir(t testing.TB, repo string) string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(repo, ".git", "worktrees", "*"))
	if err != nil || len(matches) != 1 {
		t.Fatalf("want one linked worktree, got %v %v", matches, err)
	}
	return matches[0]
}

func TestExtractRoundTrip(t *testing.T) {
	requireGit(t)
	ctx := context.Background()
	repo, wt, g, base := linkedWorktree(t, 7)
	private := privateGitDir(t, repo)
	indexPath := filepath.Join(private, "index")
	for round := 0; round < 25; round++ {
		t.Run(fmt.Sprintf("round-%02d", round), func(t *testing.T) {
			g.mutate(10)
			clearWorktree(t, wt)
			g.writeTree(t, wt)
			// Ignored files never reach the diff.
			if err := os.WriteFile(filepath.Join(wt, "build.log"), []byte("noise"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(wt, "ignored-dir"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(wt, "ignored-dir", "x.txt"), []byte("noise"), 0o644); err != nil {
				t.Fatal(err)
			}
			want := fastImportTree(t, repo, g, "refs/oracle/want")
			indexBefore, _ := os.ReadFile(indexPath)
			fiBefore, _ := os.Stat(indexPath)

			var diff bytes.Buffer
			ex, err := Extract(ctx, ExtractOptions{Repo: Git{GitDir: private}, WorkTree: wt, Base: base, Out: &diff})
			if err != nil {
				t.Fatal(err)
			}
			if ex.Tree != want {
				t.Fatalf("Extract tree %s, want %s (fast-import oracle):\n%s", ex.Tree, want, testGit(t, repo, nil, "diff-tree", "-r", "--stat", "--summary", want, ex.Tree))
			}
			if ex.Bytes != int64(diff.Len()) {
				t.Errorf("Bytes = %d, wrote %d", ex.Bytes, diff.Len())
			}
			// The worker's own index is untouched.
			indexAfter, _ := os.ReadFile(indexPath)
			fiAfter, _ := os.Stat(indexPath)
			if !bytes.Equal(indexBefore, indexAfter) || !fiBefore.ModTime().Equal(fiAfter.ModTime()) {
				t.Errorf("the worker's index changed")
			}
			// Files and bytes: exactly git's diff-tree with the canonical options.
			names := strings.Split(strings.TrimSuffix(string(testGit(t, repo, nil, "diff-tree", "-r", "-z", "--name-only", "--no-renames", base, want)), "\x00"), "\x00")
			if strings.Join(names, "\n") != strings.Join(ex.Files, "\n") {
				t.Errorf("Files = %q, want %q", ex.Files, names)
			}
			gitDiff := testGit(t, repo, nil, append(append([]string{"diff-tree"}, CanonicalDiffArgs()...), base, want)...)
			if !bytes.Equal(gitDiff, diff.Bytes()) {
				t.Errorf("diff differs from git diff-tree's canonical form")
			}
			// The binding id is git's --verbatim id of the same bytes.
			gitID := strings.Fields(string(testGit(t, repo, diff.Bytes(), "patch-id", "--verbatim")))
			if len(gitID) == 0 || gitID[0] != ex.PatchID {
				t.Errorf("PatchID %s, git patch-id --verbatim says %v", ex.PatchID, gitID)
			}
			// DiffTrees gives the same bytes and id.
			var again bytes.Buffer
			id, err := DiffTrees(ctx, Git{GitDir: filepath.Join(repo, ".git")}, base, ex.Tree, &again)
			if err != nil {
				t.Fatal(err)
			}
			if id != ex.PatchID || !bytes.Equal(again.Bytes(), diff.Bytes()) {
				t.Errorf("DiffTrees differs from Extract")
			}
			// NoTree (a run's extraction): the same diff, no tree written.
			var lean bytes.Buffer
			lex, err := Extract(ctx, ExtractOptions{Repo: Git{GitDir: private}, WorkTree: wt, Base: base, Out: &lean, NoTree: true})
			if err != nil {
				t.Fatal(err)
			}
			if lex.Tree != "" || lex.PatchID != ex.PatchID || !bytes.Equal(lean.Bytes(), diff.Bytes()) || strings.Join(lex.Files, "\n") != strings.Join(ex.Files, "\n") {
				t.Errorf("NoTree: tree %q, patch-id %s (want %s), same diff %v", lex.Tree, lex.PatchID, ex.PatchID, bytes.Equal(lean.Bytes(), diff.Bytes()))
			}
			// ApplyToBase (no checkout: what review makes the work
			// commit with) gives the worktree's tree.
			applied, err := ApplyToBase(ctx, Git{GitDir: filepath.Join(repo, ".git")}, base, diff.Bytes())
			if err != nil {
				t.Fatalf("ApplyToBase: %v", err)
			}
			if applied != want {
				t.Errorf("ApplyToBase tree %s, want %s", applied, want)
			}
			// And git apply on a fresh checkout of the base agrees.
			fresh := t.TempDir()
			testGit(t, fresh, nil, "init", "-q")
			testGit(t, fresh, nil, "fetch", "-q", repo, base)
			testGit(t, fresh, nil, "checkout", "-q", "--detach", base)
			testGit(t, fresh, diff.Bytes(), "apply", "--index", "--whitespace=nowarn", "-")
			if got := strings.TrimSpace(string(testGit(t, fresh, nil, "write-tree"))); got != want {
				t.Errorf("git apply on a fresh checkout: tree %s, want %s", got, want)
			}
		})
	}
}

// TestExtractKeptDir: an extraction through a kept neutral git dir
// (ExtractOptions.NeutralDir, a pooled worktree's) gives a throw-away one's
// diff, patch-id and files, byte for byte, round after round; the dir stays
// in place, and whatever a previous user or an attacker left in it (an
// index with other content, a stale index.lock, an exclude file that would
// hide files, a config, a hook, a ref) is removed or has the dir replaced
// before git runs.
func TestExtractKeptDir(t *testing.T) {
	requireGit(t)
	ctx := context.Background()
	repo, wt, g, base := linkedWorktree(t, 11)
	private := privateGitDir(t, repo)
	kept := filepath.Join(t.TempDir(), "pool", "wt-1.git")
	marker := filepath.Join(t.TempDir(), "ran")
	tampers := []struct {
		name string
		do   func()
	}{
		{"none", func() {}},
		{"stale index", func() {
			// Another worktree's content: if it were used, its files would
			// show up as the worker's change.
			os.WriteFile(filepath.Join(kept, "index"), []byte("DIRC garbage"), 0o600)
		}},
		{"index.lock", func() { os.WriteFile(filepath.Join(kept, "index.lock"), nil, 0o600) }},
		{"exclude hides all", func() { os.WriteFile(filepath.Join(kept, "info", "exclude"), []byte("*\n"), 0o600) }},
		{"config runs a program", func() {
			os.WriteFile(filepath.Join(kept, "config"), []byte("[core]\n\tfsmonitor = touch "+marker+"\n\trepositoryformatversion = 0\n"), 0o600)
		}},
		{"a hook", func() {
			os.MkdirAll(filepath.Join(kept, "hooks"), 0o755)
			os.WriteFile(filepath.Join(kept, "hooks", "post-index-change"), []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755)
		}},
		{"a ref", func() { os.WriteFile(filepath.Join(kept, "refs", "x"), nil, 0o600) }},
		{"index is a folder", func() {
			os.Remove(filepath.Join(kept, "index"))
			os.MkdirAll(filepath.Join(kept, "index", "x"), 0o755)
		}},
		{"not a folder", func() { os.RemoveAll(kept); os.WriteFile(kept, nil, 0o600) }},
	}
	for round, tc := range tampers {
		g.mutate(8)
		clearWorktree(t, wt)
		g.writeTree(t, wt)
		if round > 0 {
			tc.do()
		}
		var got, want bytes.Buffer
		ex, err := Extract(ctx, ExtractOptions{Repo: Git{GitDir: private}, WorkTree: wt, Base: base, Out: &got, NoTree: true, NeutralDir: kept})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		wex, err := Extract(ctx, ExtractOptions{Repo: Git{GitDir: private}, WorkTree: wt, Base: base, Out: &want, NoTree: true})
		if err != nil {
			t.Fatal(err)
		}
		if ex.PatchID != wex.PatchID || !bytes.Equal(got.Bytes(), want.Bytes()) || strings.Join(ex.Files, "\n") != strings.Join(wex.Files, "\n") || want.Len() == 0 {
			t.Fatalf("%s: kept dir's diff %s (%d bytes, %d files), a throw-away one's %s (%d bytes, %d files)",
				tc.name, ex.PatchID, got.Len(), len(ex.Files), wex.PatchID, want.Len(), len(wex.Files))
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%s: a program in the kept dir ran", tc.name)
		}
		// The kept dir holds its files and the index the extraction made.
		ents, _ := os.ReadDir(kept)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if !slices.Equal(names, []string{"HEAD", "config", "index", "info", "refs"}) {
			t.Fatalf("%s: kept dir holds %v after use", tc.name, names)
		}
		os.Remove(filepath.Join(kept, "index"))
		if !keptNeutralOK(kept, extractFiles(Git{GitDir: private})) {
			t.Fatalf("%s: kept dir does not hold exactly its files after use", tc.name)
		}
	}
}

func TestExtractNoChanges(t *testing.T) {
	requireGit(t)
	repo, wt, _, base := linkedWorktree(t, 3)
	var diff bytes.Buffer
	ex, err := Extract(context.Background(), ExtractOptions{Repo: Git{GitDir: privateGitDir(t, repo)}, WorkTree: wt, Base: base, Out: &diff})
	if err != nil {
		t.Fatal(err)
	}
	if ex.PatchID != "" || len(ex.Files) != 0 || diff.Len() != 0 || ex.Tree != ex.BaseTree {
		t.Errorf("unchanged worktree: got %+v and %d diff bytes", ex, diff.Len())
	}
}

func TestExtractBadInput(t *testing.T) {
	requireGit(t)
	repo, wt, _, base := linkedWorktree(t, 5)
	private := privateGitDir(t, repo)
	other := newRepo(t)
	plain := t.TempDir()
	file := filepath.Join(plain, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts ExtractOptions
		want string
	}{
		{"missing base", ExtractOptions{Repo: Git{GitDir: private}, WorkTree: wt, Base: "no-such-rev"}, `base "no-such-rev": no such commit or tree`},
		{"option-like base", ExtractOptions{Repo: Git{GitDir: private}, WorkTree: wt, Base: "--output=/tmp/x"}, "not a revision"},
		{"empty base", ExtractOptions{Repo: Git{GitDir: private}, WorkTree: wt}, "base: no revision given"},
		{"not a worktree: plain folder", ExtractOptions{Repo: Git{GitDir: private}, WorkTree: plain, Base: base}, "not a worktree of repository"},
		{"not a worktree: file", ExtractOptions{Repo: Git{GitDir: private}, WorkTree: file, Base: base}, "not a worktree (not a directory)"},
		{"not a worktree: missing", ExtractOptions{Repo: Git{GitDir: private}, WorkTree: filepath.Join(plain, "nope"), Base: base}, "not a worktree"},
		{"worktree of another repository", ExtractOptions{Repo: Git{GitDir: filepath.Join(other, ".git")}, WorkTree: wt, Base: base}, "not a worktree of repository"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Extract(context.Background(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	t.Run("main worktree and common git dir accepted", func(t *testing.T) {
		if _, err := Extract(context.Background(), ExtractOptions{Repo: Git{GitDir: filepath.Join(repo, ".git")}, WorkTree: repo, Base: base}); err != nil {
			t.Error(err)
		}
		if _, err := Extract(context.Background(), ExtractOptions{Repo: Git{GitDir: filepath.Join(repo, ".git")}, WorkTree: wt, Base: base}); err != nil {
			t.Error(err)
		}
	})
	t.Run("embedded repository: its .git removed, its files extracted, the hazard named", func(t *testing.T) {
		sub := filepath.Join(wt, "sub")
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		testGit(t, sub, nil, "init", "-q")
		if err := os.WriteFile(filepath.Join(sub, "x"), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		testGit(t, sub, nil, "add", "x")
		testGit(t, sub, nil, "commit", "-q", "-m", "x")
		defer os.RemoveAll(sub)
		// Without RemoveHazards it is refused, and left alone.
		_, err := Extract(context.Background(), ExtractOptions{Repo: Git{GitDir: private}, WorkTree: wt, Base: base})
		if err == nil || !strings.Contains(err.Error(), "nested-repository sub/.git") {
			t.Errorf("error %v, want the nested repository named", err)
		}
		if _, err := os.Lstat(filepath.Join(sub, ".git")); err != nil {
			t.Fatalf("a refused extraction changed the worktree: %v", err)
		}
		ex, err := Extract(context.Background(), ExtractOptions{Repo: Git{GitDir: private}, WorkTree: wt, Base: base, RemoveHazards: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(ex.Hazards) != 1 || ex.Hazards[0].Code != HazardNestedRepo || ex.Hazards[0].Path != "sub/.git" {
			t.Errorf("hazards %+v, want the nested repository sub/.git", ex.Hazards)
		}
		if !slices.Contains(ex.Files, "sub/x") {
			t.Errorf("files %q, want sub/x", ex.Files)
		}
		if _, err := os.Lstat(filepath.Join(sub, ".git")); !os.IsNotExist(err) {
			t.Errorf("sub/.git is still there: %v", err)
		}
	})
}

// TestExtractHostileConfig plants every configuration a worker could use to
// make git run a program — in a replaced .git directory inside the worktree,
// in the worktree's .gitattributes and in the linked worktree's own config —
// proves the trap fires under a naive git invocation, then proves that
// Extract runs none of it and converts no bytes.
func TestExtractHostileConfig(t *testing.T) {
	requireGit(t)
	repo, wt, g, base := linkedWorktree(t, 11)
	private := privateGitDir(t, repo)
	trap := t.TempDir()
	marker := filepath.Join(trap, "ran")
	script := filepath.Join(trap, "evil.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$0 $*\" >> "+marker+"\ncat\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	hooks := filepath.Join(trap, "hooks")
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"post-index-change", "pre-commit", "post-checkout", "reference-transaction", "fsmonitor-watchman"} {
		if err := os.Symlink(script, filepath.Join(hooks, h)); err != nil {
			t.Fatal(err)
		}
	}
	hostile := strings.Join([]string{
		"[core]",
		"\tfsmonitor = " + script,
		"\thooksPath = " + hooks,
		"\tsshCommand = " + script,
		"\tpager = " + script,
		"\tattributesFile = " + filepath.Join(trap, "attributes"),
		"\tautocrlf = true",
		"[diff]",
		"\texternal = " + script,
		"[diff \"evil\"]",
		"\ttextconv = " + script,
		"\tcommand = " + script,
		"[filter \"evil\"]",
		"\tclean = " + script + " clean",
		"\tsmudge = " + script + " smudge",
		"\tprocess = " + script + " process",
		"\trequired = true",
		"",
	}, "\n")
	if err := os.WriteFile(filepath.Join(trap, "attributes"), []byte("* filter=evil diff=evil\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// 1. The worktree's .git file replaced by a directory with a hostile config.
	if err := os.Remove(filepath.Join(wt, ".git")); err != nil {
		t.Fatal(err)
	}
	testGit(t, wt, nil, "init", "-q")
	if err := os.WriteFile(filepath.Join(wt, ".git", "config"), []byte(hostile), 0o644); err != nil {
		t.Fatal(err)
	}
	// 2. The linked worktree's own config (config.worktree), enabled.
	testGit(t, repo, nil, "config", "extensions.worktreeConfig", "true")
	if err := os.WriteFile(filepath.Join(private, "config.worktree"), []byte(hostile), 0o644); err != nil {
		t.Fatal(err)
	}
	// 3. Worker-written attributes asking for filters, drivers, conversions.
	attrs := "[attr]evilmacro filter=evil diff=evil\n* filter=evil diff=evil\n*.txt text eol=crlf ident working-tree-encoding=UTF-16\n*.dat binary\n*.md evilmacro crlf\n"
	g.files[".gitattributes"] = genFile{"100644", []byte(attrs)}
	g.mutate(5)
	g.files["conv.txt"] = genFile{"100644", []byte("$Id$\nline one\nline two\n")}
	g.files["data.dat"] = genFile{"100644", []byte("plain text marked binary\n")}
	g.files["notes.md"] = genFile{"100644", []byte("macro\r\nfiltered\n")}
	clearWorktree(t, wt)
	g.writeTree(t, wt)
	if err := os.WriteFile(filepath.Join(wt, ".gitattributes"), []byte(attrs), 0o644); err != nil {
		t.Fatal(err)
	}

	// The trap is real: a naive git in the worktree runs the program.
	naive := exec.Command("git", "add", "-A")
	naive.Dir = wt
	naive.Env = testEnv(t.TempDir())
	naive.Run()
	naive = exec.Command("git", "--git-dir="+private, "--work-tree="+wt, "add", "-A")
	naive.Dir = wt
	naive.Env = testEnv(t.TempDir())
	naive.Run()
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the planted config did not fire under a naive git, the test proves nothing: %v", err)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}

	want := fastImportTree(t, repo, g, "refs/oracle/want")
	var diff bytes.Buffer
	ex, err := Extract(context.Background(), ExtractOptions{Repo: Git{GitDir: private}, WorkTree: wt, Base: base, Out: &diff})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("a planted program ran during Extract:\n%s", b)
	}
	if ex.Tree != want {
		t.Errorf("tree %s, want %s: bytes were converted", ex.Tree, want)
	}
	if !bytes.Contains(diff.Bytes(), []byte("+++ b/conv.txt\n@@ -0,0 +1,3 @@\n+$Id$\n+line one\n+line two\n")) {
		t.Errorf("ident or eol conversion altered the diff")
	}
	if !bytes.Contains(diff.Bytes(), []byte("+++ b/data.dat\n@@ -0,0 +1 @@\n+plain text marked binary\n")) {
		t.Errorf("a worker's binary attribute changed the canonical diff")
	}
	if !bytes.Contains(diff.Bytes(), []byte("+++ b/notes.md\n@@ -0,0 +1,2 @@\n+macro\r\n+filtered\n")) {
		t.Errorf("a worker's attribute macro changed the canonical diff")
	}
	for _, f := range ex.Files {
		if f == ".git" || strings.HasPrefix(f, ".git/") {
			t.Errorf("the worktree's .git reached the diff: %s", f)
		}
	}
	// DiffTrees in the operator's repository is neutral too.
	if _, err := DiffTrees(context.Background(), Git{GitDir: private, WorkTree: wt}, base, ex.Tree, io.Discard); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("a planted program ran during DiffTrees:\n%s", b)
	}
}

// TestExtractIndexSeeding: the stat data reused from the worker's index
// never hides a change (same size, mtime put back, in the same second or
// later), and an unusable index falls back to a plain read.
func TestExtractIndexSeeding(t *testing.T) {
	requireGit(t)
	ctx := context.Background()
	repo, wt, g, base := linkedWorktree(t, 21)
	private := privateGitDir(t, repo)
	var target string
	for _, name := range g.names() {
		if f := g.files[name]; f.mode == "100644" && len(f.data) > 10 && bytes.IndexByte(f.data, 0) < 0 {
			target = name
			break
		}
	}
	path := filepath.Join(wt, filepath.FromSlash(target))
	sameSizeEdit := func(t *testing.T) {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x20
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
		f2 := g.files[target]
		f2.data = b
		g.files[target] = f2
	}
	check := func(t *testing.T) {
		want := fastImportTree(t, repo, g, "refs/oracle/want")
		ex, err := Extract(ctx, ExtractOptions{Repo: Git{GitDir: private}, WorkTree: wt, Base: base})
		if err != nil {
			t.Fatal(err)
		}
		if ex.Tree != want {
			t.Fatalf("tree %s, want %s: a change was hidden", ex.Tree, want)
		}
	}
	t.Run("same second", func(t *testing.T) { sameSizeEdit(t); check(t) })
	t.Run("later second", func(t *testing.T) {
		// Put the file back as in the base through the worker's index, so
		// its entry holds the base blob with current stat data; then edit.
		testGit(t, wt, nil, "--git-dir="+private, "--work-tree="+wt, "checkout", "--", target)
		f := g.files[target]
		f.data = append([]byte(nil), f.data...)
		f.data[0] ^= 0x20
		g.files[target] = f
		check(t)
		time.Sleep(1100 * time.Millisecond)
		sameSizeEdit(t)
		check(t)
	})
	t.Run("garbage index", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(private, "index"), []byte("DIRC garbage"), 0o644); err != nil {
			t.Fatal(err)
		}
		check(t)
	})
	t.Run("index with conflicts", func(t *testing.T) {
		var info bytes.Buffer
		blob := strings.TrimSpace(string(testGit(t, repo, []byte("x\n"), "hash-object", "-w", "--stdin")))
		for stage := 1; stage <= 3; stage++ {
			fmt.Fprintf(&info, "100644 %s %d\tconflicted.txt\n", blob, stage)
		}
		testGit(t, wt, nil, "--git-dir="+private, "--work-tree="+wt, "read-tree", base)
		testGit(t, wt, info.Bytes(), "--git-dir="+private, "--work-tree="+wt, "update-index", "--index-info")
		check(t)
	})
}

// TestExtractOddNames: names that git quotes in diffs (tab, quote,
// backslash, newline, non-ASCII, leading dash) round-trip.
func TestExtractOddNames(t *testing.T) {
	requireGit(t)
	ctx := context.Background()
	repo, wt, g, base := linkedWorktree(t, 41)
	for i, name := range []string{"tab\there.txt", "quote\"d.txt", "back\\slash.txt", "new\nline.txt", "ünïcödé/файл.txt", "-dash.txt", "sp ace/x y.txt"} {
		g.files[name] = genFile{"100644", []byte(fmt.Sprintf("content %d\n", i))}
	}
	clearWorktree(t, wt)
	g.writeTree(t, wt)
	want := fastImportTree(t, repo, g, "refs/oracle/want")
	var diff bytes.Buffer
	ex, err := Extract(ctx, ExtractOptions{Repo: Git{GitDir: privateGitDir(t, repo)}, WorkTree: wt, Base: base, Out: &diff})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Tree != want {
		t.Fatalf("tree %s, want %s", ex.Tree, want)
	}
	found := map[string]bool{}
	for _, f := range ex.Files {
		found[f] = true
	}
	if !found["new\nline.txt"] || !found["ünïcödé/файл.txt"] {
		t.Errorf("Files lacks raw names: %q", ex.Files)
	}
	applied, err := ApplyToBase(ctx, Git{GitDir: filepath.Join(repo, ".git")}, base, diff.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if applied != want {
		t.Errorf("ApplyToBase tree %s, want %s", applied, want)
	}
}

// TestDiffFromMergeBase: one `git diff a...b` process gives exactly the
// bytes and id of DiffTrees from the merge base, over generated histories
// (text, binary, mode and symlink changes on both sides).
func TestDiffFromMergeBase(t *testing.T) {
	requireGit(t)
	ctx := context.Background()
	repo := newRepo(t)
	commit := func(tree string, parents ...string) string {
		args := []string{"commit-tree", tree, "-m", "c"}
		for _, p := range parents {
			args = append(args, "-p", p)
		}
		return strings.TrimSpace(string(testGit(t, repo, nil, args...)))
	}
	d, err := NewTreeDiffer(Git{GitDir: filepath.Join(repo, ".git")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for seed := int64(1); seed <= 8; seed++ {
		g := newGen(seed)
		g.mutate(40)
		base := commit(fastImportTree(t, repo, g, "refs/t/base"))
		g.mutate(12)
		work := commit(fastImportTree(t, repo, g, "refs/t/work"), base)
		g = newGen(seed)
		g.mutate(40)
		g.mutate(6) // the target's own changes, some on the same files
		g.files["target-only.txt"] = genFile{mode: "100644", data: []byte("the target moved on\n")}
		tip := commit(fastImportTree(t, repo, g, "refs/t/tip"), base)

		var got, want bytes.Buffer
		id, err := d.DiffFromMergeBase(ctx, tip, work, &got)
		if err != nil {
			t.Fatal(err)
		}
		wantID, err := DiffTrees(ctx, Git{GitDir: filepath.Join(repo, ".git")}, base, work, &want)
		if err != nil {
			t.Fatal(err)
		}
		if id != wantID || !bytes.Equal(got.Bytes(), want.Bytes()) || want.Len() == 0 {
			t.Fatalf("seed %d: DiffFromMergeBase gave %s (%d bytes), DiffTrees from the merge base %s (%d bytes)", seed, id, got.Len(), wantID, want.Len())
		}
	}
	// No shared history: ErrNoMergeBase, nothing written.
	g := newGen(99)
	g.mutate(5)
	a := commit(fastImportTree(t, repo, g, "refs/t/a"))
	g.mutate(5)
	b := commit(fastImportTree(t, repo, g, "refs/t/b"))
	var out bytes.Buffer
	if _, err := d.DiffFromMergeBase(ctx, a, b, &out); !errors.Is(err, ErrNoMergeBase) || out.Len() != 0 {
		t.Fatalf("unrelated histories: %v, %d bytes", err, out.Len())
	}
	if _, err := d.DiffFromMergeBase(ctx, "main", b, &out); err == nil {
		t.Fatal("a ref name was accepted")
	}
}

// TestTreeDifferKept: diffs through a kept neutral git dir are the diffs
// of a throw-away one, byte for byte; the kept dir stays after Close, is
// made once by concurrent first users, and is replaced when it does not
// hold exactly its files (an extra file git would read, changed bytes, a
// link, a ref).
func TestTreeDifferKept(t *testing.T) {
	requireGit(t)
	ctx := context.Background()
	repo := newRepo(t)
	g := Git{GitDir: filepath.Join(repo, ".git")}
	kept := filepath.Join(t.TempDir(), "data", "neutral-git")
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := NewTreeDifferAt(g, kept)
			if err != nil || !d.n.kept || d.n.dir != kept {
				t.Errorf("concurrent first use: %v (dir %q)", err, d.n.dir)
				return
			}
			d.Close()
		}()
	}
	wg.Wait()
	tampers := map[string]func(){
		"none":       func() {},
		"commondir":  func() { os.WriteFile(filepath.Join(kept, "commondir"), []byte(repo+"/.git\n"), 0o600) },
		"attributes": func() { os.WriteFile(filepath.Join(kept, "info", "attributes"), []byte("* diff=x\n"), 0o600) },
		"config link": func() {
			os.Remove(filepath.Join(kept, "config"))
			os.Symlink(filepath.Join(repo, ".git", "config"), filepath.Join(kept, "config"))
		},
		"a ref":        func() { os.WriteFile(filepath.Join(kept, "refs", "x"), nil, 0o600) },
		"info/exclude": func() { os.WriteFile(filepath.Join(kept, "info", "exclude"), nil, 0o600) },
		"not a folder": func() { os.RemoveAll(kept); os.WriteFile(kept, nil, 0o600) },
		"missing HEAD": func() { os.Remove(filepath.Join(kept, "HEAD")) },
	}
	for seed := int64(1); seed <= int64(len(tampers)); seed++ {
		gen := newGen(seed)
		gen.mutate(30)
		from := fastImportTree(t, repo, gen, "refs/t/from")
		gen.mutate(10)
		to := fastImportTree(t, repo, gen, "refs/t/to")
		name := slices.Sorted(maps.Keys(tampers))[seed-1]
		tampers[name]()
		d, err := NewTreeDifferAt(g, kept)
		if err != nil || !d.n.kept || d.n.dir != kept {
			t.Fatalf("%s: %v (dir %q)", name, err, d.n.dir)
		}
		var got, want bytes.Buffer
		id, err := d.Diff(ctx, from, to, &got)
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		wantID, err := DiffTrees(ctx, g, from, to, &want)
		if err != nil {
			t.Fatal(err)
		}
		if id != wantID || !bytes.Equal(got.Bytes(), want.Bytes()) || want.Len() == 0 {
			t.Fatalf("%s: kept dir's diff %s (%d bytes), a throw-away one's %s (%d bytes)", name, id, got.Len(), wantID, want.Len())
		}
		found := map[string]string{}
		filepath.WalkDir(kept, func(path string, e fs.DirEntry, err error) error {
			rel, _ := filepath.Rel(kept, path)
			b, _ := os.ReadFile(path)
			found[rel] = fmt.Sprintf("%v %q", e.Type(), b)
			return err
		})
		dir := fmt.Sprintf("%v %q", fs.ModeDir, "")
		wantFiles := map[string]string{".": dir, "refs": dir, "info": dir}
		for p, c := range keptNeutralFiles {
			wantFiles[filepath.FromSlash(p)] = fmt.Sprintf("%v %q", fs.FileMode(0), c)
		}
		if !maps.Equal(found, wantFiles) {
			t.Fatalf("%s: the kept dir holds %v after use, want %v", name, found, wantFiles)
		}
	}
}

// TestExtractIgnoresIndexBits: changes to files the worktree's own index
// marks assume-unchanged or skip-worktree, and files of a conflicted index,
// are still extracted (the index then lends no stat data).
func TestExtractIgnoresIndexBits(t *testing.T) {
	requireGit(t)
	ctx := context.Background()
	repo := newRepo(t)
	for _, f := range []string{"a", "b", "c"} {
		os.WriteFile(filepath.Join(repo, f), []byte(f+"\n"), 0o644)
	}
	testGit(t, repo, nil, "add", ".")
	testGit(t, repo, nil, "commit", "-q", "-m", "base")
	base := strings.TrimSpace(string(testGit(t, repo, nil, "rev-parse", "HEAD")))
	testGit(t, repo, nil, "update-index", "--assume-unchanged", "a")
	testGit(t, repo, nil, "update-index", "--skip-worktree", "b")
	for _, f := range []string{"a", "b", "c"} {
		os.WriteFile(filepath.Join(repo, f), []byte(f+" changed\n"), 0o644)
	}
	ex, err := Extract(ctx, ExtractOptions{Repo: Git{GitDir: filepath.Join(repo, ".git")}, WorkTree: repo, Base: base})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ex.Files, ",") != "a,b,c" {
		t.Fatalf("extracted %v, want a, b and c", ex.Files)
	}
}

// TestIndexSeedable: plain indexes of every version lend their stat data;
// any entry git would not refresh, a conflict, a split index or a damaged
// file does not.
func TestIndexSeedable(t *testing.T) {
	requireGit(t)
	repo := newRepo(t)
	for i := 0; i < 40; i++ {
		p := filepath.Join(repo, fmt.Sprintf("d%d", i%3), strings.Repeat("n", i+1))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(fmt.Sprint(i)), 0o644)
	}
	testGit(t, repo, nil, "add", ".")
	testGit(t, repo, nil, "commit", "-q", "-m", "base")
	index := filepath.Join(repo, ".git", "index")
	read := func() []byte {
		b, err := os.ReadFile(index)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, v := range []string{"2", "3", "4"} {
		testGit(t, repo, nil, "update-index", "--index-version", v)
		if !git.IndexSeedable(read()) {
			t.Errorf("a plain version %s index is not seedable", v)
		}
	}
	testGit(t, repo, nil, "update-index", "--index-version", "2")
	b := read()
	for _, cut := range []int{0, 11, 40, len(b) / 2, len(b) - 21} {
		if git.IndexSeedable(b[:cut]) {
			t.Errorf("an index cut at %d bytes is seedable", cut)
		}
	}
	for _, v := range []string{"3", "4"} {
		testGit(t, repo, nil, "update-index", "--index-version", v)
		testGit(t, repo, nil, "update-index", "--skip-worktree", "d1/nn")
		if git.IndexSeedable(read()) {
			t.Errorf("version %s: an index with a skip-worktree entry is seedable", v)
		}
		testGit(t, repo, nil, "update-index", "--no-skip-worktree", "d1/nn")
		testGit(t, repo, nil, "update-index", "--assume-unchanged", "d2/nnn")
		if git.IndexSeedable(read()) {
			t.Errorf("version %s: an index with an assume-unchanged entry is seedable", v)
		}
		testGit(t, repo, nil, "update-index", "--no-assume-unchanged", "d2/nnn")
		if !git.IndexSeedable(read()) {
			t.Errorf("version %s: the bits cleared, the index is still not seedable", v)
		}
	}
	testGit(t, repo, nil, "update-index", "--split-index")
	if git.IndexSeedable(read()) {
		t.Error("a split index is seedable")
	}
	testGit(t, repo, nil, "update-index", "--no-split-index")
	blob := strings.TrimSpace(string(testGit(t, repo, []byte("x\n"), "hash-object", "-w", "--stdin")))
	testGit(t, repo, []byte("100644 "+blob+" 1\tconflict\n100644 "+blob+" 2\tconflict\n"), "update-index", "--index-info")
	if git.IndexSeedable(read()) {
		t.Error("a conflicted index is seedable")
	}
}

// TestWorktreeRepoNamesItsOwnGitDir: whichever git dir of the repository
// it is given (the common one, its own private one, another worktree's),
// WorktreeRepo answers with the git dir git registered for that worktree,
// found from the repository's records.
func TestWorktreeRepoNamesItsOwnGitDir(t *testing.T) {
	requireGit(t)
	repo, wt1, _, base := linkedWorktree(t, 11)
	private1 := privateGitDir(t, repo)
	wt2 := filepath.Join(t.TempDir(), "wt2")
	testGit(t, repo, nil, "worktree", "add", "-q", "--detach", wt2, base)
	var private2 string
	matches, _ := filepath.Glob(filepath.Join(repo, ".git", "worktrees", "*"))
	for _, m := range matches {
		if m != private1 {
			private2 = m
		}
	}
	common := filepath.Join(repo, ".git")
	for _, c := range []struct{ given, dir, want string }{
		{private1, wt1, private1},
		{common, wt1, private1},
		{common, wt2, private2},
		{private1, wt2, private2},
		{private1, repo, common},
		{common, repo, common},
	} {
		g, err := WorktreeRepo(Git{GitDir: c.given}, c.dir)
		if err != nil {
			t.Errorf("given %s, worktree %s: %v", c.given, c.dir, err)
			continue
		}
		if g.GitDir != c.want || g.WorkTree != c.dir {
			t.Errorf("given %s, worktree %s: git dir %s, work tree %s; want %s", c.given, c.dir, g.GitDir, g.WorkTree, c.want)
		}
	}
}
