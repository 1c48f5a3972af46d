package land

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/patch/git"
	"github.com/conductor-dev/conductor/policy"
)

// TestModesLandSameTree lands the same scenarios with no checkout and in a
// scratch worktree and checks both commit the same tree: text, binary,
// executable, symlink, deletion, a new folder under an existing one, and a
// target that moved elsewhere first.
func TestModesLandSameTree(t *testing.T) {
	scenarios := []struct {
		name    string
		files   map[string]string
		advance map[string]string // committed on main after the work is based
	}{
		{"text", change, nil},
		{"binary", map[string]string{"docs/logo.bin": "\x00\x01\x02\xff binary \x00"}, nil},
		{"executable", map[string]string{"lib/run.sh": "x> #!/bin/sh\necho hi\n"}, nil},
		{"symlink", map[string]string{"docs/link": "-> guide.md"}, nil},
		{"delete", map[string]string{"docs/guide.md": ""}, nil},
		{"nested folder", map[string]string{"lib/sub/deep/a.go": "package deep\n"}, nil},
		{"target moved", change, map[string]string{"docs/other.md": "x\n", "README.md": "# demo 2\n"}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			trees := map[string]string{}
			for _, mode := range []string{ModeTree, ModeWorktree} {
				f := newFixture(t)
				f.rules.gate = []policy.GateCommand{{Name: "ok", Argv: []string{"true"}, NeedsFiles: mode == ModeWorktree}}
				id, _ := f.approved("a", sc.files)
				if sc.advance != nil {
					f.commit("refs/heads/main", "", sc.advance, "advance")
				}
				out, err := f.land(id, nil)
				if err != nil || out.Mode != mode {
					t.Fatalf("%s: %+v %v", mode, out, err)
				}
				trees[mode] = f.rev("refs/heads/main^{tree}")
				if trees[mode] != out.Tree {
					t.Fatalf("%s: committed tree %s, outcome says %s", mode, trees[mode], out.Tree)
				}
			}
			if trees[ModeTree] != trees[ModeWorktree] {
				t.Fatalf("no-checkout tree %s, worktree tree %s", trees[ModeTree], trees[ModeWorktree])
			}
		})
	}
}

