package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/termtext"
)

func newDecisionCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "decision",
		Usage: "raise, resolve and show decisions",
		Description: "A decision is a question raised to a person (e.g. may work/x merge into main?) and, once\n" +
			"resolved, the answer. `conductor land` reads it. A decision is resolved once; resolving it\n" +
			"again, or with an option it does not offer, is refused (exit 3) and changes nothing.",
		Subcommands: []*cli.Command{
			newDecisionRaiseCmd(d),
			newDecisionResolveCmd(d),
			newDecisionShowCmd(d),
			newDecisionListCmd(d),
		},
	}
}

// operatorName is who acts when --by is not given: $USER, else "operator".
func (d *deps) busWho(by string) string {
	if by != "" {
		return by
	}
	if u := d.Getenv("USER"); u != "" {
		return u
	}
	return "operator"
}

type decisionRaiseOptions struct {
	req  bus.RaiseRequest
	json bool
}

func newDecisionRaiseCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "raise",
		Usage:     "raise a decision and print its id",
		UsageText: "conductor decision raise --work-ref REF --commit SHA --target BRANCH [--kind KIND] [--repo DIR] [--run RUN] [--issue N] [--by NAME] [--json]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "kind", Value: bus.KindMergeProtected, Usage: "what is asked"},
			&cli.StringFlag{Name: "work-ref", Usage: "the ref holding the work, e.g. work/fix-1 (required for " + bus.KindMergeProtected + ")"},
			&cli.StringFlag{Name: "commit", Usage: "the commit asked about, resolved to a full id in --repo (required for " + bus.KindMergeProtected + ")"},
			&cli.StringFlag{Name: "target", Usage: "the branch it would land on (required for " + bus.KindMergeProtected + ")"},
			&cli.StringFlag{Name: "repo", Usage: "repository of the work ref (default: the one containing the current directory)"},
			&cli.StringFlag{Name: "run", Usage: "the run that produced the work"},
			&cli.Int64Flag{Name: "issue", Usage: "forge issue number to close when it lands"},
			&cli.StringFlag{Name: "by", Usage: "who raises it (default $USER, else operator)"},
			&cli.StringSliceFlag{Name: "offer", Usage: "an option the decision offers (repeatable; default merge and reject)"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("decision raise takes no arguments (got %q)", c.Args().Slice())
			}
			if c.String("kind") == bus.KindMergeProtected {
				var missing []string
				for _, f := range []string{"work-ref", "commit", "target"} {
					if strings.TrimSpace(c.String(f)) == "" {
						missing = append(missing, "--"+f)
					}
				}
				if len(missing) > 0 {
					return usagef("a %s decision needs %s", bus.KindMergeProtected, strings.Join(missing, ", "))
				}
			}
			if strings.TrimSpace(c.String("kind")) == "" {
				return usagef("--kind must not be empty")
			}
			if c.Int64("issue") < 0 {
				return usagef("--issue %d: must be a positive issue number", c.Int64("issue"))
			}
			wd, _ := os.Getwd()
			o := decisionRaiseOptions{
				req: bus.RaiseRequest{
					Kind: c.String("kind"), WorkRef: c.String("work-ref"), Commit: c.String("commit"),
					Target: c.String("target"), RepoDir: c.String("repo"), Dir: wd, RunID: c.String("run"),
					Issue: c.Int64("issue"), By: d.busWho(c.String("by")), Options: c.StringSlice("offer"),
				},
				json: c.Bool("json"),
			}
			return decisionRaise(c, d, o)
		},
	}
}

func decisionRaise(c *cli.Context, d *deps, o decisionRaiseOptions) error {
	s, err := d.openStore(c)
	if err != nil {
		return err
	}
	dec, err := bus.Raise(c.Context, s, o.req)
	if err != nil {
		return err
	}
	d.emit(c, bus.EventDecisionRaised, dec.RunID, "", dec.RaisedBy, map[string]any{"decision": dec.ID, "target": dec.Target, "workRef": dec.WorkRef})
	if o.json {
		return writeJSON(d.Stdout, bus.DecisionView{Decision: dec})
	}
	fmt.Fprintln(d.Stdout, dec.ID)
	return nil
}

type decisionResolveOptions struct {
	id, option, by string
	json           bool
}

func newDecisionResolveCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "resolve",
		Usage:     "answer a decision with one of its options",
		UsageText: "conductor decision resolve ID --option merge|reject [--by NAME] [--json]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "option", Required: true, Usage: "the answer: one of the options the decision offers (merge, reject)"},
			&cli.StringFlag{Name: "by", Usage: "who resolves it (default $USER, else operator)"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			id, err := decisionIDArg(c)
			if err != nil {
				return err
			}
			return decisionResolve(c, d, decisionResolveOptions{
				id: id, option: c.String("option"), by: d.busWho(c.String("by")), json: c.Bool("json"),
			})
		},
	}
}

