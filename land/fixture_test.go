package land

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
)

// testRules is the default landing policy with a gate chosen by the test.
type testRules struct {
	*policy.Landing
	gate []policy.GateCommand
}

func (r testRules) Gate() []policy.GateCommand { return r.gate }

func defaultLanding(t testing.TB) *policy.Landing {
	t.Helper()
	pol, err := policy.Load(roles.FS, "")
	if err != nil {
		t.Fatalf("load default policy: %v", err)
	}
	return pol.Landing()
}

// fixture is a real repository and a real embedded store.
type fixture struct {
	t        testing.TB
	dir      string // work tree of the operator's repository
	gitdir   string
	g        patch.Git
	store    bus.Store
	dataRoot string
	home     string
	rules    testRules
}

func gitEnv(home string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=Test Author", "GIT_AUTHOR_EMAIL=author@example.test",
		"GIT_COMMITTER_NAME=Test Committer", "GIT_COMMITTER_EMAIL=committer@example.test",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
		"LANG=C", "LC_ALL=C",
	}
}

// calcGo is lib/calc.go in the fixture's first commit.
const calcGo = "package lib\n\nfunc Add(a, b int) int {\n\treturn a + b\n}\n\n// one\n// two\n// three\n// four\n// five\n// six\n// seven\n"

func newFixture(t testing.TB) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{t: t, dir: filepath.Join(root, "repo"), dataRoot: filepath.Join(root, "data"), home: filepath.Join(root, "home")}
	for _, d := range []string{f.dir, f.dataRoot, f.home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.run("git", "init", "-q", "-b", "operator", f.dir)
	f.gitdir = filepath.Join(f.dir, ".git")
	f.g = patch.Git{GitDir: f.gitdir}
	f.commit("refs/heads/main", "", map[string]string{
		"README.md":     "# demo\n",
		"docs/guide.md": "guide\n",
		"lib/calc.go":   calcGo,
		"src/keep.txt":  "keep\n",
	}, "initial")
	st, err := bus.Open(context.Background(), bus.Options{DataRoot: f.dataRoot})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	f.store = st
	f.rules = testRules{Landing: defaultLanding(t)}
	return f
}

func (f *fixture) run(name string, args ...string) string {
	f.t.Helper()
	return f.runIn("", nil, name, args...)
}

