package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// PLACEHOLDER: replaced by the owning issue's implementation.
func newLandCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "land",
		Usage:  "land a resolved merge decision as one gated local commit",
		Action: func(c *cli.Context) error { return errors.New("land: not built yet") },
	}
}
