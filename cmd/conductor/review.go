package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/dispatch"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/review"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/patch"
)

func newReviewCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "review",
		Usage:     "review a run: commit its diff to work/<task>, run the policy checks and the gate, record a verdict",
		ArgsUsage: "RUN",
		UsageText: "conductor review RUN [--approve [--raise TARGET] | --request-changes TEXT [--redispatch]] [--json]\n" +
			"conductor review --task TASK-ID ...   (the task's newest run)",
		Description: "RUN is a run id (a folder under <data root>/runs) or the path of a run folder.\n" +
			"The run's diff is committed by the conductor onto refs/heads/work/<task-id> through a temporary\n" +
			"index (no worktree is touched): its tree is the run's base plus the diff, its parent the branch tip\n" +
			"when the branch descends from the base (refinement rounds stack), else the base. Trailers: Run-Id,\n" +
			"Task-Id, Patch-Id, Model. Then the checks of roles/conductor-policy.json run: landing paths\n" +
			"(forbidden paths, new root files, new top-level folders, symlinks), size limits, per-file syntax\n" +
			"checks, and the gate commands on a scratch export of the commit (no .git, no credentials).\n\n" +
			"Without --approve or --request-changes only the report is printed and nothing is recorded: exit 0\n" +
			"when clean, 3 when a check or the gate failed. --approve records an approval bound to (work ref,\n" +
			"commit, patch-id) and moves the work branch; when any check fails it is refused (exit 3) and NOTHING\n" +
			"is recorded. --request-changes TEXT records a request for changes with TEXT and every finding;\n" +
			"--redispatch then continues the run's session with those findings (a new run; review it again).",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "approve", Usage: "record an approval (refused unless every check and the gate pass)"},
			&cli.StringFlag{Name: "request-changes", Usage: "record a request for changes with this `TEXT` (plus every finding)"},
			&cli.BoolFlag{Name: "redispatch", Usage: "with --request-changes: continue the run's session with the findings"},
			&cli.StringFlag{Name: "raise", Usage: "with --approve: raise a git.merge.protected decision to land on `TARGET`; its id is printed"},
			&cli.StringFlag{Name: "task", Usage: "review the newest run of `TASK-ID` (from the bus store) instead of RUN"},
			&cli.StringFlag{Name: "reviewer", Usage: "who reviews (recorded with the verdict)", EnvVars: []string{"CONDUCTOR_REVIEWER"}},
			&cli.StringFlag{Name: "roles", Usage: "roles `DIR` overriding the default contracts (default: the repository's roles/ folder when it has one)"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as one JSON object"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress line on a terminal"},
			// For --redispatch (as run-task run).
			&cli.StringFlag{Name: "model", Usage: "with --redispatch: model ALIAS (default: the task's, else $CONDUCTOR_MODEL)"},
			&cli.StringFlag{Name: "sandbox", Usage: "sandbox backend for the checks and the gate (and, with --redispatch, the worker): bwrap, docker, auto or none (env WORKER_SANDBOX; default: auto; the role's for the worker)"},
			&cli.BoolFlag{Name: "keep-worktree", Usage: "with --redispatch: keep the worktree after the run"},
			&cli.BoolFlag{Name: "progress", Usage: "with --redispatch: print a progress line per step on stderr"},
		},
		Action: func(c *cli.Context) error {
			switch {
			case c.String("task") != "" && c.NArg() != 0:
				return usagef("review takes RUN or --task TASK-ID, not both")
			case c.String("task") == "" && c.NArg() != 1:
				return usagef("review takes one RUN, got %d arguments", c.NArg())
			case c.Bool("approve") && c.IsSet("request-changes"):
				return usagef("--approve and --request-changes exclude each other")
			case c.IsSet("request-changes") && strings.TrimSpace(c.String("request-changes")) == "":
				return usagef("--request-changes needs a TEXT saying what to change")
			case c.Bool("redispatch") && !c.IsSet("request-changes"):
				return usagef("--redispatch needs --request-changes TEXT")
			case c.String("raise") != "" && !c.Bool("approve"):
				return usagef("--raise TARGET needs --approve")
			}
			return reviewAction(c, d)
		},
	}
}

