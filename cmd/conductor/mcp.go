package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/mcp"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/runtask"
)

func newMCPCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "mcp",
		Usage: "serve the agent lifecycle (claim_task, complete_task, …) as an MCP server over stdio or HTTP",
		Description: "Other agents (Claude Code, an IDE agent, your own assistant) take and finish\n" +
			"backlog items through the same store as conductor's workers. The backlog is a\n" +
			"folder of task files (--backlog, default DATA_ROOT/backlog). Tools: claim_task,\n" +
			"complete_task, list_tasks, list_runs, get_run, add_note, raise_decision,\n" +
			"list_decisions; resources: conductor://runs/RUN/transcript and …/patch. There is\n" +
			"no resolve_decision and no land: a decision is a person's act, landing the\n" +
			"conductor's. Default: one session on stdin/stdout. --listen 127.0.0.1:PORT serves\n" +
			"streamable HTTP instead, every request needing the bearer token (--token or\n" +
			"CONDUCTOR_MCP_TOKEN; on loopback without one a token is generated and printed to\n" +
			"stderr); a non-loopback address without a token is refused. See docs/mcp.md.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Usage: "serve streamable HTTP on `HOST:PORT` instead of stdio"},
			&cli.StringFlag{Name: "token", Usage: "bearer `TOKEN` HTTP requests must carry", EnvVars: []string{"CONDUCTOR_MCP_TOKEN"}},
			&cli.StringFlag{Name: "backlog", Usage: "folder of backlog task files (default DATA_ROOT/backlog)", EnvVars: []string{"CONDUCTOR_BACKLOG"}},
			&cli.DurationFlag{Name: "lease", Value: 30 * time.Minute, Usage: "lease of a claim that names no leaseSeconds"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usagef("mcp takes no arguments, got %q", c.Args().Slice())
			}
			if c.Duration("lease") <= 0 || c.Duration("lease") > 24*time.Hour {
				return usagef("mcp: --lease %s: want more than 0 and at most 24h", c.Duration("lease"))
			}
			listen, token := c.String("listen"), c.String("token")
			if listen != "" {
				// Refuse before opening anything.
				if err := mcp.CheckListen(listen, token); err != nil {
					return err
				}
			}
			cfg := d.config(c)
			backlog := c.String("backlog")
			if backlog == "" {
				backlog = filepath.Join(cfg.DataRoot, "backlog")
			}
			st, err := d.openStore(c)
			if err != nil {
				return fmt.Errorf("mcp: %w", err)
			}
			srv, err := mcp.New(mcp.Options{
				Store: st, RunsDir: cfg.RunsDir(), BacklogDir: backlog, DefaultLease: c.Duration("lease"),
				Version: version, Now: d.Now, Log: d.Log,
				Repo: func(workspace string) (patch.Git, error) { return runtask.ResolveRepo("", workspace, cfg) },
			})
			if err != nil {
				return err
			}
			if listen == "" {
				return srv.ServeStdio(c.Context, d.Stdin, d.Stdout)
			}
			return srv.ServeHTTP(c.Context, mcp.HTTPOptions{Addr: listen, Token: token, Stderr: d.Stderr})
		},
	}
}
