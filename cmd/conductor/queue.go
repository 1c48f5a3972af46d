package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/queue"
)

func newQueueCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "queue",
		Usage: "inspect the job queue (Redis with REDIS_URL, else the embedded store)",
		Subcommands: []*cli.Command{{
			Name:  "dead",
			Usage: "list, retry or drop dead-lettered jobs",
			Description: "A job is dead-lettered when it can never run as it is (not JSON, an unknown\n" +
				"role or model, a missing repository: on its first attempt) or after\n" +
				"--max-attempts failed attempts; its backlog claim is released (recorded\n" +
				"failed with the reason). Fix the cause, then retry it. ID is the job's\n" +
				"payload id (from list) or its run id.",
			Subcommands: []*cli.Command{
				{
					Name: "list", Usage: "list dead letters, oldest first",
					UsageText: "conductor queue dead list [--json]",
					Flags:     append(queueFlags(), jsonFlag()),
					Action: func(c *cli.Context) error {
						if c.NArg() != 0 {
							return usagef("queue dead list takes no arguments (got %q)", c.Args().Slice())
						}
						return queueDead(c, d, "list", "")
					},
				},
				{
					Name: "retry", Usage: "return a dead letter to the queue, its attempts reset",
					UsageText: "conductor queue dead retry ID", ArgsUsage: "ID", Flags: queueFlags(),
					Action: func(c *cli.Context) error {
						if c.NArg() != 1 {
							return usagef("queue dead retry takes one ID (got %d arguments)", c.NArg())
						}
						return queueDead(c, d, "retry", c.Args().First())
					},
				},
				{
					Name: "drop", Usage: "delete a dead letter for good",
					UsageText: "conductor queue dead drop ID", ArgsUsage: "ID", Flags: queueFlags(),
					Action: func(c *cli.Context) error {
						if c.NArg() != 1 {
							return usagef("queue dead drop takes one ID (got %d arguments)", c.NArg())
						}
						return queueDead(c, d, "drop", c.Args().First())
					},
				},
			},
		}},
	}
}

func queueDead(c *cli.Context, d *deps, op, id string) error {
	q, err := d.openQueue(c, "")
	if err != nil {
		return fmt.Errorf("queue dead %s: %w", op, err)
	}
	defer q.Close()
	dq, ok := q.(queue.DeadLetters)
	if !ok {
		return fmt.Errorf("queue dead %s: %s keeps no dead letters", op, q.Name())
	}
	switch op {
	case "retry", "drop":
		f := dq.RetryDead
		if op == "drop" {
			f = dq.DropDead
		}
		if err := f(c.Context, strings.TrimSpace(id)); err != nil {
			return fmt.Errorf("queue dead %s: %w", op, err)
		}
		past := map[string]string{"retry": "requeued", "drop": "dropped"}[op]
		fmt.Fprintf(d.Stderr, "%s dead letter %s on %s\n", past, id, q.Name())
		return nil
	}
	dls, err := dq.DeadLetters(c.Context)
	if err != nil {
		return fmt.Errorf("queue dead list: %w", err)
	}
	if c.Bool("json") {
		return writeJSON(d.Stdout, map[string]any{"queue": q.Name(), "deadLetters": dls})
	}
	if len(dls) == 0 {
		fmt.Fprintf(d.Stderr, "no dead letters on %s\n", q.Name())
		return nil
	}
	tw := tabwriter.NewWriter(d.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRUN\tATTEMPTS\tAT\tERROR")
	for _, dl := range dls {
		run := "-"
		if j, err := queue.ParseJob(dl.Raw()); err == nil {
			run = j.RunID
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", dl.ID, run, dl.Attempts, dl.At.UTC().Format(time.RFC3339), oneLine(dl.Error))
	}
	return tw.Flush()
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
