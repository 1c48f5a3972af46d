package main

import (
	"cmp"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/runtask"
)

func newPoolCmd(d *deps) *cli.Command {
	repoFlag := &cli.StringFlag{Name: "repo", Usage: "only the pool of this repository `DIR` (default: every pool under the worktree base)"}
	baseFlag := &cli.StringFlag{Name: "worktree-base", Usage: "worktree base `DIR` (default: $WORKER_WORKTREE_BASE, else <data root>/worktrees)"}
	return &cli.Command{
		Name:  "pool",
		Usage: "the warm worktree pool: finished workers' worktrees, reset and kept for the next task",
		Description: "Bounds: WORKER_POOL_SIZE free worktrees per repository (default 4) and WORKER_POOL_MAX_BYTES\n" +
			"of disk (default unbounded); the least recently used are evicted first.",
		Subcommands: []*cli.Command{
			{
				Name:      "status",
				Usage:     "list pooled worktrees: free, busy (a running worker) or kept for a session",
				UsageText: "conductor pool status [--repo DIR] [--json]",
				Flags:     []cli.Flag{repoFlag, baseFlag, jsonFlag()},
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usagef("pool status takes no arguments")
					}
					pools, err := runtask.PoolStatus(c.Context, poolsOptions(c, d))
					if err != nil {
						return err
					}
					return renderPoolStatus(d.Stdout, pools, c.Bool("json"))
				},
			},
			{
				Name:      "prune",
				Usage:     "discard pooled worktrees: beyond the bounds and broken ones; --all every free one",
				UsageText: "conductor pool prune [--repo DIR] [--all] [--orphans]",
				Flags: []cli.Flag{repoFlag, baseFlag,
					&cli.BoolFlag{Name: "all", Usage: "discard every free worktree"},
					&cli.BoolFlag{Name: "orphans", Usage: "also discard worktrees kept for sessions whose process is gone (their work is lost unless extracted), and the docker sandbox containers of conductor processes that are gone"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usagef("pool prune takes no arguments")
					}
					rep, err := runtask.PrunePools(c.Context, runtask.PruneOptions{PoolsOptions: poolsOptions(c, d),
						All: c.Bool("all"), Orphans: c.Bool("orphans")})
					renderPrune(d, rep, err == nil)
					return err
				},
			},
		},
	}
}

func poolsOptions(c *cli.Context, d *deps) runtask.PoolsOptions {
	return runtask.PoolsOptions{Config: d.config(c), Repo: c.String("repo")}
}

// renderPrune prints what a prune removed (the summary only when it
// finished).
func renderPrune(d *deps, rep runtask.PruneReport, finished bool) {
	for _, s := range rep.Slots {
		fmt.Fprintf(d.Stdout, "removed %s\n", s)
	}
	if !finished {
		return
	}
	fmt.Fprintf(d.Stderr, "pruned %d worktrees\n", len(rep.Slots))
	for _, name := range rep.Containers {
		fmt.Fprintf(d.Stdout, "removed container %s\n", name)
	}
	if rep.ContainersNotChecked != nil {
		fmt.Fprintf(d.Stderr, "conductor: sandbox containers not checked: %v\n", rep.ContainersNotChecked)
	}
}

func renderPoolStatus(w io.Writer, pools []runtask.PoolReport, asJSON bool) error {
	if asJSON {
		return writeJSON(w, map[string]any{"pools": pools})
	}
	if len(pools) == 0 {
		fmt.Fprintln(w, "no pooled worktrees")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SLOT\tSTATE\tOWNER\tBASE\tLAST USED\tMB\tREPO")
	for _, p := range pools {
		for _, s := range p.Slots {
			state := s.Shown()
			if state == runtask.SlotBusy {
				state = "kept" // for a session: no live process holds it
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.1f\t%s\n", s.Slot, state, cmp.Or(s.Owner, "-"), patch.Short(s.Base),
				s.LastUsed.UTC().Format(time.RFC3339), float64(s.Bytes)/(1<<20), p.Repo)
		}
	}
	return tw.Flush()
}
