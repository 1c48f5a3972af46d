package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// PLACEHOLDER: replaced by the owning issue's implementation.
func newAuditCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "audit",
		Usage:  "verify a landed commit's receipt",
		Action: func(c *cli.Context) error { return errors.New("audit: not built yet") },
	}
}