func decisionIDArg(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", usagef("%s takes one decision id (got %d arguments)", c.Command.FullName(), c.NArg())
	}
	id := strings.ToLower(strings.TrimSpace(c.Args().First()))
	if id == "" {
		return "", usagef("empty decision id")
	}
	return id, nil
}

func decisionResolve(c *cli.Context, d *deps, o decisionResolveOptions) error {
	s, err := d.openStore(c)
	if err != nil {
		return err
	}
	dec, err := s.ResolveDecision(c.Context, o.id, o.option, o.by)
	if err != nil {
		return err
	}
	d.emit(c, bus.EventDecisionResolved, dec.RunID, "", dec.ResolvedBy, map[string]any{"decision": dec.ID, "option": dec.Option})
	if o.json {
		return writeJSON(d.Stdout, bus.DecisionView{Decision: dec})
	}
	fmt.Fprintf(d.Stdout, "%s resolved: %s (by %s)\n", dec.ID, dec.Option, dec.ResolvedBy)
	return nil
}

func newDecisionShowCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "show a decision, its answer and its landing",
		UsageText: "conductor decision show ID [--json]",
		Flags:     []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			id, err := decisionIDArg(c)
			if err != nil {
				return err
			}
			return decisionShow(c, d, id, c.Bool("json"))
		},
	}
}

// kvTable is a two-column "key  value" table for people; row skips empty
// values. Flush the writer when done.
func kvTable(w io.Writer) (*tabwriter.Writer, func(k, v string)) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	return tw, func(k, v string) {
		if v != "" {
			// one line per row: a value's tab or newline (a worker's
			// text) is shown escaped, never a column or a row of its own
			fmt.Fprintf(tw, "%s\t%s\n", k, termtext.Line(v))
		}
	}
}

func decisionShow(c *cli.Context, d *deps, id string, asJSON bool) error {
	s, err := d.openStore(c)
	if err != nil {
		return err
	}
	v, err := bus.ShowDecision(c.Context, s, id)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(d.Stdout, v)
	}
	tw, row := kvTable(d.Stdout)
	row("id", v.ID)
	row("kind", v.Kind)
	row("state", decisionState(v))
	row("options", strings.Join(v.Options, ", "))
	row("work ref", v.WorkRef)
	row("commit", v.Commit)
	row("target", v.Target)
	row("repo", v.Repo)
	row("run", v.RunID)
	if v.Issue > 0 {
		row("issue", fmt.Sprint("#", v.Issue))
	}
	row("raised", decisionWhen(v.RaisedAt)+" by "+busOrUnknown(v.RaisedBy))
	if !v.Open() {
		row("resolved", fmt.Sprintf("%s by %s at %s", v.Option, busOrUnknown(v.ResolvedBy), decisionWhen(v.ResolvedAt)))
	}
	if l := v.Landing; l != nil {
		row("landed", fmt.Sprintf("%s on %s at %s", l.Commit, l.Target, decisionWhen(l.LandedAt)))
		row("patch-id", l.PatchID)
		row("gate", l.Gate)
	}
	return tw.Flush()
}

func decisionState(v bus.DecisionView) string {
	switch {
	case v.Landing != nil:
		return "landed"
	case v.Open():
		return "open"
	}
	return "resolved: " + v.Option
}

func decisionWhen(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func busOrUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

func newDecisionListCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "list",
		Usage:     "list decisions, newest first",
		UsageText: "conductor decision list [--open] [--json]",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "open", Usage: "only decisions not yet resolved"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("decision list takes no arguments (got %q)", c.Args().Slice())
			}
			return decisionList(c, d, c.Bool("open"), c.Bool("json"))
		},
	}
}

func decisionList(c *cli.Context, d *deps, openOnly, asJSON bool) error {
	s, err := d.openStore(c)
	if err != nil {
		return err
	}
	list, err := s.ListDecisions(c.Context, openOnly)
	if err != nil {
		return err
	}
	if asJSON {
		if list == nil {
			list = []bus.Decision{}
		}
		return writeJSON(d.Stdout, map[string]any{"decisions": list})
	}
	if len(list) == 0 {
		if openOnly {
			fmt.Fprintln(d.Stderr, "no open decisions")
		} else {
			fmt.Fprintln(d.Stderr, "no decisions")
		}
		return nil
	}
	tw := tabwriter.NewWriter(d.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tKIND\tWORK REF\tCOMMIT\tTARGET\tRAISED\tBY")
	for _, x := range list {
		state := "open"
		if !x.Open() {
			state = x.Option
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.ID, state, x.Kind, busDash(x.WorkRef),
			busDash(decisionShort(x.Commit)), busDash(x.Target), x.RaisedAt.UTC().Format("2006-01-02 15:04"), busDash(x.RaisedBy))
	}
	return tw.Flush()
}

func decisionShort(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func busDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
