package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// PLACEHOLDER: replaced by the owning issue's implementation.
func newPatchIDCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "patch-id",
		Usage:  "compute git-compatible patch-ids of diffs read from stdin",
		Action: func(c *cli.Context) error { return errors.New("patch-id: not built yet") },
	}
}
