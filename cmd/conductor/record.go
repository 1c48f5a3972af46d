package main

import (
	"cmp"
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/record"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
	"github.com/conductor-dev/conductor/policy"
)

func newRecordCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "record",
		Usage:     "the Record step: append a landing to the build log, update CURRENT.md's status, close the issue",
		ArgsUsage: "DECISION|COMMIT",
		UsageText: "conductor record DECISION [--json] [--issue N | --no-issue] [--roles DIR]\n" +
			"conductor record COMMIT [--repo DIR] ...   (a landed commit: its Decision-Id trailer names the decision)",
		Description: "Records a landing the bus store knows: a decision with a landing row, or the commit it\n" +
			"landed as. One line goes to the build log (BUILD-LOG.md) and the status section of the status file\n" +
			"(CURRENT.md, between <!-- conductor:status:start --> and <!-- conductor:status:end -->; the rest of\n" +
			"the file is left alone) is rewritten. The landing policy of the target (landing.record in\n" +
			"roles/conductor-policy.json) says where: mode \"files\" (the default) keeps both files outside the\n" +
			"repository, under <data root>/records/<repository>/; mode \"commit\" makes one local commit on the\n" +
			"target changing those two files only (target allowed, paths not forbidden, a checked-out target\n" +
			"moved along, compare-and-swap), never pushed. Then the forge issue the decision names (or --issue N)\n" +
			"gets a comment with the landed commit and is closed (GITEA_URL/GITEA_TOKEN). Recording a landing\n" +
			"again writes nothing and exits 0. A refusal (exit 3) writes nothing and calls no forge; a forge\n" +
			"failure after the files are written exits 1 and says so. `conductor land --record` runs this after\n" +
			"landing.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "repo", Usage: "repository `DIR` a COMMIT is looked up in (default: the current folder)"},
			&cli.Int64Flag{Name: "issue", Usage: "close forge issue `N` (default: the decision's issue, if any)"},
			&cli.BoolFlag{Name: "no-issue", Usage: "close no issue"},
			&cli.StringFlag{Name: "roles", Usage: "roles `DIR` overriding the default contracts (default: the target's committed roles/ folder)"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			switch {
			case c.NArg() != 1:
				return usagef("record takes one DECISION or COMMIT, got %d arguments", c.NArg())
			case c.IsSet("issue") && c.Bool("no-issue"):
				return usagef("--issue and --no-issue exclude each other")
			case c.IsSet("issue") && c.Int64("issue") <= 0:
				return usagef("--issue N needs an issue number (a positive integer), got %d", c.Int64("issue"))
			}
			issue := c.Int64("issue")
			if c.Bool("no-issue") {
				issue = -1
			}
			return recordAction(c, d, c.Args().First(), issue)
		},
	}
}

// recordAction runs the Record step for ref (a decision id or a commit).
// issue: 0 the decision's, -1 none, else that issue.
func recordAction(c *cli.Context, d *deps, ref string, issue int64) error {
	ctx := c.Context
	store, err := d.openStore(c)
	if err != nil {
		return err
	}
	// A COMMIT is looked up in --repo, else the current folder's
	// repository (a decision names its own).
	repo := ""
	if g, err := git.OpenRepo(cmp.Or(c.String("repo"), ".")); err == nil {
		repo = g.GitDir
	} else if c.String("repo") != "" {
		return usagef("record: --repo %s: %v", c.String("repo"), err)
	}
	roles := c.String("roles") // land --record: land's own --roles
	res, err := record.Run(ctx, record.Options{
		Store: store,
		Ref:   ref,
		Repo:  repo,
		Rules: func(ctx context.Context, repo, target string) (*policy.Landing, error) {
			pol, err := enforcedPolicy(ctx, roles, repo, "refs/heads/"+target)
			if err != nil {
				return nil, err
			}
			return pol.Landing(), nil
		},
		DataRoot: d.config(c).DataRoot,
		Issue:    issue,
		Forge: func(repo string) (record.Forge, error) {
			return d.openForge(c, patch.Git{GitDir: repo})
		},
		Committer: func(repo string) record.Identity {
			id := landCommitter(ctx, d, d.config(c), repo)
			return record.Identity{Name: id.Name, Email: id.Email}
		},
		Now: d.Now,
	})
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return writeJSON(d.Stdout, res)
	}
	e := res.Entry
	switch {
	case res.Already:
		fmt.Fprintf(d.Stdout, "%s is already recorded in %s; nothing written\n", e.Decision, res.BuildLog)
	case res.Commit != "":
		fmt.Fprintf(d.Stdout, "recorded %s as %s on %s (%s, %s)\n", e.Decision, res.Commit, e.Target, res.BuildLog, res.Current)
	default:
		fmt.Fprintf(d.Stdout, "recorded %s in %s and %s\n", e.Decision, res.BuildLog, res.Current)
	}
	switch {
	case res.IssueClosed:
		fmt.Fprintf(d.Stderr, "closed issue #%d (landed as %s on %s)\n", e.Issue, e.Commit, e.Target)
	case res.IssueWasClosed:
		fmt.Fprintf(d.Stderr, "issue #%d was already closed\n", e.Issue)
	}
	return nil
}
