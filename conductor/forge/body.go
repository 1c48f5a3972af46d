package forge

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/patch"
)

// BodyInput is what a pull request body is made from.
type BodyInput struct {
	Record   *runrec.Result // nil when opened from a bare branch
	Repo     patch.Git
	Branch   string
	Tip      string
	Base     string
	Issue    int64
	IssueURL string // link to the issue on the forge, when known
	Verdicts VerdictSource
}

// PRBody builds the pull request description: the commit message body, the
// run receipt (task, model alias, tokens, steps, patch-id), the diffstat, the
// review verdict and the issue line. Missing pieces are said to be missing.
func PRBody(ctx context.Context, in BodyInput) string {
	var b strings.Builder
	if msg, err := in.Repo.Run(ctx, "log", "-1", "--format=%b", in.Tip); err == nil {
		if body := strings.TrimSpace(stripTrailers(string(msg))); body != "" {
			b.WriteString(body + "\n\n")
		}
	}
	b.WriteString("### Run\n\n")
	b.WriteString("| | |\n|---|---|\n")
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	if r := in.Record; r != nil {
		row("task", code(r.TaskID))
		row("run", code(r.RunID))
		model := r.ModelAlias
		if r.Model != "" && r.Model != r.ModelAlias {
			model += " (" + r.Model + ")"
		}
		row("model alias", orNone(model))
		row("tokens", tokens(r.PromptTokens, r.CompletionTokens, r.TotalTokens))
		row("steps", fmt.Sprint(r.Steps))
		row("status", orNone(r.Status))
		row("patch-id", code(r.PatchID))
		row("base commit", code(r.BaseCommit))
	} else {
		row("run", "none (opened from a branch)")
	}
	row("branch", code(in.Branch))
	row("commit", code(in.Tip))

	b.WriteString("\n### Diffstat\n\n```\n")
	b.WriteString(diffstat(ctx, in))
	b.WriteString("```\n")

	b.WriteString("\n### Checks and gate\n\n")
	b.WriteString(checks(ctx, in))

	if in.Issue > 0 {
		fmt.Fprintf(&b, "\nCloses #%d", in.Issue)
		if in.IssueURL != "" {
			fmt.Fprintf(&b, " (%s)", in.IssueURL)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n_Opened by conductor as a draft: review the diff before marking it ready._\n")
	return b.String()
}

func code(s string) string {
	if s == "" {
		return "none"
	}
	return "`" + s + "`"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func tokens(p, c, t *int64) string {
	if p == nil && c == nil && t == nil {
		return "not reported by the server"
	}
	n := func(v *int64) string {
		if v == nil {
			return "?"
		}
		return fmt.Sprint(*v)
	}
	return fmt.Sprintf("%s prompt + %s completion = %s total", n(p), n(c), n(t))
}

func diffstat(ctx context.Context, in BodyInput) string {
	from := ""
	if in.Record != nil && in.Record.BaseCommit != "" {
		from = in.Record.BaseCommit
	} else if mb, err := in.Repo.Line(ctx, "merge-base", "refs/heads/"+in.Base, in.Tip); err == nil {
		from = mb
	} else if parent, err := in.Repo.Line(ctx, "rev-parse", "--verify", "--quiet", in.Tip+"^"); err == nil {
		from = parent
	}
	if from == "" {
		return "(no base to compare with)\n"
	}
	// Two commits, no worktree: a submodule pointer change is shown (the
	// guards' diff.ignoreSubmodules=all would hide it from a reader).
	out, err := in.Repo.Run(ctx, "diff", "--no-ext-diff", "--no-textconv", "--ignore-submodules=none", "--stat=72", from, in.Tip)
	if err != nil {
		return fmt.Sprintf("(diffstat unavailable: %v)\n", err)
	}
	if len(out) == 0 {
		return "(no changes)\n"
	}
	return string(out)
}

func checks(ctx context.Context, in BodyInput) string {
	if in.Verdicts == nil {
		return "No review verdict available (no store).\n"
	}
	if v, ok := latestVerdict(ctx, in.Verdicts, in.Branch); ok {
		var b strings.Builder
		fmt.Fprintf(&b, "Review verdict: **%s** by %s on commit `%s` (patch-id `%s`).\n", v.Verdict, orNone(v.Reviewer), v.Commit, v.PatchID)
		if v.Commit != "" && v.Commit != in.Tip {
			fmt.Fprintf(&b, "\n**Note:** the verdict is for `%s`, the branch is at `%s`.\n", v.Commit, in.Tip)
		}
		if len(v.Findings) > 0 {
			b.WriteString("\n")
			for _, f := range v.Findings {
				fmt.Fprintf(&b, "- %s\n", f)
			}
		}
		return b.String()
	}
	return "No review verdict recorded for this branch.\n"
}

// latestVerdict looks the branch's verdict up by full ref, then short name.
func latestVerdict(ctx context.Context, src VerdictSource, branch string) (bus.Verdict, bool) {
	if src == nil {
		return bus.Verdict{}, false
	}
	for _, ref := range []string{"refs/heads/" + branch, branch} {
		if v, err := src.LatestVerdict(ctx, ref); err == nil {
			return v, true
		}
	}
	return bus.Verdict{}, false
}

// stripTrailers drops a trailing block of "Key: value" lines (the work
// commit's trailers are in the table already).
func stripTrailers(msg string) string {
	lines := strings.Split(strings.TrimRight(msg, "\n"), "\n")
	i := len(lines)
	for i > 0 {
		l := lines[i-1]
		k, _, ok := strings.Cut(l, ": ")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			break
		}
		i--
	}
	if i == len(lines) || (i > 0 && strings.TrimSpace(lines[i-1]) != "") {
		return msg
	}
	return strings.Join(lines[:i], "\n")
}

func jsonIndent(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
