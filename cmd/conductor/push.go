package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
)

func newPushCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "push",
		Usage:     "push a branch to the forge (e.g. the landed target), as a separate act",
		ArgsUsage: "BRANCH",
		Description: "Pushes refs/heads/BRANCH of the repository in -C (default: the current\n" +
			"directory) to the same branch on --remote (default origin). Not forced unless\n" +
			"--force. When the remote is the forge's own HTTP(S) URL, the token (from the\n" +
			"variable named by --token-env, default GITEA_TOKEN) is given to that one git\n" +
			"process through its environment; other remotes get no credential.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "remote", Usage: "remote to push to", Value: forge.DefaultRemote},
			&cli.StringFlag{Name: "C", Usage: "local repository", Value: "."},
			&cli.BoolFlag{Name: "force", Usage: "replace the remote branch even if it is not an ancestor"},
			&cli.StringFlag{Name: "gitea-url", Usage: "Gitea base URL (scopes the credential)", EnvVars: []string{forge.DefaultURLEnv}},
			&cli.StringFlag{Name: "token-env", Usage: "NAME of the environment variable holding the forge token (default " + forge.DefaultTokenEnv + ")"},
			forgeTimeoutFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print the result as one JSON object"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("push: want one BRANCH, got %d arguments", c.NArg())
			}
			return pushRun(c, d, c.Args().First())
		},
	}
}

func pushRun(c *cli.Context, d *deps, branch string) error {
	local, err := git.OpenRepo(c.String("C"))
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	cfg := d.config(c)
	s, err := forge.LoadSettings(cfg.ConfigFile)
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	s = s.Merge(forge.Settings{URL: c.String("gitea-url"), TokenEnv: c.String("token-env"), Remote: c.String("remote"), Timeout: cfg.ForgeTimeout}).WithDefaults(d.Getenv)
	if err := s.ValidateTimeout(); err != nil {
		return usageErr(fmt.Errorf("push: %w", err))
	}
	p := forge.Pusher{Git: local, Remote: s.Remote, ForgeURL: s.URL, Timeout: s.Deadline()}
	// The token is optional here: file, ssh and foreign remotes need none.
	if tok, err := s.Token(d.Getenv); err == nil {
		p.Token = tok
	}
	res, err := p.Push(c.Context, branch, forge.PushOptions{Force: c.Bool("force")})
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return writeJSON(d.Stdout, res)
	}
	if res.UpToDate {
		fmt.Fprintf(d.Stderr, "%s is already at %s on %s\n", branch, patch.Short(res.Commit), res.Remote)
	} else {
		fmt.Fprintf(d.Stderr, "pushed %s (%s) to %s\n", branch, patch.Short(res.Commit), res.Remote)
	}
	fmt.Fprintln(d.Stdout, res.Commit)
	return nil
}
