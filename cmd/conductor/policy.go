package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// PLACEHOLDER: replaced by the owning issue's implementation.
func newPolicyCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "policy",
		Usage:  "check and show role contracts",
		Action: func(c *cli.Context) error { return errors.New("policy: not built yet") },
	}
}
