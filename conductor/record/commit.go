package record

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
	"github.com/conductor-dev/conductor/policy"
)

// recordCommit writes the two files as one commit on the target whose
// parent is the target's tip and whose diff is those two files only; the
// target moves by compare-and-swap. The checks come first: target allowed,
// record paths not forbidden, the target checked out elsewhere able to
// follow. Objects written for a refused record are left to git gc.
func recordCommit(ctx context.Context, o Options, g patch.Git, lr *policy.Landing, rules policy.RecordRules, res *Result) error {
	e := res.Entry
	if err := lr.TargetAllowed(e.Target); err != nil {
		return err
	}
	for _, p := range []string{rules.BuildLog, rules.Current} {
		if lr.IsForbidden(p) {
			return refusal.Newf(refusal.ForbiddenPath, "name a record path outside landing.forbiddenPaths (landing.record in roles/conductor-policy.json), or use mode files",
				"the record file %s is under a forbidden path of the landing policy", p)
		}
	}
	ref := "refs/heads/" + e.Target
	tip, err := g.Line(ctx, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	if err != nil || tip == "" {
		return refusal.Newf(refusal.TargetNotFound, "check the decision's target", "target branch %s does not exist in %s", e.Target, g.GitDir)
	}
	oldLog, err := blobAt(ctx, g, tip, rules.BuildLog)
	if err != nil {
		return err
	}
	oldCur, err := blobAt(ctx, g, tip, rules.Current)
	if err != nil {
		return err
	}
	newLog, newCur, already, err := render(oldLog, oldCur, e)
	if err != nil {
		return err
	}
	if already && bytes.Equal(newCur, oldCur) {
		res.Already = true
		return nil
	}

	tree, err := treeWith(ctx, g, tip, map[string][]byte{rules.BuildLog: newLog, rules.Current: newCur})
	if err != nil {
		return fmt.Errorf("record %s: %w", e.Decision, err)
	}
	msg := fmt.Sprintf("record: %s landed as %s on %s\n\nThe Record step: %s gets the landing's line and the status section of %s\nis rewritten. Nothing else changes.\n\nDecision-Id: %s\nRecorded-Commit: %s\n",
		e.Decision, patch.Short(e.Commit), e.Target, rules.BuildLog, rules.Current, e.Decision, e.Commit)
	var who Identity
	if o.Committer != nil {
		who = o.Committer(g.GitDir)
	}
	name, email := cmp.Or(who.Name, "conductor"), cmp.Or(who.Email, "conductor@localhost")
	when := o.Now().UTC().Format("2006-01-02T15:04:05Z")
	cg := g.WithEnv("GIT_AUTHOR_NAME="+name, "GIT_AUTHOR_EMAIL="+email, "GIT_AUTHOR_DATE="+when,
		"GIT_COMMITTER_NAME="+name, "GIT_COMMITTER_EMAIL="+email, "GIT_COMMITTER_DATE="+when)
	out, err := cg.RunInput(ctx, strings.NewReader(msg), "commit-tree", tree, "-p", tip)
	if err != nil {
		return fmt.Errorf("record %s: commit: %w", e.Decision, err)
	}
	commit := strings.TrimSpace(string(out))

	// The checked-out target (if any) must be able to follow.
	wt, err := checkedOut(ctx, g, ref)
	if err != nil {
		return err
	}
	if wt != nil {
		if err := wt.canFollow(ctx, ref, tip, commit); err != nil {
			return err
		}
	}
	if _, err := g.Run(ctx, "update-ref", "-m", "conductor record "+e.Decision, ref, commit, tip); err != nil {
		if now, _ := g.Line(ctx, "rev-parse", "--verify", "--quiet", ref); now != tip {
			return refusal.Newf(refusal.TargetMoved, "record again: it builds on the new tip",
				"%s moved while recording (from %s to %s)", e.Target, patch.Short(tip), patch.Short(now))
		}
		return fmt.Errorf("record %s: move %s: %w", e.Decision, e.Target, err)
	}
	res.Commit = commit
	if wt != nil {
		if _, err := wt.g.Run(ctx, "read-tree", "-m", "-u", tip, commit); err != nil {
			return fmt.Errorf("recorded %s as %s, but the worktree %s (which has %s checked out) could not follow: %v; run `git -C %s read-tree -m -u %s %s`",
				e.Decision, commit, wt.path, e.Target, err, wt.path, patch.Short(tip), patch.Short(commit))
		}
	}
	return nil
}

// blobAt returns the file at path in commit (nil when it has none).
func blobAt(ctx context.Context, g patch.Git, commit, path string) ([]byte, error) {
	typ, err := g.Line(ctx, "cat-file", "-t", commit+":"+path)
	if err != nil || typ == "" {
		return nil, nil // not there
	}
	if typ != "blob" {
		return nil, refusal.Newf(refusal.RecordStatusMalformed, "name a file, not a folder, in landing.record",
			"the record path %s is a %s at %s", path, typ, patch.Short(commit))
	}
	b, err := g.Run(ctx, "cat-file", "blob", commit+":"+path)
	if err != nil {
		return nil, fmt.Errorf("record: read %s at %s: %w", path, patch.Short(commit), err)
	}
	return b, nil
}

// treeWith is base's tree with files set (regular, 0644), built in a
// temporary index: no worktree is touched.
func treeWith(ctx context.Context, g patch.Git, base string, files map[string][]byte) (string, error) {
	dir, err := os.MkdirTemp("", "conductor-record-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	ig := g.WithEnv("GIT_INDEX_FILE=" + filepath.Join(dir, "index"))
	if _, err := ig.Run(ctx, "read-tree", base); err != nil {
		return "", err
	}
	for p, content := range files {
		blob, err := g.RunInput(ctx, bytes.NewReader(content), "hash-object", "-w", "--stdin")
		if err != nil {
			return "", err
		}
		if _, err := ig.Run(ctx, "update-index", "--add", "--cacheinfo", "100644,"+strings.TrimSpace(string(blob))+","+p); err != nil {
			return "", err
		}
	}
	return ig.Line(ctx, "write-tree")
}

// worktree is a worktree that has the target checked out.
type worktree struct {
	path string
	g    patch.Git
}

// checkedOut finds the worktree (main or linked) whose HEAD is ref.
func checkedOut(ctx context.Context, g patch.Git, ref string) (*worktree, error) {
	want := "ref: " + ref
	head := func(admin string) bool {
		b, err := os.ReadFile(filepath.Join(admin, "HEAD"))
		return err == nil && strings.TrimSpace(string(b)) == want
	}
	if filepath.Base(g.GitDir) == ".git" && head(g.GitDir) {
		if bare, _ := g.Line(ctx, "config", "--bool", "core.bare"); bare != "true" {
			wt := filepath.Dir(g.GitDir)
			return &worktree{path: wt, g: patch.Git{GitDir: g.GitDir, WorkTree: wt}}, nil
		}
	}
	base := filepath.Join(g.GitDir, "worktrees")
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		admin := filepath.Join(base, e.Name())
		b, err := os.ReadFile(filepath.Join(admin, "gitdir"))
		if err != nil || !head(admin) {
			continue
		}
		wt := filepath.Dir(strings.TrimSpace(string(b)))
		return &worktree{path: wt, g: patch.Git{GitDir: admin, WorkTree: wt}}, nil
	}
	return nil, nil
}

// canFollow refuses when the worktree has local changes to tracked files
// or files in the way of moving it from tip to commit.
func (w *worktree) canFollow(ctx context.Context, ref, tip, commit string) error {
	refuse := func(detail string) error {
		r := refusal.New(refusal.TargetCheckedOutDirty,
			fmt.Sprintf("%s is checked out in %s, which has local changes the record commit would clash with", strings.TrimPrefix(ref, "refs/heads/"), w.path),
			"commit, stash or discard the changes in that worktree (or use landing.record mode files), then record again")
		r.Detail = detail
		return r
	}
	st, err := w.g.Run(ctx, "status", "--porcelain", "-z", "--untracked-files=no", "--ignore-submodules=all")
	if err != nil {
		return fmt.Errorf("status of %s: %w", w.path, err)
	}
	if len(st) > 0 {
		return refuse(strings.ReplaceAll(strings.TrimRight(string(st), "\x00"), "\x00", "\n"))
	}
	if _, err := w.g.Run(ctx, "read-tree", "-m", "-u", "-n", tip, commit); err != nil {
		if ge, ok := errors.AsType[*git.GitError](err); ok {
			return refuse(strings.TrimSpace(string(ge.Stderr)))
		}
		return err
	}
	return nil
}
