package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
)

// forgeFlags are the forge settings every forge-facing command takes
// (pr open, push, and land --close-issue).
func forgeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "gitea-url", Usage: "Gitea base URL", EnvVars: []string{forge.DefaultURLEnv}},
		&cli.StringFlag{Name: "token-env", Usage: "NAME of the environment variable holding the forge token (default " + forge.DefaultTokenEnv + ")"},
		&cli.StringFlag{Name: "remote", Usage: "remote of the local repository to push to (default origin)"},
		&cli.StringFlag{Name: "owner", Usage: "forge repository owner (default: from the remote URL)"},
		&cli.StringFlag{Name: "repo", Usage: "forge repository name (default: from the remote URL)"},
		&cli.StringFlag{Name: "wip-prefix", Usage: "draft title prefix the server recognises (default WIP:)"},
		forgeTimeoutFlag(),
	}
}

// forgeTimeoutFlag bounds every forge request and push.
func forgeTimeoutFlag() cli.Flag {
	return &cli.StringFlag{Name: "forge-timeout",
		Usage: "give up on a forge request or push that has no answer within this long (e.g. 30s, 2m; env " + forge.TimeoutEnv + "; default 60s)"}
}

// forgeSettings merges the config file's "forge" section with the flags and
// environment (flags and environment win).
func (d *deps) forgeSettings(c *cli.Context) (forge.Settings, error) {
	cfg := d.config(c)
	s, err := forge.LoadSettings(cfg.ConfigFile)
	if err != nil {
		return s, err
	}
	s = s.Merge(forge.Settings{
		URL:       c.String("gitea-url"),
		TokenEnv:  c.String("token-env"),
		Remote:    c.String("remote"),
		Owner:     c.String("owner"),
		Repo:      c.String("repo"),
		WIPPrefix: c.String("wip-prefix"),
		Timeout:   cfg.ForgeTimeout, // --forge-timeout, CONDUCTOR_FORGE_TIMEOUT or forge.timeout
	})
	return s.WithDefaults(d.Getenv), nil
}

// openForge connects to the forge for a local repository (used by pr open
// and by land --close-issue).
func (d *deps) openForge(c *cli.Context, local patch.Git) (*forge.Gitea, error) {
	s, err := d.forgeSettings(c)
	if err != nil {
		return nil, err
	}
	return forge.Connect(c.Context, s, local, d.Getenv, d.Log)
}

func newPRCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "pr",
		Usage: "open draft pull requests on the forge",
		Subcommands: []*cli.Command{
			newPROpenCmd(d),
		},
	}
}

type prOpenOptions struct {
	target string // run id or branch
	dir    string
	base   string
	issue  int64
	title  string
	force  bool
	json   bool
}

func newPROpenCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "open",
		Usage:     "push a work branch and open a draft pull request for it",
		ArgsUsage: "RUN|BRANCH",
		Description: "RUN is a run id: its task's work branch (work/<task-id>, made by conductor\n" +
			"review) is pushed from the run's workspace repository. BRANCH is a local branch\n" +
			"of the repository in -C (default: the current directory).\n\n" +
			"The branch is pushed to --remote, then a pull request is opened with the draft\n" +
			"prefix (Gitea marks drafts by title prefix, WIP: by default). The body is built\n" +
			"from the run record (task, model alias, tokens, steps, patch-id), the diffstat\n" +
			"and the review verdict. When a pull request for the branch is already open it is\n" +
			"printed and nothing new is opened (exit 0).\n\n" +
			"Nothing is pushed unless the branch exists, owner/repo resolve, the token is\n" +
			"set, the forge answers and the base branch exists on the forge. The token is\n" +
			"read from the variable named by --token-env (default GITEA_TOKEN) and reaches\n" +
			"git only through the push process's environment.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "base", Usage: "target branch on the forge (default: the repository's default branch)"},
			&cli.Int64Flag{Name: "issue", Usage: "issue number: adds \"Closes #N\" and a link"},
			&cli.StringFlag{Name: "title", Usage: "title (default: the branch tip's subject); the draft prefix is added"},
			&cli.BoolFlag{Name: "force", Usage: "replace the remote branch (a work branch rewritten after refinement)"},
			&cli.StringFlag{Name: "C", Usage: "local repository for a BRANCH argument", Value: "."},
			&cli.BoolFlag{Name: "json", Usage: "print the result as one JSON object"},
		}, forgeFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("pr open: want one RUN or BRANCH, got %d arguments", c.NArg())
			}
			if c.Int64("issue") < 0 {
				return usagef("pr open: --issue %d: not an issue number", c.Int64("issue"))
			}
			return prOpen(c, d, prOpenOptions{
				target: c.Args().First(),
				dir:    c.String("C"),
				base:   c.String("base"),
				issue:  c.Int64("issue"),
				title:  c.String("title"),
				force:  c.Bool("force"),
				json:   c.Bool("json"),
			})
		},
	}
}

