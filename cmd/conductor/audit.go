package main

import (
	"cmp"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/land"
	"github.com/conductor-dev/conductor/patch/git"
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
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("audit takes one COMMIT, got %d arguments", c.NArg())
			}
			dir := c.String("repo")
			if dir == "" {
				dir, _ = os.Getwd()
			}
			g, err := git.OpenRepo(dir)
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
			if err := renderAudit(d.Stdout, c.Bool("json"), rep); err != nil {
				return err
			}
			if rf := rep.Refusal(); rf != nil {
				return rf
			}
			return nil
		},
	}
}

// renderAudit prints an audit report for people, or as one JSON object.
func renderAudit(w io.Writer, asJSON bool, r land.AuditReport) error {
	if asJSON {
		return writeJSON(w, r)
	}
	orNone := func(s string) string { return cmp.Or(s, "(empty diff)") }
	status := "ok"
	if !r.OK {
		status = "MISMATCH"
	}
	if _, err := fmt.Fprintf(w, "audit %s: %s\n  patch-id %s (re-derived)\n", r.Commit, status, orNone(r.PatchID)); err != nil {
		return err
	}
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		line := fmt.Sprintf("  %s %s", mark, c.Name)
		if !c.OK && (c.Want != "" || c.Got != "") {
			line += fmt.Sprintf(": want %s, got %s", orNone(c.Want), orNone(c.Got))
		}
		if c.Detail != "" {
			line += " (" + c.Detail + ")"
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}
