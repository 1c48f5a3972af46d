package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/termtext"
	"github.com/conductor-dev/conductor/runtask"
)

// runTaskFlags are shared by run and resume.
func runTaskFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "model", Usage: "model ALIAS from the registry, or replay:FILE (default: the task's model, else $CONDUCTOR_MODEL, else the config file's default)"},
		&cli.StringFlag{Name: "repo", Usage: "the workspace repository `DIR` (default: $WORKER_REPO_ROOT/<workspace>, else <data root>/workspaces/<workspace>)"},
		&cli.StringFlag{Name: "roles", Usage: "roles `DIR` overriding the default contracts (default: the repository's roles/ folder when it has one)"},
		&cli.StringFlag{Name: "sandbox", Usage: "sandbox backend for commands: bwrap, docker, none or auto (env WORKER_SANDBOX; default: the role's)"},
		&cli.BoolFlag{Name: "json", Usage: "print JSONL progress events on stdout, the last one holding the result"},
		&cli.BoolFlag{Name: "progress", Usage: "print a progress line per step on stderr even when it is not a terminal"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress lines, even on a terminal"},
		&cli.BoolFlag{Name: "keep-worktree", Usage: "keep the worktree after the run (it stays with the session)"},
	}
}

func newRunTaskCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "run-task",
		Usage: "dispatch a worker task: a tool loop against a model in a worktree, with a run record as receipt",
		Description: "The worker runs in its own worktree of the workspace repository, at the task's base, with the\n" +
			"tools its role allows; commands run in a sandbox with an allowlisted environment and no credentials.\n" +
			"The same session continues the same conversation in the same worktree. Every run leaves a folder\n" +
			"under <data root>/runs/ID: task.json, result.json, stderr.txt, transcript.jsonl, patch.diff.\n" +
			"Exit status 0 means the worker finished (succeeded); 1 any other outcome (printed).",
		Subcommands: []*cli.Command{
			{
				Name:      "run",
				Usage:     "run a task file",
				ArgsUsage: "TASK.json",
				UsageText: "conductor run-task run TASK.json [--model ALIAS] [--repo DIR] [--json] [--keep-worktree] [--sandbox NAME] [--follow-up TEXT] [--run-id ID]",
				Flags: append(runTaskFlags(),
					&cli.StringFlag{Name: "follow-up", Usage: "a refinement round: continue the task's finished session with this message"},
					&cli.StringFlag{Name: "run-id", Usage: "use this run `ID` (idempotent: a finished run with this id is only reported)"},
				),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usagef("run-task run takes one TASK.json, got %d arguments", c.NArg())
					}
					opts, err := runTaskOptions(c, d)
					if err != nil {
						return err
					}
					task, err := runtask.LoadTask(c.Args().First())
					if err != nil {
						return err
					}
					opts.Task, opts.TaskPath = task, c.Args().First()
					opts.FollowUp, opts.RunID = c.String("follow-up"), c.String("run-id")
					return runTask(c, d, opts, "")
				},
			},
			{
				Name:      "resume",
				Usage:     "continue an interrupted run (crash, cancellation, drift) from its session state or latest checkpoint",
				ArgsUsage: "RUN",
				UsageText: "conductor run-task resume RUN [--accept-drift] [--model ALIAS] [--json] [--keep-worktree] [--sandbox NAME]",
				Flags: append(runTaskFlags(),
					&cli.BoolFlag{Name: "accept-drift", Usage: "continue even if files changed since the checkpoint (the model is told which)"},
				),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usagef("run-task resume takes one RUN id, got %d arguments", c.NArg())
					}
					if err := runrec.ValidRunID(c.Args().First()); err != nil {
						return usagef("%v", err)
					}
					opts, err := runTaskOptions(c, d)
					if err != nil {
						return err
					}
					opts.AcceptDrift = c.Bool("accept-drift")
					return runTask(c, d, opts, c.Args().First())
				},
			},
		},
	}
}