func prOpen(c *cli.Context, d *deps, o prOpenOptions) error {
	settings, err := d.forgeSettings(c)
	if err != nil {
		return fmt.Errorf("pr open: %w", err)
	}
	opts := forge.DraftOptions{
		Base: o.base, Issue: o.issue, Title: o.title, Force: o.force,
		Settings: settings, Getenv: d.Getenv, Log: d.Log,
	}
	cfg := d.config(c)
	runDir := cfg.RunDir(o.target)
	if isRunID(o.target) && fileExists(filepath.Join(runDir, runrec.ResultFile)) {
		opts.RunDir = runDir
	} else {
		if isRunID(o.target) && fileExists(runDir) {
			return fmt.Errorf("pr open: run %s has no %s yet (still running?)", o.target, runrec.ResultFile)
		}
		local, err := git.OpenRepo(o.dir)
		if err != nil {
			return fmt.Errorf("pr open: %s is neither a run (no %s) nor usable as a branch: %w", o.target, runDir, err)
		}
		opts.Repo = local
		opts.Branch = o.target
	}
	if st, err := d.openStore(c); err == nil {
		opts.Verdicts = st
		if l, ok := st.(bus.Locker); ok {
			opts.Lock = l.Lock
		}
	} else {
		d.Log.Warn("bus store unavailable: the pull request body will not show the review verdict", "error", err)
	}
	res, err := forge.OpenDraftPR(c.Context, opts)
	if err != nil {
		return err
	}
	d.emit(c, bus.EventPROpened, res.RunID, "", "conductor", map[string]any{"repo": res.Repo, "number": res.PR.Number, "url": res.PR.URL, "draft": res.PR.Draft})
	if err := printPR(d.Stdout, d.Stderr, res, o.json); err != nil {
		return err
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(d.Stderr, "warning: %s\n", w)
	}
	return nil
}

func printPR(stdout, stderr io.Writer, res forge.DraftResult, asJSON bool) error {
	if asJSON {
		return writeJSON(stdout, res)
	}
	pushed := "pushed"
	if res.Push.UpToDate {
		pushed = "already on the forge:"
	}
	fmt.Fprintf(stderr, "%s %s (%s) to %s\n", pushed, res.Push.Branch, patch.Short(res.Push.Commit), res.Push.Remote)
	// Say what the server reported: "draft" only when it marked it so.
	var state string
	switch {
	case res.PR.Existing && res.PR.Draft:
		state = "draft pull request already open:"
	case res.PR.Existing:
		state = "pull request already open (not a draft):"
	case res.PR.Draft:
		state = "opened draft pull request"
	default:
		state = "opened pull request (the server did not mark it draft)"
	}
	fmt.Fprintf(stderr, "%s #%d in %s: %s → %s %q\n", state, res.PR.Number, res.Repo, res.PR.Head, res.PR.Base, res.PR.Title)
	fmt.Fprintln(stdout, res.PR.URL)
	return nil
}

// isRunID reports whether s can name a run folder.
func isRunID(s string) bool { return runrec.ValidRunID(s) == nil }

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil || !errors.Is(err, os.ErrNotExist)
}
