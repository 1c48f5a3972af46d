package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/web"
	"github.com/conductor-dev/conductor/land"
	"github.com/conductor-dev/conductor/patch/git"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/runtask"
)

func newServeCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "serve",
		Usage:     "mission control: a live web view of runs, decisions, the queue and what landed",
		UsageText: "conductor serve [--listen HOST:PORT] [--token-file FILE | --operator NAME (token in $CONDUCTOR_SERVE_TOKEN)]",
		Description: "Serves the web view of the bus store and the run folders (docs/web.md). It binds\n" +
			"127.0.0.1 unless --listen says otherwise; binding any other address needs an operator token,\n" +
			"and then every page needs one. Adding a note and answering a decision always need one: log in\n" +
			"with it in the browser (the session's CSRF token guards every form) or send\n" +
			"Authorization: Bearer TOKEN. The token's name is recorded as who decided. Tokens come from\n" +
			"--token-file (name:token lines) or from $CONDUCTOR_SERVE_TOKEN with --operator NAME; they are\n" +
			"never shown. Landing stays `conductor land`'s act; an open decision's \"Preview landing\" button (a\n" +
			"mutation: token and CSRF) runs `conductor land DECISION --preview` in the background (the checks, the\n" +
			"squash, the patch-id binding and the gate in the gate sandbox; it changes nothing) and shows its result.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8377", Usage: "`HOST:PORT` to listen on (a non-loopback host needs a token)", EnvVars: []string{"CONDUCTOR_SERVE_LISTEN"}},
			&cli.StringFlag{Name: "token-file", Usage: "operator tokens, one `FILE` line of name:token each", EnvVars: []string{"CONDUCTOR_SERVE_TOKEN_FILE"}},
			&cli.StringFlag{Name: "operator", Usage: "the operator `NAME` the token in $CONDUCTOR_SERVE_TOKEN stands for (default $USER)"},
			&cli.DurationFlag{Name: "poll", Value: time.Second, Usage: "how often live pages look for changes (a `DURATION`, at least 50ms)"},
			&cli.StringFlag{Name: "worktree-base", Usage: "worktree base `DIR` of the pools shown (default: $WORKER_WORKTREE_BASE, else <data root>/worktrees)"},
			queueFlags()[0], queueFlags()[1], // --queue, --redis-url: the dead letters and model slots shown
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("serve takes no arguments (got %q)", c.Args().Slice())
			}
			ops, err := serveOperators(c, d)
			if err != nil {
				return err
			}
			if c.Duration("poll") < 50*time.Millisecond {
				return usagef("--poll %s: at least 50ms", c.Duration("poll"))
			}
			st, err := d.openStore(c)
			if err != nil {
				return err
			}
			cfg := d.config(c)
			fleet := serveFleet(c, d, st)
			defer fleet.close()
			err = web.Run(c.Context, web.Options{
				DeadLetters: fleet.dead,
				QueueName:   fleet.queueName,
				ModelSlots:  fleet.slots,
				Store:       st,
				RunsDir:     d.config(c).RunsDir(),
				Listen:      c.String("listen"),
				Operators:   ops,
				Poll:        c.Duration("poll"),
				Pools:       func(ctx context.Context) ([]web.Pool, error) { return servePools(ctx, cfg) },
				Audit:       serveAudit(st),
				Preview:     servePreview(c, d, st, cfg),
				Secrets:     serveSecrets(os.Environ()),
				Log:         d.Log,
				Now:         d.Now,
				Ready: func(addr string) {
					fmt.Fprintf(d.Stdout, "http://%s/\n", addr)
				},
			})
			if errors.Is(err, web.ErrTokenRequired) {
				return usageErr(err)
			}
			if errors.Is(err, context.Canceled) {
				d.Log.Info("mission control stopped")
				return &silentError{code: exitInterrupted} // stopped by a signal: a clean stop, exit 130
			}
			return err
		},
	}
}

