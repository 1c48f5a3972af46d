package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/land"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/runtask"
)

func newLandCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "land",
		Usage:     "land a resolved merge decision as one gated local commit",
		ArgsUsage: "DECISION",
		UsageText: "conductor land DECISION [--dry-run] [--json] [--roles DIR] [--worktree]",
		Description: "Reads the decision, its raise and the latest verdict from the bus store and checks, each\n" +
			"refusing with a named code (exit 3, nothing changed; see docs/refusals.md): the decision is\n" +
			"resolved with the merge option, the latest verdict approves exactly the raised commit, the work\n" +
			"ref is still at it, the diff from the merge base obeys the landing policy (roles/conductor-policy.json),\n" +
			"the squash onto the target tip applies cleanly and has the reviewed patch-id, and the gate passes on\n" +
			"exactly the tree being committed. Then it commits once (trailers Decision-Id, Reviewed-Commit,\n" +
			"Patch-Id, Run-Id, Model; a JSON receipt note on refs/notes/conductor) and moves the target by\n" +
			"compare-and-swap, retrying once from a moved tip. No checkout is made unless a gate command needs\n" +
			"files: then a free worktree of the worker pool (WORKER_WORKTREE_BASE) is borrowed and reset, or a\n" +
			"scratch worktree under the data root is made and removed. A worktree that has the\n" +
			"target checked out is moved along (refused when it has local changes). Landing a landed decision\n" +
			"again says so and exits 0. Nothing is pushed.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "dry-run", Usage: "do every check, the squash and the gate; commit nothing, record nothing"},
			&cli.StringFlag{Name: "sandbox", Usage: "sandbox backend for the gate: bwrap, docker, auto or none (default: auto; the gate runs worker-written code)", EnvVars: []string{"CONDUCTOR_GATE_SANDBOX", "WORKER_SANDBOX"}},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
			&cli.StringFlag{Name: "roles", Usage: "roles `DIR` overriding the default contracts (default: the repository's roles/ folder when it has one)"},
			&cli.BoolFlag{Name: "worktree", Usage: "run the gate in a scratch worktree checkout of the tree even when no gate command needs files"},
			&cli.Int64Flag{Name: "close-issue", Usage: "after landing, comment the landed SHA on forge issue `N` and close it (default: the decision's issue, if any; GITEA_URL/GITEA_TOKEN)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("land takes one DECISION, got %d arguments", c.NArg())
			}
			return landAction(c, d)
		},
	}
}

func landAction(c *cli.Context, d *deps) error {
	ctx := c.Context
	cfg := d.config(c)
	store, err := d.openStore(c)
	if err != nil {
		return err
	}
	id := c.Args().First()
	// The policy comes from the target's committed tip in the decision's
	// repository (or the operator's --roles DIR), never a working tree.
	repo, target, issue := "", "", c.Int64("close-issue")
	if dec, err := store.GetDecision(ctx, id); err == nil {
		repo, target = dec.Repo, dec.Target
		if issue == 0 {
			issue = dec.Issue
		}
	} else if !errors.Is(err, bus.ErrNotFound) {
		return err
	}
	pol, err := enforcedPolicy(ctx, c.String("roles"), repo, "refs/heads/"+strings.TrimPrefix(target, "refs/heads/"))
	if err != nil {
		return err
	}
	var checkout func(context.Context, string) (*land.Checkout, error)
	if repo != "" {
		if rg, err := patch.OpenRepo(repo); err == nil {
			checkout = pooledCheckout(runtask.NewPool(firstOf(d.Getenv("WORKER_WORKTREE_BASE"), cfg.WorktreesDir()), rg, d.Getenv), id)
		}
	}
	sb, err := gateSandbox(c)
	if err != nil {
		return err
	}
	defer closeSandbox(d, sb)
	out, err := land.Run(ctx, land.Options{
		Sandbox:    sb,
		Store:      store,
		Rules:      pol.Landing(),
		DecisionID: id,
		DryRun:     c.Bool("dry-run"),
		DataRoot:   cfg.DataRoot,
		Committer: land.Identity{
			Name:  firstOf(d.Getenv("GIT_COMMITTER_NAME"), "conductor"),
			Email: firstOf(d.Getenv("GIT_COMMITTER_EMAIL"), "conductor@localhost"),
		},
		Now:      d.Now,
		Getenv:   d.Getenv,
		Worktree: c.Bool("worktree"),
		Checkout: checkout,
		Out:      d.Stdout,
		JSON:     c.Bool("json"),
		Log:      d.Log,
		Fault:    faultInjector(d.Getenv, "land"),
	})
	if err != nil || issue <= 0 || out.Status != land.StatusLanded {
		return err
	}
	// Closing the issue is a separate act after the local commit: a forge
	// failure is reported, and the landing stands.
	f, err := d.openForge(c, patch.Git{GitDir: repo})
	if err == nil {
		err = forge.CloseIssueAfterLanding(ctx, f, issue, out.Commit, out.Target)
	}
	if err != nil {
		return fmt.Errorf("landed %s as %s, but closing issue #%d failed: %w", id, out.Commit, issue, err)
	}
	fmt.Fprintf(d.Stderr, "closed issue #%d (landed as %s on %s)\n", issue, out.Commit, out.Target)
	return nil
}

// pooledCheckout lends the gate a free worktree of the worker pool (reset
// to the target tip; the pool resets it again on release). It never grows
// the pool: with no free worktree land makes a scratch one and removes it.
func pooledCheckout(pool *runtask.Pool, owner string) func(context.Context, string) (*land.Checkout, error) {
	return func(ctx context.Context, commit string) (*land.Checkout, error) {
		slots, err := pool.Status(ctx)
		if err != nil {
			return nil, err
		}
		free := false
		for _, s := range slots {
			free = free || (s.State == runtask.SlotFree && !s.InUse && s.Exists)
		}
		if !free {
			return nil, nil
		}
		lease, err := pool.Acquire(ctx, commit, "land "+owner)
		if err != nil {
			return nil, err
		}
		return &land.Checkout{Git: lease.Git, Release: lease.Release}, nil
	}
}

// faultInjector returns a hook that SIGKILLs the process at the step named
// by CONDUCTOR_FAULT=<area>:<step>; it is honoured only when
// CONDUCTOR_TESTING=1 (tests prove crash safety with it).
func faultInjector(getenv func(string) string, area string) func(string) {
	if getenv("CONDUCTOR_TESTING") != "1" {
		return nil
	}
	want, ok := strings.CutPrefix(getenv("CONDUCTOR_FAULT"), area+":")
	if !ok || want == "" {
		return nil
	}
	return func(step string) {
		if step == want {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
}
