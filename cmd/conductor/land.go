package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/land"
	"github.com/conductor-dev/conductor/patch"
)

func newLandCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "land",
		Usage:     "land a resolved merge decision as one gated local commit",
		ArgsUsage: "DECISION",
		UsageText: "conductor land DECISION [--dry-run | --preview] [--json] [--roles DIR] [--worktree]",
		Description: "Reads the decision, its raise and the latest verdict from the bus store and checks, each\n" +
			"refusing with a named code (exit 3, nothing changed; see docs/refusals.md): the decision is\n" +
			"resolved with the merge option, the latest verdict approves exactly the raised commit, the work\n" +
			"ref is still at it, the diff from the merge base obeys the landing policy (roles/conductor-policy.json),\n" +
			"the squash onto the target tip applies cleanly and has the reviewed patch-id, and the gate passes on\n" +
			"exactly the tree being committed. Then it commits once (trailers Decision-Id, Reviewed-Commit,\n" +
			"Patch-Id, Run-Id, Model; a JSON receipt note on refs/notes/conductor) and moves the target by\n" +
			"compare-and-swap, retrying once from a moved tip. No checkout is made unless a gate command needs\n" +
			"files: then a scratch worktree of the landing's own under the data root is made and removed (never\n" +
			"a worktree of the worker pool: what a gate leaves must not reach a later task). A worktree that has the\n" +
			"target checked out is moved along (refused when it has local changes). Landing a landed decision\n" +
			"again says so and exits 0. Nothing is pushed.\n\n" +
			"--preview is --dry-run for a decision that is still OPEN (before anyone chose merge or reject): every\n" +
			"check, the squash, the patch-id binding and the gate in the sandbox, as if the decision were resolved\n" +
			"with merge now by --by NAME (default $USER). It changes nothing (the decision stays open) and says\n" +
			"\"decision D is still OPEN\" above what it would land; --json prints status \"preview\". A resolved decision\n" +
			"is refused (decision-already-resolved: --dry-run is its preview).",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "dry-run", Usage: "do every check, the squash and the gate; commit nothing, record nothing"},
			&cli.BoolFlag{Name: "preview", Usage: "a dry run of a decision that is still open, as if merged now (commits nothing, leaves the decision open)"},
			&cli.StringFlag{Name: "by", Usage: "with --preview: who the preview answers merge as, in the message it shows (default $USER, else operator)"},
			&cli.StringFlag{Name: "sandbox", Usage: "sandbox backend for the gate: bwrap, docker, auto or none (env CONDUCTOR_GATE_SANDBOX, else WORKER_SANDBOX; default: auto; the gate runs worker-written code)"},
			jsonFlag(),
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress line on a terminal"},
			&cli.StringFlag{Name: "roles", Usage: "roles `DIR` overriding the default contracts (default: the repository's roles/ folder when it has one)"},
			&cli.BoolFlag{Name: "worktree", Usage: "run the gate in a scratch worktree checkout of the tree even when no gate command needs files"},
			&cli.BoolFlag{Name: "record", Usage: "after landing, run the Record step (conductor record DECISION: build log, CURRENT.md status)"},
			&cli.Int64Flag{Name: "close-issue", Usage: "after landing, comment the landed SHA on forge issue `N` and close it (default: the decision's issue, if any; GITEA_URL/GITEA_TOKEN)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("land takes one DECISION, got %d arguments", c.NArg())
			}
			if c.Bool("preview") {
				for _, f := range []string{"record", "close-issue", "dry-run"} {
					if c.IsSet(f) {
						return usagef("--preview is a dry run of an open decision: --%s cannot go with it", f)
					}
				}
			} else if c.IsSet("by") {
				return usagef("--by goes with --preview (a landing's decider is who resolved the decision)")
			}
			return landAction(c, d)
		},
	}
}