func reviewAction(c *cli.Context, d *deps) error {
	ctx := c.Context
	cfg := d.config(c)
	recording := c.Bool("approve") || c.IsSet("request-changes")

	var store bus.Store
	openStore := func() (bus.Store, error) {
		if store != nil {
			return store, nil
		}
		s, err := d.openStore(c)
		if err != nil {
			return nil, fmt.Errorf("review: bus store: %w", err)
		}
		store = s
		return s, nil
	}
	var dir runrec.Dir
	if task := c.String("task"); task != "" {
		s, err := openStore()
		if err != nil {
			return err
		}
		runs, err := s.ListRuns(ctx, bus.RunFilter{TaskID: task, Limit: 1})
		if err != nil {
			return fmt.Errorf("review: runs of task %s: %w", task, err)
		}
		if len(runs) == 0 {
			return fmt.Errorf("review: task %s has no run in the bus store", task)
		}
		dir = runrec.Dir(cfg.RunDir(runs[0].ID))
	} else {
		var err error
		if dir, err = reviewRunDir(cfg.RunDir, c.Args().First()); err != nil {
			return err
		}
	}
	if recording {
		if _, err := openStore(); err != nil {
			return err
		}
	}
	res, err := dir.ReadResult()
	if err != nil {
		return fmt.Errorf("review: %w", err)
	}

	// The policy of the committed tip review checks against (the target
	// to raise, else HEAD), never a working tree.
	rev := "HEAD"
	if t := c.String("raise"); t != "" {
		rev = "refs/heads/" + strings.TrimPrefix(t, "refs/heads/")
	}
	pol, err := enforcedPolicy(ctx, c.String("roles"), res.Repo, rev)
	if err != nil {
		return fmt.Errorf("review: %w", err)
	}
	reviewer := cmp.Or(c.String("reviewer"), d.Getenv("USER"), "conductor")
	sb, err := gateSandboxFor(c, d, cfg.Sandbox, true, c.Bool("json") || c.Bool("quiet"))
	if err != nil {
		return err
	}
	defer closeSandbox(d, sb)
	rep, err := review.Run(ctx, review.Options{
		Sandbox:        sb,
		Store:          store,
		Policy:         pol,
		RunDir:         dir,
		Approve:        c.Bool("approve"),
		RequestChanges: c.String("request-changes"),
		Reviewer:       reviewer,
		Raise:          c.String("raise"),
		ScratchDir:     cfg.ScratchDir(),
		Getenv:         d.Getenv,
		Now:            d.Now,
	})
	if err == nil || rep.Complete() {
		if rerr := renderReview(d.Stdout, rep, c.Bool("json")); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		return err
	}
	if rep.Verdict != nil {
		d.emit(c, bus.EventReviewed, rep.RunID, res.TaskID, reviewer, map[string]any{"verdict": rep.Verdict.Verdict, "commit": rep.Verdict.Commit, "patchId": rep.PatchID})
	}
	if rep.Decision != nil {
		d.emit(c, bus.EventDecisionRaised, rep.RunID, res.TaskID, reviewer, map[string]any{"decision": rep.Decision.ID, "target": rep.Decision.Target})
	}
	if rep.Decision != nil && !c.Bool("json") {
		fmt.Fprintln(d.Stdout, rep.Decision.ID) // last line: for scripts (the JSON report holds it too)
	}
	if c.Bool("redispatch") {
		return reviewRedispatch(c, d, dir, res, rep.FollowUp(c.String("request-changes")))
	}
	return nil
}

// openSandbox opens a named backend with the operator's options; one that cannot run here is a refusal
// (sandbox-unavailable), never silently replaced by another. runID, when
// known, labels a docker backend's container. The caller releases it with
// closeSandbox when the job ends.
func (d *deps) openSandbox(c *cli.Context, name, runID string) (sandbox.Sandbox, error) {
	o := sandbox.OptionsFrom(d.config(c).SandboxLimits)
	o.Docker.RunID = runID
	sb, err := sandbox.NewWithOptions(name, o)
	if errors.Is(err, sandbox.ErrUnavailable) {
		return nil, refusal.NoSandbox("the job",
			"the %s sandbox cannot run here: %v", name, err)
	}
	return sb, err
}

// closeSandbox releases what a backend holds for its job (the docker
// backend's container); a failure is reported, not fatal: the next start
// reaps what is left.
func closeSandbox(d *deps, sb sandbox.Sandbox) {
	if err := sandbox.Close(sb); err != nil {
		fmt.Fprintf(d.Stderr, "conductor: release the sandbox: %v\n", err)
	}
}

// reviewRunDir resolves RUN: the path of a run folder, or a run id under the
// data root's runs/.
func reviewRunDir(runDir func(string) string, arg string) (runrec.Dir, error) {
	if strings.ContainsRune(arg, filepath.Separator) || arg == "." {
		if !isDir(arg) {
			return "", fmt.Errorf("review: run folder %s does not exist", arg)
		}
		abs, err := filepath.Abs(arg)
		if err != nil {
			return "", err
		}
		return runrec.Dir(abs), nil
	}
	if err := runrec.ValidRunID(arg); err != nil {
		return "", usagef("review: %v", err)
	}
	p := runDir(arg)
	if !isDir(p) {
		return "", fmt.Errorf("review: run %s (no folder %s): %w", arg, p, bus.ErrNotFound)
	}
	return runrec.Dir(p), nil
}

