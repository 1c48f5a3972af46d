package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/land"
	"github.com/conductor-dev/conductor/patch"
)

func newAuditCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "audit",
		Usage:     "verify a landed commit's receipt",
		ArgsUsage: "COMMIT",
		UsageText: "conductor audit COMMIT [--repo DIR] [--json]",
		Description: "Re-derives the binding patch-id of COMMIT from its first-parent diff (the canonical diff of\n" +
			"package patch) and checks it against the commit's trailers (Patch-Id, Decision-Id, Reviewed-Commit,\n" +
			"Run-Id, Model), its receipt note on refs/notes/conductor and the bus store's landing, decision and\n" +
			"verdict. Exit 0 when everything matches, 3 (audit-mismatch) listing what does not.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "repo", Usage: "repository `DIR` (default: the current directory)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("audit takes one COMMIT, got %d arguments", c.NArg())
			}
			dir := c.String("repo")
			if dir == "" {
				dir, _ = os.Getwd()
			}
			g, err := patch.OpenRepo(dir)
			if err != nil {
				return err
			}
			store, err := d.openStore(c)
			if err != nil {
				return err
			}
			rep, err := land.Audit(c.Context, land.AuditOptions{Git: g, Store: store, Commit: c.Args().First()})
			if err != nil {
				return err
			}
			if err := rep.Print(d.Stdout, c.Bool("json")); err != nil {
				return err
			}
			if rf := rep.Refusal(); rf != nil {
				return rf
			}
			return nil
		},
	}
}
