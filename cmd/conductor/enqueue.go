package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// PLACEHOLDER: replaced by the owning issue's implementation.
func newEnqueueCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "enqueue",
		Usage:  "push a task onto the job queue",
		Action: func(c *cli.Context) error { return errors.New("enqueue: not built yet") },
	}
}
