package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
)

func newPolicyCmd(d *deps) *cli.Command {
	rolesFlag := &cli.StringFlag{
		Name:  "roles",
		Usage: "repository (or its roles/ folder) whose contracts override the defaults (default: ./roles if present)",
	}
	return &cli.Command{
		Name:  "policy",
		Usage: "check and show role contracts",
		Description: "Role contracts are JSON files: the defaults are built in, a repository's roles/ folder\n" +
			"overrides them (objects merge key by key, arrays and scalars replace). See docs/roles.md.",
		Subcommands: []*cli.Command{
			{
				Name:      "check",
				Usage:     "validate the default contracts merged with DIR/roles (or DIR); list every problem",
				ArgsUsage: "[DIR]",
				Flags:     []cli.Flag{jsonFlag()},
				Action: func(c *cli.Context) error {
					if c.NArg() > 1 {
						return usagef("policy check takes at most one DIR, got %d arguments", c.NArg())
					}
					dir, err := resolveRolesDir(c.Args().First())
					if err != nil {
						return err
					}
					return policyCheck(d.Stdout, dir, c.Bool("json"))
				},
			},
			{
				Name:      "show",
				Usage:     "print the effective contract of ROLE (or \"conductor-policy\" for the landing rules); no ROLE lists the roles",
				ArgsUsage: "[ROLE]",
				Flags:     []cli.Flag{rolesFlag, &cli.BoolFlag{Name: "json", Usage: "print the contract as JSON"}},
				Action: func(c *cli.Context) error {
					if c.NArg() > 1 {
						return usagef("policy show takes one ROLE, got %d arguments", c.NArg())
					}
					dir, err := resolveRolesDir(c.String("roles"))
					if err != nil {
						return err
					}
					pol, err := policy.Load(roles.FS, dir)
					if err != nil {
						return err
					}
					return policyShow(d.Stdout, pol, c.Args().First(), c.Bool("json"))
				},
			},
		},
	}
}