// serveOperators reads the operator tokens: --token-file, or
// $CONDUCTOR_SERVE_TOKEN named by --operator. None: read-only.
func serveOperators(c *cli.Context, d *deps) ([]web.Operator, error) {
	file, env := c.String("token-file"), strings.TrimSpace(d.Getenv("CONDUCTOR_SERVE_TOKEN"))
	switch {
	case file != "" && env != "":
		return nil, usagef("give --token-file or $CONDUCTOR_SERVE_TOKEN, not both")
	case file != "":
		if c.IsSet("operator") {
			return nil, usagef("--operator names the token in $CONDUCTOR_SERVE_TOKEN; a token file names its own operators")
		}
		ops, err := web.LoadTokenFile(file)
		if err != nil {
			return nil, usageErr(err)
		}
		return ops, nil
	case env != "":
		ops := []web.Operator{{Name: d.busWho(c.String("operator")), Token: env}}
		if err := web.CheckOperators(ops); err != nil {
			return nil, usageErr(fmt.Errorf("$CONDUCTOR_SERVE_TOKEN: %w", err))
		}
		return ops, nil
	case c.IsSet("operator"):
		return nil, usagef("--operator needs the token in $CONDUCTOR_SERVE_TOKEN")
	}
	return nil, nil
}

// serveAudit runs `conductor audit` on a landed commit for the Landed page.
func serveAudit(st land.AuditStore) func(ctx context.Context, repo, commit string) (web.Audit, error) {
	return func(ctx context.Context, repo, commit string) (web.Audit, error) {
		g, err := git.OpenRepo(repo)
		if err != nil {
			return web.Audit{}, err
		}
		rep, err := land.Audit(ctx, land.AuditOptions{Git: g, Store: st, Commit: commit})
		if err != nil {
			return web.Audit{}, err
		}
		a := web.Audit{OK: rep.OK, PatchID: rep.PatchID}
		for _, c := range rep.Checks {
			a.Checks = append(a.Checks, web.AuditCheck{Name: c.Name, OK: c.OK, Want: c.Want, Got: c.Got, Detail: c.Detail})
		}
		return a, nil
	}
}

// servePreview runs `conductor land DECISION --preview` for the decision
// card's button: the policy committed on the target, the gate sandbox the
// configuration names (default: auto, with the operator's options; never
// none unless configured), the operator who clicked as who would choose
// merge. It changes nothing.
func servePreview(c *cli.Context, d *deps, st bus.Store, cfg conductor.Config) func(ctx context.Context, id, operator string) (web.Preview, error) {
	return func(ctx context.Context, id, operator string) (web.Preview, error) {
		dec, err := st.GetDecision(ctx, id)
		if err != nil && !errors.Is(err, bus.ErrNotFound) {
			return web.Preview{}, err
		}
		pol, err := enforcedPolicy(ctx, "", dec.Repo, "refs/heads/"+strings.TrimPrefix(dec.Target, "refs/heads/"))
		if err != nil {
			return web.Preview{}, err
		}
		// The sandbox `conductor land --preview` would use: the one the
		// configuration names, else auto, with the operator's options.
		sb, err := gateSandboxFor(c, d, cmp.Or(cfg.GateSandbox, cfg.Sandbox), len(pol.Landing().Gate()) > 0, true)
		if err != nil {
			return web.Preview{}, err
		}
		defer closeSandbox(d, sb)
		out, err := land.Preview(ctx, land.Options{Sandbox: sb, Store: st, Rules: pol.Landing(), DecisionID: id,
			DataRoot: cfg.DataRoot, Now: d.Now, Getenv: d.Getenv, Log: d.Log}, operator)
		return webPreview(out), err
	}
}

// webPreview is a preview's outcome as the web view shows it.
func webPreview(out land.Outcome) web.Preview {
	p := web.Preview{Status: out.Status, Target: out.Target, Parent: out.Parent, Tree: out.Tree, ReviewedCommit: out.ReviewedCommit,
		PatchID: out.PatchID, Mode: out.Mode, Message: out.Message, Files: out.Files, Refusal: out.Refusal, Gate: out.Gate}
	return p
}

// serveSecrets are the values of the variables of the conductor's own
// environment that look like credentials (policy.Credential): no page may
// show one, whatever a run folder or the store holds.
func serveSecrets(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if name, val, ok := strings.Cut(kv, "="); ok && val != "" && policy.Credential(name) {
			out = append(out, val)
		}
	}
	return out
}

func servePools(ctx context.Context, cfg conductor.Config) ([]web.Pool, error) {
	pools, err := runtask.PoolStatus(ctx, runtask.PoolsOptions{Config: cfg})
	if err != nil {
		return nil, err
	}
	var out []web.Pool
	for _, p := range pools {
		wp := web.Pool{Dir: p.Dir, Repo: p.Repo}
		for _, s := range p.Slots {
			wp.Slots = append(wp.Slots, web.PoolSlot{Slot: s.Slot, State: s.Shown(), Owner: s.Owner, Base: s.Base, LastUsed: s.LastUsed, Bytes: s.Bytes})
		}
		out = append(out, wp)
	}
	return out, nil
}
