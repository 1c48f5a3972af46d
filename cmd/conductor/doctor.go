package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// PLACEHOLDER: replaced by the owning issue's implementation.
func newDoctorCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "doctor",
		Usage:  "report which sandbox backends work on this machine",
		Action: func(c *cli.Context) error { return errors.New("doctor: not built yet") },
	}
}