// resolveRolesDir turns a DIR argument into the roles folder to load: DIR/roles
// when it exists, else DIR itself; with no DIR, ./roles when it exists, else
// none (defaults only).
func resolveRolesDir(dir string) (string, error) {
	if dir == "" {
		if fi, err := os.Stat("roles"); err == nil && fi.IsDir() {
			return "roles", nil
		}
		return "", nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("roles folder %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("roles folder %s: not a folder", dir)
	}
	sub := filepath.Join(dir, "roles")
	if fi, err := os.Stat(sub); err == nil && fi.IsDir() {
		return sub, nil
	}
	return dir, nil
}

type policyCheckReport struct {
	OK       bool             `json:"ok"`
	RolesDir string           `json:"rolesDir,omitempty"`
	Roles    []string         `json:"roles,omitempty"`
	Problems []policy.Problem `json:"problems,omitempty"`
}

func policyCheck(out io.Writer, dir string, asJSON bool) error {
	pol, err := policy.Load(roles.FS, dir)
	var ve *policy.ValidationError
	if err != nil && !errors.As(err, &ve) {
		return err
	}
	rep := policyCheckReport{OK: err == nil, RolesDir: dir}
	if pol != nil {
		rep.Roles = pol.RoleNames()
	}
	if ve != nil {
		rep.Problems = ve.Problems
	}
	if asJSON {
		if err := writeJSON(out, rep); err != nil {
			return err
		}
		if !rep.OK {
			return &silentError{code: exitRefused}
		}
		return nil
	}
	src := "defaults only"
	if dir != "" {
		src = "defaults merged with " + dir
	}
	if rep.OK {
		fmt.Fprintf(out, "ok: %s: roles %s and the landing rules are valid\n", src, strings.Join(rep.Roles, ", "))
		return nil
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(out, p.String())
	}
	n := len(rep.Problems)
	noun := "problems"
	if n == 1 {
		noun = "problem"
	}
	return refusal.Newf("policy-invalid", "fix each problem listed above, then run `conductor policy check` again",
		"%s: %d %s in the role contracts", src, n, noun)
}

func policyShow(out io.Writer, pol *policy.Policy, name string, asJSON bool) error {
	if name == "" {
		if asJSON {
			return writeJSON(out, map[string]any{"roles": pol.RoleNames(), "landing": pol.Landing().Source()})
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ROLE\tHARNESS\tTOOLS\tSOURCE")
		for _, n := range pol.RoleNames() {
			r, _ := pol.Role(n)
			c := r.Contract()
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n, c.Harness, strings.Join(c.Tools, ","), r.Source())
		}
		fmt.Fprintf(tw, "conductor-policy\tlanding\t-\t%s\n", pol.Landing().Source())
		return tw.Flush()
	}
	if name == "conductor-policy" || name == "landing" {
		l := pol.Landing()
		if asJSON {
			return writeJSON(out, l.Rules())
		}
		return showLanding(out, l)
	}
	r, err := pol.Role(name)
	if err != nil {
		return usagef("%v", err)
	}
	c := r.Contract()
	if asJSON {
		c.Schema = ""
		return writeJSON(out, c)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("role", c.Role)
	row("source", r.Source())
	row("harness", c.Harness)
	if c.Description != "" {
		row("description", c.Description)
	}
	row("tools", strings.Join(c.Tools, ", "))
	for i, argv := range c.Commands {
		k := ""
		if i == 0 {
			k = "commands"
		}
		row(k, strings.Join(argv, " "))
	}
	if len(c.DeniedArgs) > 0 {
		row("denied args", strings.Join(c.DeniedArgs, " "))
	}
	if c.Write != nil {
		row("write allow", strings.Join(c.Write.Allow, ", "))
		if len(c.Write.Deny) > 0 {
			row("write deny", strings.Join(c.Write.Deny, ", "))
		}
	}
	row("landing forbids", strings.Join(pol.Landing().ForbiddenPaths(), ", "))
	if len(c.Env) > 0 {
		row("env", strings.Join(c.Env, ", "))
	}
	row("sandbox", r.SandboxBackend())
	row("limits", fmt.Sprintf("maxSteps=%d tokenBudget=%d commandTimeout=%s outputLimit=%d (0 = worker default)",
		r.MaxSteps(), r.TokenBudget(), r.CommandTimeout(), r.OutputLimit()))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nsystem prompt:\n%s\n", c.SystemPrompt)
	return nil
}

func showLanding(out io.Writer, l *policy.Landing) error {
	rules := l.Rules().Landing
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("source", l.Source())
	row("targets", strings.Join(rules.Targets, ", "))
	row("forbidden paths", strings.Join(rules.ForbiddenPaths, ", "))
	row("case-insensitive paths", fmt.Sprint(rules.CaseInsensitivePaths))
	row("no new root files", fmt.Sprint(rules.NoNewRootFiles))
	row("no new top-level dirs", fmt.Sprint(rules.NoNewTopLevelDirs))
	row("required option", rules.RequiredOption)
	row("required verdict", rules.RequiredVerdict)
	for _, g := range l.Gate() {
		row("gate "+g.Name, fmt.Sprintf("%s (timeout %s, needs files %v)", strings.Join(g.Argv, " "), g.Timeout, g.NeedsFiles))
	}
	sl := l.SizeLimits()
	row("size limits", fmt.Sprintf("maxFiles=%d maxChangedLines=%d maxFileBytes=%d (0 = none)", sl.MaxFiles, sl.MaxChangedLines, sl.MaxFileBytes))
	for _, s := range l.SyntaxChecks() {
		opt := ""
		if s.IfPresent {
			opt = ", if installed"
		}
		row("syntax "+s.Glob, fmt.Sprintf("%s FILE (timeout %s%s)", strings.Join(s.Argv, " "), s.Timeout, opt))
	}
	return tw.Flush()
}