// runTaskOptions builds the options every run shares (task excluded).
func runTaskOptions(c *cli.Context, d *deps) (runtask.Options, error) {
	cfg := d.config(c)
	reg, err := runtask.LoadRegistry(cfg.ConfigFile, d.Getenv)
	if err != nil {
		return runtask.Options{}, err
	}
	reg.SetDefault(cfg.Model)
	opts := runtask.Options{
		ModelSlots:   d.modelSlots(c),
		Config:       cfg,
		Repo:         c.String("repo"),
		ModelAlias:   c.String("model"),
		Registry:     reg,
		KeepWorktree: c.Bool("keep-worktree"),
		JSON:         c.Bool("json"),
		Getenv:       d.Getenv,
		Stderr:       d.Stderr,
		Now:          d.Now,
	}
	switch {
	case opts.JSON:
		opts.Events = d.Stdout
	case c.Bool("quiet"):
	case c.Bool("progress") || isTerminal(d.Stderr):
		opts.Events = d.Stderr
	}
	return opts, nil
}

// runTask loads the role and the sandbox, runs (or resumes) and reports.
func runTask(c *cli.Context, d *deps, opts runtask.Options, resumeID string) error {
	ctx := c.Context
	task := opts.Task
	if resumeID != "" && task.TaskVersion == 0 {
		dir := runrec.Dir(opts.Config.RunDir(resumeID))
		if !isDir(string(dir)) {
			return fmt.Errorf("resume %s: no run folder %s: %w", resumeID, dir, bus.ErrNotFound)
		}
		t, err := runtask.LoadTask(dir.Path(runrec.TaskFile))
		if err != nil {
			return fmt.Errorf("resume %s: %w", resumeID, err)
		}
		task, opts.Task = t, t
		if opts.Repo == "" {
			if prev, err := runrec.Dir(opts.Config.RunDir(resumeID)).ReadResult(); err == nil {
				opts.Repo = prev.Repo
			}
		}
	}
	if err := prepareRun(c, d, &opts); err != nil {
		return err
	}
	defer closeSandbox(d, opts.Sandbox)
	var res runrec.Result
	var err error
	if resumeID != "" {
		res, err = runtask.Resume(ctx, opts, resumeID)
	} else {
		res, err = runtask.Run(ctx, opts)
	}
	if err != nil {
		return err
	}
	if !opts.JSON {
		printRunOutcome(d.Stdout, opts.Config.RunDir(res.RunID), res)
	}
	if res.Status != runrec.StatusSucceeded {
		if res.Error != "" {
			fmt.Fprintf(d.Stderr, "conductor: run %s ended %s: %s\n", res.RunID, res.Status, res.Error)
		}
		if res.Status == runrec.StatusCancelled && ctx.Err() != nil {
			return &silentError{code: exitInterrupted}
		}
		return &silentError{code: exitError}
	}
	return nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func isTerminal(w io.Writer) bool {
	f, ok := fileOf(w)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// fileOf is the file under w and the writers wrapping it (termtext's).
func fileOf(w io.Writer) (*os.File, bool) {
	for {
		switch v := w.(type) {
		case *os.File:
			return v, true
		case interface{ Unwrap() io.Writer }:
			w = v.Unwrap()
		default:
			return nil, false
		}
	}
}

// printRunOutcome is the people's summary on stdout.
func printRunOutcome(w io.Writer, dir string, r runrec.Result) {
	tokens := "unknown"
	if r.TotalTokens != nil {
		tokens = fmt.Sprint(*r.TotalTokens)
	}
	fmt.Fprintf(w, "run %s %s: %d steps, tokens %s, %d files changed\n", r.RunID, r.Status, r.Steps, tokens, len(r.FilesChanged))
	if r.Error != "" {
		fmt.Fprintf(w, "  outcome:  %s\n", r.Error)
	}
	fmt.Fprintf(w, "  task:     %s (session %s, role %s)\n", r.TaskID, r.Session, r.Role)
	fmt.Fprintf(w, "  model:    %s (%s)\n", r.ModelAlias, r.Model)
	fmt.Fprintf(w, "  base:     %s\n", r.BaseCommit)
	if r.PatchID != "" {
		fmt.Fprintf(w, "  patch-id: %s\n", r.PatchID)
	}
	if len(r.FilesChanged) > 0 {
		names := make([]string, len(r.FilesChanged))
		for i, f := range r.FilesChanged {
			names[i] = termtext.Line(f) // a name's newline must not start a line of its own
		}
		fmt.Fprintf(w, "  files:    %s\n", strings.Join(names, ", "))
	}
	if r.Worktree != "" {
		fmt.Fprintf(w, "  worktree: %s (kept)\n", r.Worktree)
	}
	fmt.Fprintf(w, "  record:   %s\n", dir)
}
