package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/forge/fakegitea"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// TestScriptLand runs the landing scripts in testdata/script/land: the happy
// path, one scenario per refusal code, TOCTOU cases, concurrent landings and
// kill -9 at a step.
func TestScriptLand(t *testing.T) {
	testscript.Run(t, scriptParams("land", map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"fakellm":   fakellm.ScriptCmd,
		"fakegitea": fakegitea.ScriptCmd,
		"work":      landWorkCmd,
		"approve":   landApproveCmd,
		"capture":   landCaptureCmd,
		"landstate": landStateCmd,
		"landscript": func(ts *testscript.TestScript, neg bool, args []string) {
			// landscript: copies scripts/land-work.sh into $WORK.
			b, err := os.ReadFile(filepath.Join("..", "..", "scripts", "land-work.sh"))
			ts.Check(err)
			ts.Check(os.WriteFile(filepath.Join(ts.Getenv("WORK"), "land-work.sh"), b, 0o755))
		},
	}))
}

func landGit(ts *testscript.TestScript, repo string) patch.Git {
	g, err := git.OpenRepo(ts.MkAbs(repo))
	ts.Check(err)
	g = patch.Git{GitDir: g.CommonDir()}
	var env []string
	for _, n := range []string{"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE"} {
		env = append(env, n+"="+ts.Getenv(n))
	}
	return g.WithEnv(env...)
}

// landWorkCmd is "work REPO NAME [--base REV] [--msg TEXT] DST=SRC|DST=-...": it commits,
// without a checkout, onto refs/heads/work/NAME (parent: --base, default
// main's tip) the base tree with each DST set to the content of the file
// SRC (or deleted for -).
func landWorkCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: work REPO NAME [--base REV] [--msg TEXT] DST=SRC...")
	}
	ctx := context.Background()
	g := landGit(ts, args[0])
	name, base, msg := args[1], "refs/heads/main", "Change "+args[1]
	rest := args[2:]
	for len(rest) > 1 && strings.HasPrefix(rest[0], "--") {
		switch rest[0] {
		case "--base":
			base = rest[1]
		case "--msg":
			msg = rest[1]
		default:
			ts.Fatalf("work: unknown flag %s", rest[0])
		}
		rest = rest[2:]
	}
	parent, err := g.Line(ctx, "rev-parse", "--verify", base+"^{commit}")
	ts.Check(err)
	idx := filepath.Join(ts.Getenv("WORK"), ".work-index-"+name)
	defer os.Remove(idx)
	ig := g.WithEnv("GIT_INDEX_FILE=" + idx)
	_, err = ig.Run(ctx, "read-tree", parent)
	ts.Check(err)
	for _, a := range rest {
		dst, src, ok := strings.Cut(a, "=")
		if !ok {
			ts.Fatalf("work: %q is not DST=SRC", a)
		}
		if src == "-" {
			_, err = ig.Run(ctx, "update-index", "--force-remove", dst)
			ts.Check(err)
			continue
		}
		f, err := os.Open(ts.MkAbs(src))
		ts.Check(err)
		blob, err := ig.RunInput(ctx, f, "hash-object", "-w", "--stdin")
		f.Close()
		ts.Check(err)
		_, err = ig.Run(ctx, "update-index", "--add", "--cacheinfo", "100644,"+strings.TrimSpace(string(blob))+","+dst)
		ts.Check(err)
	}
	tree, err := ig.Line(ctx, "write-tree")
	ts.Check(err)
	msg += "\n\nRun-Id: run-" + name + "\nTask-Id: t-" + name + "\nModel: fake\n"
	c, err := g.RunInput(ctx, strings.NewReader(msg), "commit-tree", tree, "-p", parent)
	ts.Check(err)
	_, err = g.Run(ctx, "update-ref", "refs/heads/work/"+name, strings.TrimSpace(string(c)))
	ts.Check(err)
}

