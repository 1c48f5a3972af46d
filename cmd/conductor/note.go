package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// PLACEHOLDER: replaced by the owning issue's implementation.
func newNoteCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "note",
		Usage:  "leave an operator note for a running session",
		Action: func(c *cli.Context) error { return errors.New("note: not built yet") },
	}
}
