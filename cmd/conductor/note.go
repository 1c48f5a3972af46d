package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/runrec"
)

func newNoteCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "note",
		Usage:     "leave an operator note for a running session (delivered at its next turn)",
		ArgsUsage: "RUN TEXT...",
		Description: "The note is stored in the bus store; the running session gives it to the\n" +
			"model as a user message at the next turn boundary and records the step.\n" +
			"Notes survive a crash and are delivered after resume. A note to a finished\n" +
			"run is an error.",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print the stored note as JSON"}},
		Action: func(c *cli.Context) error {
			if c.NArg() < 2 {
				return usagef("note: want RUN and TEXT")
			}
			runID := c.Args().First()
			text := strings.TrimSpace(strings.Join(c.Args().Slice()[1:], " "))
			if text == "" {
				return usagef("note: the text is empty")
			}
			st, err := d.openStore(c)
			if err != nil {
				return fmt.Errorf("note: %w", err)
			}
			run, err := st.GetRun(c.Context, runID)
			if errors.Is(err, bus.ErrNotFound) {
				return fmt.Errorf("note: %w", err)
			}
			if err != nil {
				return fmt.Errorf("note: %w", err)
			}
			if run.Status != runrec.StatusRunning {
				return fmt.Errorf("note: run %s is %s: a note would never be delivered", runID, run.Status)
			}
			n, err := st.AddNote(c.Context, bus.Note{RunID: runID, Text: text, CreatedAt: d.Now()})
			if err != nil {
				return fmt.Errorf("note: %w", err)
			}
			if c.Bool("json") {
				return writeJSON(d.Stdout, n)
			}
			fmt.Fprintln(d.Stdout, n.ID)
			return nil
		},
	}
}