func (f *fixture) runIn(dir string, stdin io.Reader, name string, args ...string) string {
	f.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = gitEnv(f.home)
	cmd.Dir = dir
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		f.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

func (f *fixture) git(args ...string) string {
	f.t.Helper()
	return f.run("git", append([]string{"--git-dir=" + f.gitdir}, args...)...)
}

// rev returns the object id of rev, or "" when it does not exist.
func (f *fixture) rev(rev string) string {
	cmd := exec.Command("git", "--git-dir="+f.gitdir, "rev-parse", "--verify", "-q", rev)
	cmd.Env = gitEnv(f.home)
	out, _ := cmd.Output()
	return strings.TrimSpace(string(out))
}

// commit writes a commit on ref (created when missing) whose tree is the
// parent's (or parent ref's) with files set ("" deletes; a "-> target"
// value makes a symlink, "x> content" an executable), without touching any worktree.
func (f *fixture) commit(ref, parent string, files map[string]string, msg string) string {
	f.t.Helper()
	if parent == "" {
		parent = f.rev(ref)
	}
	idx := filepath.Join(f.t.TempDir(), "index")
	env := append(gitEnv(f.home), "GIT_INDEX_FILE="+idx)
	g := func(stdin io.Reader, args ...string) string {
		cmd := exec.Command("git", append([]string{"--git-dir=" + f.gitdir}, args...)...)
		cmd.Env = env
		cmd.Stdin = stdin
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			f.t.Fatalf("git %v: %v\n%s", args, err, errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	if parent != "" {
		g(nil, "read-tree", parent)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		content := files[n]
		switch {
		case content == "":
			g(nil, "update-index", "--force-remove", n)
		case strings.HasPrefix(content, "x> "):
			blob := g(strings.NewReader(strings.TrimPrefix(content, "x> ")), "hash-object", "-w", "--stdin")
			g(nil, "update-index", "--add", "--cacheinfo", "100755,"+blob+","+n)
		case strings.HasPrefix(content, "-> "):
			blob := g(strings.NewReader(strings.TrimPrefix(content, "-> ")), "hash-object", "-w", "--stdin")
			g(nil, "update-index", "--add", "--cacheinfo", "120000,"+blob+","+n)
		default:
			blob := g(strings.NewReader(content), "hash-object", "-w", "--stdin")
			g(nil, "update-index", "--add", "--cacheinfo", "100644,"+blob+","+n)
		}
	}
	tree := g(nil, "write-tree")
	args := []string{"commit-tree", tree, "-m", msg}
	if parent != "" {
		args = append(args, "-p", parent)
	}
	c := g(nil, args...)
	g(nil, "update-ref", ref, c)
	return c
}

// approved sets up a reviewed, approved and resolved change: a work commit
// on work/<name> off main's tip, its verdict bound to the binding patch-id
// and a resolved merge decision. It returns the decision id and the commit.
func (f *fixture) approved(name string, files map[string]string) (string, string) {
	f.t.Helper()
	return f.approvedWith(name, files, bus.OptionMerge)
}

// approvedWith is approved with the decision resolved with option ("":
// left open).
func (f *fixture) approvedWith(name string, files map[string]string, option string) (string, string) {
	f.t.Helper()
	ctx := context.Background()
	base := f.rev("refs/heads/main")
	runID := "run-" + name
	c := f.commit("refs/heads/work/"+name, base, files,
		"Change "+name+"\n\nRun-Id: "+runID+"\nTask-Id: t-"+name+"\nPatch-Id: x\nModel: fake")
	pid := f.patchID(base, c)
	tok := int64(42)
	if err := f.store.PutRun(ctx, bus.Run{ID: runID, TaskID: "t-" + name, Status: "succeeded", ModelAlias: "fake",
		TotalTokens: &tok, Repo: f.gitdir, BaseCommit: base, PatchID: pid, StartedAt: time.Unix(1, 0)}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.store.PutVerdict(ctx, bus.Verdict{RunID: runID, WorkRef: "work/" + name, Commit: c, PatchID: pid,
		Verdict: bus.VerdictApprove, Reviewer: "rev"}); err != nil {
		f.t.Fatal(err)
	}
	return f.decide(name, c, "main", runID, option), c
}

func (f *fixture) decide(name, commit, target, runID, option string) string {
	f.t.Helper()
	ctx := context.Background()
	d, err := f.store.RaiseDecision(ctx, bus.Decision{Kind: bus.KindMergeProtected, RaisedBy: "review", Repo: f.gitdir,
		WorkRef: "work/" + name, Commit: commit, Target: target, RunID: runID})
	if err != nil {
		f.t.Fatal(err)
	}
	if option != "" {
		if _, err := f.store.ResolveDecision(ctx, d.ID, option, "pm"); err != nil {
			f.t.Fatal(err)
		}
	}
	return d.ID
}

func (f *fixture) patchID(from, to string) string {
	f.t.Helper()
	id, err := patch.DiffTrees(context.Background(), f.g, from, to, io.Discard)
	if err != nil {
		f.t.Fatal(err)
	}
	return id
}

func (f *fixture) opts(id string) Options {
	return Options{Store: f.store, Rules: f.rules, DecisionID: id, DataRoot: f.dataRoot, Sandbox: unsandboxed(f.t),
		Now: func() time.Time { return time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC) }}
}

// unsandboxed is the explicit "none" backend. These tests are about the
// landing's logic, and their gates write markers on the host or move the
// target during the gate; runtask's escape suite proves that the default
// gate runs in bubblewrap and reaches nothing on the host.
func unsandboxed(t testing.TB) sandbox.Sandbox {
	sb, err := sandbox.NewWithOptions(sandbox.BackendNone, sandbox.Options{Warn: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func (f *fixture) land(id string, mod func(*Options)) (Outcome, error) {
	o := f.opts(id)
	if mod != nil {
		mod(&o)
	}
	return Run(context.Background(), o)
}

// snapshot hashes every file of the git dir except the object store (tree
// operations may write unreferenced objects) and lists the scratch folders
// under the data root.
func (f *fixture) snapshot() string {
	f.t.Helper()
	var b strings.Builder
	filepath.WalkDir(f.gitdir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(f.gitdir, p)
		if rel == "objects" {
			return filepath.SkipDir
		}
		if d.IsDir() {
			b.WriteString("dir " + rel + "\n")
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		b.WriteString(rel + " " + hex.EncodeToString(sum[:8]) + "\n")
		return nil
	})
	scratch, _ := filepath.Glob(filepath.Join(f.dataRoot, "land", "*", "scratch", "*"))
	b.WriteString("scratch " + strings.Join(scratch, ",") + "\n")
	b.WriteString("worktrees " + f.git("worktree", "list", "--porcelain") + "\n")
	return b.String()
}