func TestAuditMismatches(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	id, _ := f.approved("a", change)
	out, err := f.land(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	audit := func(rev string) AuditReport {
		t.Helper()
		rep, err := Audit(ctx, AuditOptions{Git: f.g, Store: f.store, Commit: rev})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := audit(out.Commit); !rep.OK || rep.Refusal() != nil {
		t.Fatalf("clean landing fails audit: %+v", rep)
	}
	// A commit carrying the same trailers but another change.
	msg := f.git("log", "-1", "--format=%B", out.Commit)
	forged := f.commit("refs/heads/forged", out.Commit+"^", map[string]string{"lib/new.go": "package lib // not reviewed\n"}, msg)
	rep := audit(forged)
	rf := rep.Refusal()
	if rep.OK || rf == nil || rf.Code != "audit-mismatch" ||
		!strings.Contains(rf.Detail, "trailer Patch-Id = re-derived patch-id") || !strings.Contains(rf.Detail, "note on") ||
		!strings.Contains(rf.Detail, "store landing commit") {
		t.Fatalf("forged commit: %+v", rf)
	}
	// An edited note.
	note := f.git("notes", "--ref=conductor", "show", out.Commit)
	f.runIn("", strings.NewReader(strings.Replace(note, `"model": "fake"`, `"model": "other"`, 1)),
		"git", "--git-dir="+f.gitdir, "notes", "--ref=conductor", "add", "-f", "-F", "-", out.Commit)
	rf = audit(out.Commit).Refusal()
	if rf == nil || !strings.Contains(rf.Detail, "note model = trailer Model: want fake, got other") {
		t.Fatalf("edited note: %+v", rf)
	}
	// A commit that was never landed.
	rep = audit("refs/heads/main^")
	if rep.OK || !strings.Contains(rep.Refusal().Reason, "has no receipt trailers") {
		t.Fatalf("unlanded commit: %+v", rep)
	}
	if len(rep.Checks) != 1 || rep.Checks[0].OK || rep.Checks[0].Name != "receipt trailers" {
		t.Fatalf("unlanded commit's checks: %+v", rep.Checks)
	}
	if _, err := Audit(ctx, AuditOptions{Git: f.g, Commit: "nosuch"}); err == nil {
		t.Fatal("audit of a missing commit succeeded")
	}
	var r *refusal.Refusal
	if errors.As(err, &r) {
		t.Fatal("unexpected refusal")
	}
}

func FuzzSplitTrailers(f *testing.F) {
	f.Add("subject\n\nbody\n\nDecision-Id: d-1\nPatch-Id: abc\n")
	f.Add("only a subject")
	f.Add("Key: value")
	f.Add("\n\n\n")
	f.Add("s\n\nA: b\nnot a trailer\n")
	f.Fuzz(func(t *testing.T, msg string) {
		body, ts := splitTrailers(msg)
		if len(body) > len(msg)+1 {
			t.Fatalf("body longer than the message")
		}
		for _, tr := range ts {
			if !isToken(tr.Key) {
				t.Fatalf("bad key %q", tr.Key)
			}
		}
		git.ParseCommit("x", []byte(msg))
	})
}

func TestSplitTrailers(t *testing.T) {
	cases := []struct {
		msg, body string
		n         int
	}{
		{"Fix: handle nil\n", "Fix: handle nil\n", 0},
		{"subject\n\nDecision-Id: d-1\nPatch-Id: p\n", "subject\n", 2},
		{"subject\n\nbody text\n", "subject\n\nbody text\n", 0},
		{"subject\n\nbody\n\nA: b\nnot one\n", "subject\n\nbody\n\nA: b\nnot one\n", 0},
		{"subject\n\n\nRun-Id: r\n\n", "subject\n", 1},
	}
	for _, c := range cases {
		body, ts := splitTrailers(c.msg)
		if body != c.body || len(ts) != c.n {
			t.Errorf("splitTrailers(%q) = %q, %d trailers; want %q, %d", c.msg, body, len(ts), c.body, c.n)
		}
	}
}

// A verdict recorded under the full ref name (as review does) approves a
// decision raised with the short one.
func TestLandVerdictRefSpelling(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	base := f.rev("refs/heads/main")
	c := f.commit("refs/heads/work/x", base, change, "x")
	if _, err := f.store.PutVerdict(ctx, bus.Verdict{WorkRef: "refs/heads/work/x", Commit: c, PatchID: f.patchID(base, c),
		Verdict: bus.VerdictApprove}); err != nil {
		t.Fatal(err)
	}
	id := f.decide("x", c, "main", "", bus.OptionMerge)
	out, err := f.land(id, nil)
	if err != nil || out.Status != StatusLanded {
		t.Fatalf("%+v %v", out, err)
	}
	if msg := f.git("log", "-1", "--format=%B", "main"); !strings.Contains(msg, "Run-Id: unknown") || !strings.Contains(msg, "Model: unknown") {
		t.Fatalf("trailers without a run:\n%s", msg)
	}
}

// A note written by someone else between the note's preparation and the
// ref transaction is kept: the notes commit is rebuilt on top of it.
func TestLandKeepsForeignNote(t *testing.T) {
	f := newFixture(t)
	id, _ := f.approved("a", change)
	out, err := f.land(id, func(o *Options) {
		o.Fault = func(step string) {
			if step == "commit" {
				f.git("notes", "--ref=conductor", "add", "-m", "foreign", "refs/heads/work/a")
			}
		}
	})
	if err != nil || out.Status != StatusLanded {
		t.Fatalf("%+v %v", out, err)
	}
	if n := f.git("notes", "--ref=conductor", "show", "refs/heads/work/a"); n != "foreign" {
		t.Fatalf("foreign note lost: %q", n)
	}
	if !strings.Contains(f.git("notes", "--ref=conductor", "show", out.Commit), `"decision": "`+id+`"`) {
		t.Fatal("receipt note missing")
	}
}

// A decision whose repository is a linked worktree's private git dir lands
// in the repository.
func TestLandRepoIsLinkedGitDir(t *testing.T) {
	f := newFixture(t)
	id, c := f.approved("a", change)
	wt := filepath.Join(t.TempDir(), "linked")
	f.git("worktree", "add", "-q", "--detach", wt, "main")
	d, err := f.store.RaiseDecision(context.Background(), bus.Decision{Kind: bus.KindMergeProtected,
		Repo: filepath.Join(f.gitdir, "worktrees", "linked"), WorkRef: "work/a", Commit: c, Target: "main"})
	if err != nil {
		t.Fatal(err)
	}
	f.store.ResolveDecision(context.Background(), d.ID, bus.OptionMerge, "pm")
	_ = id
	if out, err := f.land(d.ID, nil); err != nil || out.Status != StatusLanded {
		t.Fatalf("%+v %v", out, err)
	}
}