// reviewRedispatch continues the run's session with the findings: a new run
// of the same task (dispatch.Redispatch).
func reviewRedispatch(c *cli.Context, d *deps, dir runrec.Dir, prev runrec.Result, followUp string) error {
	opts, err := runTaskOptions(c, d)
	if err != nil {
		return err
	}
	opts.JSON, opts.Events = false, nil
	if c.Bool("progress") {
		opts.Events = d.Stderr
	}
	if s, err := d.openStore(c); err == nil {
		opts.Store = s
	}
	res, err := dispatch.Redispatch(c.Context, dispatch.RedispatchOptions{
		Run: opts, RunDir: dir, Prev: prev, FollowUp: followUp,
		RolesDir: c.String("roles"), Sandbox: d.config(c).Sandbox, Sandboxes: d.sandboxes(c),
	})
	if err != nil {
		return err
	}
	w := d.Stdout
	if c.Bool("json") {
		w = d.Stderr // stdout holds the report's JSON object only
	}
	fmt.Fprintf(w, "redispatched session %s: run %s %s (%d steps, patch-id %s)\n", res.Session, res.RunID, res.Status, res.Steps, cmp.Or(res.PatchID, "-"))
	if res.Status != runrec.StatusSucceeded {
		if res.Error != "" {
			fmt.Fprintf(d.Stderr, "conductor: run %s ended %s: %s\n", res.RunID, res.Status, res.Error)
		}
		return &silentError{code: exitError}
	}
	return nil
}

// renderReview prints a review's report: one JSON object with asJSON, else
// the report for people (header, diffstat, checks, gate, result).
func renderReview(w io.Writer, rep review.Report, asJSON bool) error {
	if asJSON {
		return writeJSON(w, rep)
	}
	fmt.Fprintf(w, "review of run %s (task %s, model %s)\n", rep.RunID, rep.TaskID, busDash(rep.Model))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  work ref\t%s\n", rep.WorkRef)
	fmt.Fprintf(tw, "  commit\t%s (parent %s, base %s)\n", rep.Commit, patch.Short(rep.Parent), patch.Short(rep.Base))
	fmt.Fprintf(tw, "  patch-id\t%s\n", rep.PatchID)
	tw.Flush()

	fmt.Fprintln(w, "\ndiffstat:")
	var added, deleted int64
	width := 0
	for _, f := range rep.Files {
		width = max(width, len(f.Path))
	}
	for _, f := range rep.Files {
		added += f.Added
		deleted += f.Deleted
		stat := fmt.Sprintf("+%d -%d", f.Added, f.Deleted)
		if f.Binary {
			stat = "binary"
		}
		fmt.Fprintf(w, "  %s %-*s  %s\n", f.Status, width, f.Path, stat)
	}
	fmt.Fprintf(w, "  %d file(s) changed, %d insertion(s), %d deletion(s)\n", len(rep.Files), added, deleted)

	fmt.Fprintln(w, "\nchecks:")
	for _, c := range rep.Checks {
		fmt.Fprintf(w, "  %-4s  %-6s  %s\n", strings.ToUpper(c.Status), c.Name, c.Summary)
		for _, f := range c.Findings {
			fmt.Fprintln(w, indentLines(f, "          "))
		}
	}
	switch {
	case rep.GateNotRun != "":
		fmt.Fprintln(w, "  SKIP  gate    "+rep.GateNotRun)
	case len(rep.Gate) == 0:
		fmt.Fprintln(w, "  SKIP  gate    no gate command in the policy")
	}
	for _, g := range rep.Gate {
		what := fmt.Sprintf("exit %d in %s", g.ExitCode, g.Duration.Round(time.Millisecond))
		if g.TimedOut {
			what = fmt.Sprintf("timed out after %s, killed", g.Duration.Round(time.Millisecond))
		}
		fmt.Fprintf(w, "  %-4s  gate    %s: %s (%s)\n", strings.ToUpper(g.Status), g.Name, strings.Join(g.Argv, " "), what)
		if !g.OK() && g.OutputTail != "" {
			fmt.Fprintln(w, "          output tail:")
			fmt.Fprintln(w, indentLines(sandbox.LastLines(g.OutputTail, 20), "          | "))
		}
	}

	fmt.Fprintln(w)
	switch {
	case rep.Verdict != nil:
		fmt.Fprintf(w, "verdict: %s (#%d) by %s on %s at %s, patch-id %s\n", rep.Verdict.Verdict, rep.Verdict.ID,
			rep.Verdict.Reviewer, rep.WorkRef, patch.Short(rep.Commit), rep.PatchID)
	case rep.Clean:
		fmt.Fprintln(w, "result: clean (no verdict recorded; use --approve or --request-changes TEXT)")
	default:
		fmt.Fprintf(w, "result: %d finding(s); nothing recorded\n", len(rep.Findings))
	}
	if rep.Decision != nil {
		fmt.Fprintf(w, "decision: %s raised (%s, target %s)\n", rep.Decision.ID, rep.Decision.Kind, rep.Decision.Target)
	}
	return nil
}

// indentLines prefixes every line of s (its trailing newlines dropped).
func indentLines(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}
