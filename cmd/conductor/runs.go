package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/runtask"
)

func newRunsCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "runs",
		Usage: "list and show runs",
		Description: "Runs are read from the bus store and from the run folders under the data root\n" +
			"(runs/ID/result.json); a run known to either is listed.",
		Subcommands: []*cli.Command{
			newRunsListCmd(d),
			newRunsShowCmd(d),
			newRunsReconcileCmd(d),
		},
	}
}

type runsListOptions struct {
	filter bus.RunFilter
	json   bool
}

// runStatuses are the statuses a run can have (runrec's, and a drifted
// resume's).
var runStatuses = []string{runrec.StatusRunning, runrec.StatusSucceeded, runrec.StatusFailed, runrec.StatusTimeout,
	runrec.StatusBudget, runrec.StatusStuck, runrec.StatusCancelled, runtask.StatusDrift}

func newRunsListCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "list",
		Usage:     "list runs, newest first",
		UsageText: "conductor runs list [--task ID] [--session NAME] [--status STATUS] [--limit N] [--json]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "task", Usage: "only runs of this task id"},
			&cli.StringFlag{Name: "session", Usage: "only runs of this session"},
			&cli.StringFlag{Name: "status", Usage: "only runs with this status (running, succeeded, failed, timeout, budget, stuck, cancelled, drift)"},
			&cli.IntFlag{Name: "limit", Usage: "at most N runs (0: all)"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("runs list takes no arguments (got %q)", c.Args().Slice())
			}
			if c.Int("limit") < 0 {
				return usagef("--limit %d: must not be negative", c.Int("limit"))
			}
			if st := c.String("status"); st != "" && !slices.Contains(runStatuses, st) {
				return usagef("--status %q: want one of %s", st, strings.Join(runStatuses, ", "))
			}
			return runsList(c, d, runsListOptions{
				filter: bus.RunFilter{TaskID: c.String("task"), Session: c.String("session"),
					Status: c.String("status"), Limit: c.Int("limit")},
				json: c.Bool("json"),
			})
		},
	}
}

func runsList(c *cli.Context, d *deps, o runsListOptions) error {
	s, err := d.openStore(c)
	if err != nil {
		return err
	}
	runs, err := bus.ListRunSummaries(c.Context, s, d.config(c).RunsDir(), o.filter)
	if err != nil {
		return err
	}
	if o.json {
		if runs == nil {
			runs = []bus.RunSummary{}
		}
		return writeJSON(d.Stdout, map[string]any{"runs": runs})
	}
	if len(runs) == 0 {
		fmt.Fprintln(d.Stderr, "no runs")
		return nil
	}
	tw := tabwriter.NewWriter(d.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tTASK\tSESSION\tMODEL\tSTEPS\tTOKENS\tSTARTED\tSOURCE")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, busDash(r.Status), busDash(r.TaskID),
			busDash(r.Session), busDash(r.ModelAlias), r.Steps, runsTokens(r.TotalTokens), runsStarted(r.StartedAt), r.Source)
	}
	return tw.Flush()
}

func runsTokens(n *int64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatInt(*n, 10)
}

func runsStarted(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04")
}

func newRunsShowCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "show one run: the store row, result.json and the run folder",
		UsageText: "conductor runs show ID [--json] | --transcript [--follow] [--lines N]",
		Flags: []cli.Flag{
			jsonFlag(),
			&cli.BoolFlag{Name: "transcript", Usage: "print the run's transcript for a person: turns, tool calls, results folded, usage"},
			&cli.BoolFlag{Name: "follow", Usage: "with --transcript: keep printing a live run's transcript until it ends"},
			&cli.IntFlag{Name: "lines", Value: 3, Usage: "with --transcript: lines of each message or result shown before the rest is folded (-1: all)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("runs show takes one run id (got %d arguments)", c.NArg())
			}
			id := strings.TrimSpace(c.Args().First())
			if err := runrec.ValidRunID(id); err != nil {
				return usageErr(err)
			}
			if c.Bool("follow") && !c.Bool("transcript") {
				return usagef("--follow goes with --transcript")
			}
			if c.Bool("transcript") {
				if c.Bool("json") {
					return usagef("--transcript prints for people; the transcript itself is JSON lines: runs/%s/transcript.jsonl", id)
				}
				dir := runrec.Dir(d.config(c).RunDir(id))
				if !isDir(string(dir)) {
					return fmt.Errorf("run %s (no folder %s): %w", id, dir, bus.ErrNotFound)
				}
				return runtask.RenderTranscript(c.Context, d.Stdout, dir, runtask.RenderOptions{Lines: c.Int("lines"), Follow: c.Bool("follow")})
			}
			return runsShow(c, d, id, c.Bool("json"))
		},
	}
}

