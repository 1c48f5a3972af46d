package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/patch/git"
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
				Flags:     []cli.Flag{repoFlag, baseFlag, &cli.BoolFlag{Name: "json", Usage: "print one JSON object"}},
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usagef("pool status takes no arguments")
					}
					pools, err := openPools(c, d)
					if err != nil {
						return err
					}
					return poolStatus(c, d, pools)
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
					pools, err := openPools(c, d)
					if err != nil {
						return err
					}
					n := 0
					for _, p := range pools {
						removed, err := p.Prune(c.Context, c.Bool("all"), c.Bool("orphans"))
						for _, s := range removed {
							fmt.Fprintf(d.Stdout, "removed %s\n", s)
						}
						n += len(removed)
						if err != nil {
							return fmt.Errorf("pool %s: %w", p.Dir, err)
						}
					}
					fmt.Fprintf(d.Stderr, "pruned %d worktrees\n", n)
					if c.Bool("orphans") {
						names, err := reapDockerOrphans(c.Context, sandbox.OptionsFrom(d.config(c).SandboxLimits))
						for _, name := range names {
							fmt.Fprintf(d.Stdout, "removed container %s\n", name)
						}
						if err != nil && !errors.Is(err, errNoDocker) {
							// No engine here, or it is down: nothing to
							// reap now (the next start does it).
							fmt.Fprintf(d.Stderr, "conductor: sandbox containers not checked: %v\n", err)
						}
					}
					return nil
				},
			},
		},
	}
}

func openPools(c *cli.Context, d *deps) ([]*runtask.Pool, error) {
	cfg := d.config(c)
	if repo := c.String("repo"); repo != "" {
		g, err := git.OpenRepo(repo)
		if err != nil {
			return nil, err
		}
		return []*runtask.Pool{runtask.NewPool(cfg.WorktreeBase, g, cfg)}, nil
	}
	return runtask.OpenPools(cfg.WorktreeBase, cfg)
}

func poolStatus(c *cli.Context, d *deps, pools []*runtask.Pool) error {
	type poolOut struct {
		Dir   string               `json:"dir"`
		Repo  string               `json:"repo"`
		Slots []runtask.SlotStatus `json:"slots"`
	}
	var out []poolOut
	for _, p := range pools {
		st, err := p.Status(c.Context)
		if err != nil {
			return fmt.Errorf("pool %s: %w", p.Dir, err)
		}
		if st == nil {
			st = []runtask.SlotStatus{}
		}
		out = append(out, poolOut{Dir: p.Dir, Repo: p.Repo.GitDir, Slots: st})
	}
	if c.Bool("json") {
		if out == nil {
			out = []poolOut{}
		}
		return writeJSON(d.Stdout, map[string]any{"pools": out})
	}
	if len(out) == 0 {
		fmt.Fprintln(d.Stdout, "no pooled worktrees")
		return nil
	}
	tw := tabwriter.NewWriter(d.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SLOT\tSTATE\tOWNER\tBASE\tLAST USED\tMB\tREPO")
	for _, p := range out {
		for _, s := range p.Slots {
			state := s.State
			switch {
			case !s.Exists:
				state = "broken"
			case s.InUse:
				state = "in use"
			case s.State == runtask.SlotBusy:
				state = "kept"
			}
			base := s.Base
			if len(base) > 12 {
				base = base[:12]
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.1f\t%s\n", s.Slot, state, cmp.Or(s.Owner, "-"), base,
				s.LastUsed.UTC().Format(time.RFC3339), float64(s.Bytes)/(1<<20), p.Repo)
		}
	}
	return tw.Flush()
}

// errNoDocker: no docker CLI here, so no sandbox container to reap.
var errNoDocker = errors.New("no docker CLI")

// reapDockerOrphans removes the docker sandbox containers of conductor
// processes that are gone (sandbox.ReapDockerOrphans); errNoDocker when
// the docker CLI is not installed. An engine that does not answer is an
// error.
func reapDockerOrphans(ctx context.Context, o sandbox.Options) ([]string, error) {
	if _, err := exec.LookPath(cmp.Or(o.Docker.CLI, "docker")); err != nil {
		return nil, errNoDocker
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return sandbox.ReapDockerOrphans(ctx, o)
}
