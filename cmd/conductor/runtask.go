package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// PLACEHOLDER: replaced by the owning issue's implementation.
func newRunTaskCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "run-task",
		Usage:  "dispatch a worker task",
		Action: func(c *cli.Context) error { return errors.New("run-task: not built yet") },
	}
}