func runsShow(c *cli.Context, d *deps, id string, asJSON bool) error {
	s, err := d.openStore(c)
	if err != nil {
		return err
	}
	v, err := bus.ShowRun(c.Context, s, d.config(c).RunsDir(), id)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(d.Stdout, v)
	}
	tw, row := kvTable(d.Stdout)
	row("id", v.ID)
	row("status", busDash(v.Status))
	row("task", v.TaskID)
	row("session", v.Session)
	row("role", v.Role)
	model := v.ModelAlias
	if v.Model != "" && v.Model != v.ModelAlias {
		model = strings.TrimSpace(v.ModelAlias + " (" + v.Model + ")")
	}
	row("model", model)
	row("harness", v.HarnessAlias)
	row("steps", strconv.Itoa(v.Steps))
	row("tokens", fmt.Sprintf("%s total (%s prompt, %s completion)",
		runsTokens(v.TotalTokens), runsTokens(v.PromptTokens), runsTokens(v.CompletionTokens)))
	row("base", v.BaseCommit)
	row("branch", v.Branch)
	row("patch-id", v.PatchID)
	if !v.StartedAt.IsZero() {
		row("started", v.StartedAt.UTC().Format(time.RFC3339))
	}
	if !v.FinishedAt.IsZero() {
		row("finished", fmt.Sprintf("%s (%s)", v.FinishedAt.UTC().Format(time.RFC3339),
			v.FinishedAt.Sub(v.StartedAt).Round(time.Second)))
	}
	row("outcome", v.Outcome)
	switch {
	case v.Store != nil && v.Folder != "":
		row("known to", "store and run folder")
	case v.Store != nil:
		row("known to", "store only (no run folder)")
	default:
		row("known to", "run folder only (not in the store)")
	}
	row("folder", v.Folder)
	if v.Folder != "" && v.Result == nil && v.ResultError == "" {
		row("result", "no result.json yet")
	}
	row("result error", v.ResultError)
	if len(v.Files) > 0 {
		var files []string
		for _, f := range v.Files {
			files = append(files, fmt.Sprintf("%s (%d B)", f.Name, f.Size))
		}
		row("files", strings.Join(files, ", "))
	}
	if v.TranscriptLines > 0 {
		row("transcript", fmt.Sprintf("%d lines", v.TranscriptLines))
	}
	if cp := v.Checkpoint; cp != nil {
		row("checkpoints", fmt.Sprintf("%d, the last at step %d (%d files touched) at %s", v.Checkpoints, cp.Step, cp.Files, cp.CreatedAt.UTC().Format(time.RFC3339)))
		var where []string
		if cp.Workspace != "" {
			where = append(where, "workspace "+cp.Workspace)
		}
		if cp.Branch != "" {
			where = append(where, "branch "+strings.TrimPrefix(cp.Branch, "refs/heads/"))
		}
		row("checkpoint in", strings.Join(where, ", "))
	}
	if v.PendingNotes > 0 {
		row("notes", fmt.Sprintf("%d pending (not yet delivered)", v.PendingNotes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if v.StderrTail != "" {
		fmt.Fprintf(d.Stdout, "\nstderr (last lines):\n%s\n", v.StderrTail)
	}
	return nil
}

func newRunsReconcileCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "reconcile",
		Usage:     "repair the store from the run folders: runs it shows running whose folder says they ended",
		UsageText: "conductor runs reconcile [--json]",
		Description: "The run folder is the source of truth. A run the store still shows running\n" +
			"(the store was down when it ended, or an older conductor) is recorded as its\n" +
			"result.json says, and its open backlog claim is completed. Idempotent; the\n" +
			"worker does it at start.",
		Flags: []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("runs reconcile takes no arguments (got %q)", c.Args().Slice())
			}
			s, err := d.openStore(c)
			if err != nil {
				return err
			}
			reps, err := bus.Reconcile(c.Context, s, d.config(c).RunsDir())
			if c.Bool("json") {
				if reps == nil {
					reps = []bus.Repair{}
				}
				if jerr := writeJSON(d.Stdout, map[string]any{"repaired": reps}); jerr != nil {
					return jerr
				}
				return err
			}
			for _, r := range reps {
				claim := ""
				if r.Claim != "" {
					claim = " (claim of " + r.Claim + " completed)"
				}
				fmt.Fprintf(d.Stdout, "%s\t%s%s\n", r.RunID, r.Status, claim)
			}
			if err == nil {
				fmt.Fprintf(d.Stderr, "%d runs repaired\n", len(reps))
			}
			return err
		},
	}
}
