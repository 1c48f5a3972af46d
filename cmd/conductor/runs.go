package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// PLACEHOLDER: replaced by the owning issue's implementation.
func newRunsCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "runs",
		Usage:  "list and show runs",
		Action: func(c *cli.Context) error { return errors.New("runs: not built yet") },
	}
}
