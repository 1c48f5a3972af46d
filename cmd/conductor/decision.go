package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// PLACEHOLDER: replaced by the owning issue's implementation.
func newDecisionCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "decision",
		Usage:  "raise, resolve and show decisions",
		Action: func(c *cli.Context) error { return errors.New("decision: not built yet") },
	}
}
