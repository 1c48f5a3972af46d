package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// PLACEHOLDER: replaced by the owning issue's implementation.
func newPushCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "push",
		Usage:  "push a branch to the forge",
		Action: func(c *cli.Context) error { return errors.New("push: not built yet") },
	}
}
