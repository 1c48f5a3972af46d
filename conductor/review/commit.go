package review

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
)

// The conductor's identity on work commits.
const (
	conductorName  = "conductor"
	conductorEmail = "conductor@localhost"
)

const zeroOID = "0000000000000000000000000000000000000000"

// workCommit is the commit a review made (or found) for a run.
type workCommit struct {
	ref    string
	oldTip string // the branch tip before (zeroOID when the branch is new)
	parent string
	commit string
}

// makeWorkCommit builds the run's commit without touching any worktree or
// ref: the tree is base + diff, made in a temporary index. When the branch tip
// already is this run's commit with this tree, it is reused.
func makeWorkCommit(ctx context.Context, g patch.Git, res runrec.Result, base, ref string, diff []byte, now time.Time) (workCommit, error) {
	wc := workCommit{ref: ref, oldTip: zeroOID, parent: base}
	tip, err := g.Line(ctx, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}")
	if err == nil && tip != "" {
		wc.oldTip = tip
	}

	tree, err := patch.ApplyToBase(ctx, g, base, diff)
	if err != nil {
		return wc, err
	}

	if wc.oldTip != zeroOID {
		info, err := readCommit(ctx, g, wc.oldTip)
		if err != nil {
			return wc, err
		}
		if info.tree == tree && info.trailers["Run-Id"] == res.RunID && info.trailers["Patch-Id"] == res.PatchID {
			wc.commit, wc.parent = wc.oldTip, info.parent
			return wc, nil // reviewed before: the same commit
		}
		if _, err := g.Run(ctx, "merge-base", "--is-ancestor", base, wc.oldTip); err == nil {
			wc.parent = wc.oldTip // a refinement round stacks on the branch
		}
	}

	msg := commitMessage(res)
	date := fmt.Sprintf("%d +0000", now.Unix())
	cg := g.WithEnv(
		"GIT_AUTHOR_NAME="+conductorName, "GIT_AUTHOR_EMAIL="+conductorEmail, "GIT_AUTHOR_DATE="+date,
		"GIT_COMMITTER_NAME="+conductorName, "GIT_COMMITTER_EMAIL="+conductorEmail, "GIT_COMMITTER_DATE="+date,
	)
	id, err := cg.RunInput(ctx, strings.NewReader(msg), "commit-tree", tree, "-p", wc.parent, "-F", "-")
	if err != nil {
		return wc, fmt.Errorf("commit the run's diff: %w", err)
	}
	wc.commit = strings.TrimSpace(string(id))
	return wc, nil
}

func commitMessage(res runrec.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "work: %s (run %s)\n\n", res.TaskID, res.RunID)
	fmt.Fprintf(&b, "The worker's diff for task %s, committed by the conductor for review.\n", res.TaskID)
	if res.Session != "" || res.Role != "" {
		fmt.Fprintf(&b, "Session %s, role %s, run status %s.\n", orDash(oneLine(res.Session)), orDash(oneLine(res.Role)), orDash(oneLine(res.Status)))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "Run-Id: %s\n", res.RunID)
	fmt.Fprintf(&b, "Task-Id: %s\n", res.TaskID)
	fmt.Fprintf(&b, "Patch-Id: %s\n", res.PatchID)
	fmt.Fprintf(&b, "Model: %s\n", orDash(oneLine(modelName(res))))
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

type commitInfo struct {
	tree, parent string
	trailers     map[string]string
}

// readCommit reads a commit's tree, first parent and trailers (the last
// paragraph's "Key: value" lines).
func readCommit(ctx context.Context, g patch.Git, id string) (commitInfo, error) {
	out, err := g.Run(ctx, "cat-file", "commit", id)
	if err != nil {
		return commitInfo{}, fmt.Errorf("read commit %s: %w", patch.Short(id), err)
	}
	ci := commitInfo{trailers: map[string]string{}}
	header, body, _ := bytes.Cut(out, []byte("\n\n"))
	sc := bufio.NewScanner(bytes.NewReader(header))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		switch {
		case k == "tree":
			ci.tree = v
		case k == "parent" && ci.parent == "":
			ci.parent = v
		}
	}
	paras := strings.Split(strings.TrimSpace(string(body)), "\n\n")
	for _, line := range strings.Split(paras[len(paras)-1], "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.Contains(k, " ") {
			ci.trailers[k] = strings.TrimSpace(v)
		}
	}
	return ci, nil
}

// publish moves the work branch to the commit, compare-and-swap from the tip
// it had when the review started. It refuses when the branch is checked out
// in a worktree (moving it would leave that worktree showing a phantom
// diff).
func (wc workCommit) publish(ctx context.Context, g patch.Git) error {
	if wc.commit == wc.oldTip {
		return nil
	}
	out, err := g.Run(ctx, "worktree", "list", "--porcelain")
	if err != nil {
		return fmt.Errorf("list worktrees: %w", err)
	}
	var wt string
	for _, line := range strings.Split(string(out), "\n") {
		if p, ok := strings.CutPrefix(line, "worktree "); ok {
			wt = p
		}
		if line == "branch "+wc.ref {
			return refusal.Newf("work-branch-checked-out", "switch that worktree to another branch (or detach it), then review again",
				"the work branch %s is checked out in %s", strings.TrimPrefix(wc.ref, "refs/heads/"), wt)
		}
	}
	if _, err := g.Run(ctx, "update-ref", "-m", "conductor review", wc.ref, wc.commit, wc.oldTip); err != nil {
		var ge *git.GitError
		if errors.As(err, &ge) {
			return fmt.Errorf("move %s from %s to %s (did it move during the review? review again): %w",
				wc.ref, patch.Short(wc.oldTip), patch.Short(wc.commit), err)
		}
		return err
	}
	return nil
}