func landAction(c *cli.Context, d *deps) (err error) {
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
	sb, err := gateSandboxFor(c, d, cmp.Or(cfg.GateSandbox, cfg.Sandbox), len(pol.Landing().Gate()) > 0, c.Bool("json") || c.Bool("quiet"))
	if err != nil {
		return err
	}
	defer closeSandbox(d, sb)
	// The issue to close is looked up before anything lands: a missing one
	// is refused (issue-not-found) with nothing changed, not found after
	// the commit exists.
	var f *forge.Gitea
	dry := c.Bool("dry-run") || c.Bool("preview")
	if issue > 0 && !dry {
		if f, err = d.openForge(c, patch.Git{GitDir: repo}); err != nil {
			return fmt.Errorf("land %s: --close-issue %d: %w (nothing landed)", id, issue, err)
		}
		if err := f.RequireIssue(ctx, issue); err != nil {
			return fmt.Errorf("land %s: --close-issue %d: %w (nothing landed)", id, issue, err)
		}
	}
	lo := land.Options{
		Sandbox:    sb,
		Store:      store,
		Rules:      pol.Landing(),
		DecisionID: id,
		DryRun:     dry,
		DataRoot:   cfg.DataRoot,
		Committer:  landCommitter(ctx, d, cfg, repo),
		Now:        d.Now,
		Getenv:     d.Getenv,
		Worktree:   c.Bool("worktree"),
		Log:        d.Log,
		Fault:      faultInjector(d.Getenv, "land"),
	}
	var out land.Outcome
	if c.Bool("preview") {
		out, err = land.Preview(ctx, lo, d.busWho(c.String("by")))
	} else {
		out, err = land.Run(ctx, lo)
	}
	// What was landed, or refused (nothing changed), is printed; another
	// error is only the error.
	var rf *refusal.Refusal
	if err == nil || errors.As(err, &rf) {
		if perr := renderLandOutcome(d.Stdout, c.Bool("json"), out); perr != nil && err == nil {
			err = perr
		}
	}
	if err == nil && out.Status == land.StatusLanded && !dry {
		d.emit(c, bus.EventLanded, landRunID(ctx, store, id), "", "conductor", map[string]any{"decision": id, "commit": out.Commit, "target": out.Target, "patchId": out.PatchID})
		refreshWarmCache(c, d, repo, out.Commit) // the target moved: the next gates start from its tip
	}
	if err == nil && c.Bool("record") && !dry && (out.Status == land.StatusLanded || out.Status == land.StatusAlreadyLanded) {
		defer func() {
			if err == nil { // the landing and its issue first; then the record (its issue: land's)
				err = recordAction(c, d, id, -1)
			}
		}()
	}
	if err != nil || issue <= 0 || out.Status != land.StatusLanded {
		return err
	}
	// Closing the issue is a separate act after the local commit: a forge
	// failure is reported, and the landing stands.
	if f == nil {
		f, err = d.openForge(c, patch.Git{GitDir: repo})
	}
	if err == nil {
		err = forge.CloseIssueAfterLanding(ctx, f, issue, out.Commit, out.Target)
	}
	if err != nil {
		// %v, not %w: the landing stands, so this is an error (exit 1),
		// never a refusal (which would say nothing changed).
		return fmt.Errorf("landed %s as %s, but closing issue #%d failed: %v", id, out.Commit, issue, err)
	}
	fmt.Fprintf(d.Stderr, "closed issue #%d (landed as %s on %s)\n", issue, out.Commit, out.Target)
	return nil
}

// renderLandOutcome prints a landing's outcome for people, or as one JSON
// object.
func renderLandOutcome(w io.Writer, asJSON bool, out land.Outcome) error {
	if asJSON {
		return writeJSON(w, out)
	}
	var err error
	switch out.Status {
	case land.StatusLanded:
		_, err = fmt.Fprintf(w, "landed %s as %s on %s\n", out.Decision, out.Commit, out.Target)
	case land.StatusAlreadyLanded:
		_, err = fmt.Fprintf(w, "already landed %s as %s on %s\n", out.Decision, out.Commit, out.Target)
	case land.StatusDryRun, land.StatusPreview:
		if out.Status == land.StatusPreview {
			if _, err = fmt.Fprintf(w, "preview: decision %s is still OPEN (nothing is decided); if it were merged now:\n", out.Decision); err != nil {
				return err
			}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "would land %s on %s\n  parent   %s\n  tree     %s\n  reviewed %s\n  patch-id %s\n  mode     %s\n  files    %d\n",
			out.Decision, out.Target, out.Parent, out.Tree, out.ReviewedCommit, out.PatchID, out.Mode, len(out.Files))
		for _, g := range out.Gate {
			fmt.Fprintf(&b, "  gate     %s passed (%.1fs)\n", g.Name, g.Duration.Seconds())
		}
		fmt.Fprintf(&b, "  message\n%s\n", indentLines(out.Message, "    "))
		_, err = io.WriteString(w, b.String())
	}
	return err
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

// landCommitter is who commits a landing: the committer knobs
// (GIT_COMMITTER_NAME/EMAIL, the config file's land section) when set, else the repository's git identity (its own config, then the
// operator's global one), else conductor <conductor@localhost>. It says on
// stderr which (unless the variables said so), so a landed commit's
// committer is never a surprise.
func landCommitter(ctx context.Context, d *deps, cfg conductor.Config, repo string) land.Identity {
	name, email := cfg.CommitterName, cfg.CommitterEmail
	if name != "" && email != "" {
		return land.Identity{Name: name, Email: email} // the operator said so
	}
	source := ""
	{
		var gn, ge string
		if repo != "" {
			gn, ge = patch.UserIdentity(ctx, patch.Git{GitDir: repo}, d.Getenv("HOME"), d.Getenv("XDG_CONFIG_HOME"))
		}
		if name == "" && gn != "" || email == "" && ge != "" {
			source = "the repository's git config (user.name, user.email)"
		}
		name, email = cmp.Or(name, gn), cmp.Or(email, ge)
	}
	if name == "" || email == "" {
		name, email = cmp.Or(name, "conductor"), cmp.Or(email, "conductor@localhost")
		source = "the default: set user.name and user.email in the repository, or GIT_COMMITTER_NAME/EMAIL"
	}
	fmt.Fprintf(d.Stderr, "committer: %s <%s> (%s)\n", name, email, source)
	return land.Identity{Name: name, Email: email}
}

// landRunID is the run a decision's work came from ("" when unknown).
func landRunID(ctx context.Context, s bus.Store, id string) string {
	if dec, err := s.GetDecision(ctx, id); err == nil {
		return dec.RunID
	}
	return ""
}
