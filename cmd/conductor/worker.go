package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// PLACEHOLDER: replaced by the owning issue's implementation.
func newWorkerCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "worker",
		Usage:  "consume jobs from the queue and run them",
		Action: func(c *cli.Context) error { return errors.New("worker: not built yet") },
	}
}
