package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// PLACEHOLDER: replaced by the owning issue's implementation.
func newExtractCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "extract",
		Usage:  "print one canonical diff of a worktree against a base, and its patch-id",
		Action: func(c *cli.Context) error { return errors.New("extract: not built yet") },
	}
}
