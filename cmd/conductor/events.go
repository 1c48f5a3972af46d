package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/termtext"
)

func newEventsCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "events",
		Usage: "the lifecycle events in the store: started, checkpoint, note_delivered, role_complete, reviewed, decisions, landed, pr_opened, claims",
		Description: "Every step of the flow appends an event to the store (embedded or PostgreSQL), so\n" +
			"--follow in one process shows what workers, reviews and landings in others do, as they do it.",
		UsageText: "conductor events [--run RUN] [--task ID] [--limit N] [--follow [--until KIND]] [--json]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "run", Usage: "only this run's events"},
			&cli.StringFlag{Name: "task", Usage: "only this task's events"},
			&cli.IntFlag{Name: "limit", Usage: "at most N events (0: all)"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new events until interrupted"},
			&cli.StringFlag{Name: "until", Usage: "with --follow: stop after printing an event of this `KIND` (e.g. wait for a run's role_complete)"},
			&cli.DurationFlag{Name: "poll", Value: 500 * time.Millisecond, Usage: "with --follow: how often the store is asked"},
			&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("events takes no arguments (got %q)", c.Args().Slice())
			}
			if c.Int("limit") < 0 || c.Duration("poll") <= 0 {
				return usagef("--limit must not be negative and --poll must be positive")
			}
			s, err := d.openStore(c)
			if err != nil {
				return err
			}
			a, err := bus.Agents(s)
			if err != nil {
				return err
			}
			f := bus.EventFilter{RunID: c.String("run"), TaskID: c.String("task"), Limit: c.Int("limit")}
			for {
				evs, err := a.ListEvents(c.Context, f)
				if err != nil {
					if c.Context.Err() != nil {
						return nil
					}
					return err
				}
				for _, e := range evs {
					if err := printEvent(d, e, c.Bool("json")); err != nil {
						return err
					}
					f.AfterID = e.ID
					if c.Bool("follow") && e.Kind == c.String("until") {
						return nil
					}
				}
				if !c.Bool("follow") {
					return nil
				}
				f.Limit = 0
				select {
				case <-c.Context.Done():
					return nil
				case <-time.After(c.Duration("poll")):
				}
			}
		},
	}
}

func printEvent(d *deps, e bus.Event, asJSON bool) error {
	if asJSON {
		return writeJSONLine(d.Stdout, e)
	}
	md := ""
	if len(e.Metadata) > 0 && string(e.Metadata) != "null" {
		md = "  " + string(e.Metadata)
	}
	_, err := fmt.Fprintf(d.Stdout, "%s  %-17s %-30s %-20s %s%s\n", e.CreatedAt.UTC().Format("2006-01-02 15:04:05"),
		e.Kind, busDash(e.RunID), busDash(e.TaskID), busDash(e.Actor), termtext.Line(md))
	return err
}