// landApproveCmd is "approve REPO NAME [request-changes|nodecision]
// [--target=BRANCH]": it records a verdict on work/NAME's tip bound to the
// binding patch-id of its diff from the merge base with main (as review
// does) and, unless told otherwise, raises and resolves (merge) a decision
// against BRANCH (default main), exporting its id as D_NAME.
func landApproveCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: approve REPO NAME [request-changes|nodecision] [--target=BRANCH]")
	}
	ctx := context.Background()
	target := "main"
	if t, ok := strings.CutPrefix(args[len(args)-1], "--target="); ok {
		target, args = t, args[:len(args)-1]
	}
	g := landGit(ts, args[0])
	name := args[1]
	ref := "refs/heads/work/" + name
	c, err := g.Line(ctx, "rev-parse", "--verify", ref+"^{commit}")
	ts.Check(err)
	base, err := g.Line(ctx, "merge-base", "refs/heads/main", c)
	ts.Check(err)
	pid, err := patch.DiffTrees(ctx, g, base, c, io.Discard)
	ts.Check(err)
	s, err := bus.Open(ctx, bus.Options{DataRoot: ts.Getenv("CONDUCTOR_HOME")})
	ts.Check(err)
	defer s.Close()
	verdict := bus.VerdictApprove
	if len(args) > 2 && args[2] == "request-changes" {
		verdict = bus.VerdictRequestChanges
	}
	_, err = s.PutVerdict(ctx, bus.Verdict{RunID: "run-" + name, WorkRef: "work/" + name, Commit: c, PatchID: pid,
		Verdict: verdict, Reviewer: "script"})
	ts.Check(err)
	if len(args) > 2 {
		return
	}
	d, err := s.RaiseDecision(ctx, bus.Decision{Kind: bus.KindMergeProtected, RaisedBy: "script", Repo: g.GitDir,
		WorkRef: "work/" + name, Commit: c, Target: target, RunID: "run-" + name})
	ts.Check(err)
	_, err = s.ResolveDecision(ctx, d.ID, bus.OptionMerge, "pm")
	ts.Check(err)
	ts.Setenv("D_"+name, d.ID)
}

// landCaptureCmd is "capture NAME": the previous command's stdout, trimmed,
// becomes $NAME.
func landCaptureCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: capture NAME")
	}
	ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile("stdout")))
}

// landStateCmd is "landstate save|check NAME REPO": every ref, the worktree
// list, the index and HEAD of REPO, the scratch folders under the data
// root and every decision's landing row in the store — saved, then compared.
func landStateCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 || (args[0] != "save" && args[0] != "check") {
		ts.Fatalf("usage: landstate save|check NAME REPO")
	}
	ctx := context.Background()
	g := landGit(ts, args[2])
	var b strings.Builder
	refs, err := g.Run(ctx, "for-each-ref", "--format=%(refname) %(objectname) %(symref)")
	ts.Check(err)
	b.Write(refs)
	wts, err := g.Run(ctx, "worktree", "list", "--porcelain")
	ts.Check(err)
	b.Write(wts)
	for _, f := range []string{"HEAD", "index"} {
		data, _ := os.ReadFile(filepath.Join(g.GitDir, f))
		fmt.Fprintf(&b, "%s %x\n", f, data)
	}
	entries, _ := os.ReadDir(filepath.Join(g.GitDir, "worktrees"))
	fmt.Fprintf(&b, "admin worktrees %d\n", len(entries))
	scratch, _ := filepath.Glob(filepath.Join(ts.Getenv("CONDUCTOR_HOME"), "land", "*", "scratch", "*"))
	fmt.Fprintf(&b, "scratch %v\n", scratch)
	s, err := bus.Open(ctx, bus.Options{DataRoot: ts.Getenv("CONDUCTOR_HOME")})
	ts.Check(err)
	defer s.Close()
	ds, err := s.ListDecisions(ctx, false)
	ts.Check(err)
	var rows []string
	for _, d := range ds {
		l, err := s.GetLanding(ctx, d.ID)
		rows = append(rows, fmt.Sprintf("%s %s %v %s", d.ID, d.Option, err, l.Commit))
	}
	sort.Strings(rows)
	b.WriteString(strings.Join(rows, "\n"))
	b.WriteString("\n" + storeDump(ts))
	file := filepath.Join(ts.Getenv("WORK"), ".landstate-"+args[1])
	if args[0] == "save" {
		ts.Check(os.WriteFile(file, []byte(b.String()), 0o644))
		return
	}
	want, err := os.ReadFile(file)
	ts.Check(err)
	if string(want) != b.String() {
		ts.Fatalf("state changed:\n--- before\n%s\n--- after\n%s", want, b.String())
	}
}

// storeDump is every row of every table of the embedded store, read-only.
func storeDump(ts *testscript.TestScript) string {
	path := filepath.Join(ts.Getenv("CONDUCTOR_HOME"), bus.FileName)
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	ts.Check(err)
	defer db.Close()
	var tables []string
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
	ts.Check(err)
	for rows.Next() {
		var n string
		ts.Check(rows.Scan(&n))
		tables = append(tables, n)
	}
	ts.Check(rows.Err())
	rows.Close()
	var b strings.Builder
	for _, t := range tables {
		rows, err := db.Query(`SELECT * FROM "` + t + `"`)
		ts.Check(err)
		cols, err := rows.Columns()
		ts.Check(err)
		var lines []string
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			ts.Check(rows.Scan(ptrs...))
			lines = append(lines, fmt.Sprintf("%q", vals))
		}
		ts.Check(rows.Err())
		rows.Close()
		sort.Strings(lines)
		fmt.Fprintf(&b, "table %s %v\n%s\n", t, cols, strings.Join(lines, "\n"))
	}
	return b.String()
}
