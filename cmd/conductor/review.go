package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// PLACEHOLDER: replaced by the owning issue's implementation.
func newReviewCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "review",
		Usage:  "review a run: policy checks, gate, verdict",
		Action: func(c *cli.Context) error { return errors.New("review: not built yet") },
	}
}
