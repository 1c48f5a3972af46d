package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// PLACEHOLDER: replaced by the owning issue's implementation.
func newPRCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "pr",
		Usage:  "open draft pull requests on the forge",
		Action: func(c *cli.Context) error { return errors.New("pr: not built yet") },
	}
}
