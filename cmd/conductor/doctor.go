package main

import (
	"cmp"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/patch/git"
	"github.com/conductor-dev/conductor/runtask"
)

// doctorOptions are the parsed flags of `conductor doctor`.
type doctorOptions struct {
	JSON    bool
	Backend string // the backend runs will use: the exit status says whether it works
	// Runtimes are the worker runtimes and whether each works here
	// (reported; a missing pi does not fail doctor).
	Runtimes []runtimeReport
	// Forge is the forge check, when a forge is configured (GITEA_URL,
	// --gitea-url or the config file): a failing check fails doctor.
	Forge *forge.Report
	// Warm says whether gates start from a warm Go cache here, and why
	// not (reported; a cold cache is slower, never unsafe).
	Warm *sandbox.WarmReport
	// DataRoot is what the data root's file system means for the worker
	// (reported; never fails doctor).
	DataRoot *dataRootReport
}

func newDoctorCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "doctor",
		Usage:     "report which sandbox backends work on this machine",
		ArgsUsage: " ",
		Description: `Checks, by really running a command in each, which sandbox backends work here:
bubblewrap installed, prlimit installed, the unprivileged user commands run as when
the conductor is root, user namespaces allowed, network isolation, the seccomp filter,
the limits, the memory limit (RLIMIT_DATA per process, or a delegated cgroup v2 folder's
memory.max per command, and why not), and whether the sandbox user can reach the worktree base and the scratch
folders; none (no isolation, only when asked for by name); docker (the docker CLI, the
engine at DOCKER_HOST and its version, rootless or not, Docker's seccomp profile, the
limits, and a real command in a job's container with its limits applied).

Exit status 0 when the backend runs will use (--sandbox, default auto = bwrap, else docker) works,
1 when it does not: a run demanding it would be refused.

Environment: WORKER_SANDBOX (backend, as for run-task), WORKER_WORKTREE_BASE,
CONDUCTOR_SANDBOX_UID (UID[:GID] commands run as when the conductor is root; default
65534), CONDUCTOR_SANDBOX_MAX_PROCS, CONDUCTOR_SANDBOX_MAX_MEMORY (bytes, or 512M, 2G;
default 1 GiB), CONDUCTOR_SANDBOX_CGROUP (a delegated cgroup v2 folder), CONDUCTOR_SANDBOX_RO_PATHS
(extra read-only folders, colon-separated), CONDUCTOR_BWRAP (path of bwrap); for docker: DOCKER_HOST,
CONDUCTOR_DOCKER_IMAGE (an operator's image), CONDUCTOR_DOCKER_MEMORY (default 2G),
CONDUCTOR_DOCKER_CPUS (default 2), CONDUCTOR_DOCKER_PIDS (default the process limit),
CONDUCTOR_DOCKER (path of the docker CLI). See docs/security.md.

When a forge is configured (GITEA_URL, --gitea-url or the config file's forge.url),
doctor also asks it, changing nothing, what pr open and push need: the URL is a
Gitea, the token (from $GITEA_TOKEN or --token-env) is accepted, the repository
(--owner/--repo, or the remote of the repository in -C) exists and is neither
archived nor empty, and the token may push to it (its scopes and the user's
permission). A failing forge check makes the exit status 1. See docs/forge.md.

With --config, doctor checks nothing: it prints every knob of the configuration,
its value and where it came from (a flag, an environment variable, the config
file's field, or the default), as conductor resolves it for every command: flags
win over the environment, the environment over the file, the file over defaults.
A malformed value stops every command with exit status 2 naming it.`,
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the report as one JSON object"},
			&cli.BoolFlag{Name: "config", Usage: "print every configuration knob, its value and its source, and exit"},
			&cli.StringFlag{Name: "sandbox",
				Usage: "the backend runs will use (auto, bwrap, none, docker; env " + sandbox.EnvBackend + "; default auto): exit 0 only if it works"},
			&cli.StringFlag{Name: "C", Usage: "local repository whose remote names the forge repository", Value: "."},
		}, forgeFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("doctor takes no arguments (got %q)", c.Args().First())
			}
			cfg := d.config(c)
			if c.Bool("config") {
				return printConfig(d.Stdout, cfg, c.Bool("json"))
			}
			opts := doctorOptions{JSON: c.Bool("json"), Backend: cmp.Or(cfg.Sandbox, sandbox.BackendAuto)}
			sbOpts := sandbox.OptionsFrom(cfg.SandboxLimits)
			// Where runs will put worktrees and scratch folders: the
			// sandbox uid must reach them.
			rep := sandbox.Probe(c.Context, sbOpts,
				sandbox.Folder{Name: "worktree base", Path: cfg.WorktreeBase},
				sandbox.Folder{Name: "scratch folder", Path: filepath.Join(cfg.DataRoot, "scratch")})
			opts.Runtimes = runtimeReports(cfg)
			warmFor := opts.Backend
			if warmFor == sandbox.BackendAuto {
				warmFor = rep.Default
			}
			warm := sandbox.ProbeWarm(sbOpts, warmFor)
			opts.Warm = &warm
			dr := probeDataRoot(cfg.DataRoot, "/sys")
			opts.DataRoot = &dr
			fs, err := d.forgeSettings(c)
			if err != nil {
				opts.Forge = &forge.Report{Configured: true, Checks: []forge.Check{{Name: "settings", Detail: err.Error()}}}
			} else if fs.URL != "" {
				local, _ := git.OpenRepo(c.String("C"))
				fr := forge.CheckForge(c.Context, fs, local, d.Getenv, d.Log)
				opts.Forge = &fr
			}
			return printDoctor(d.Stdout, rep, opts)
		},
	}
}

// printConfig prints the knobs: a table for people (KNOB VALUE SOURCE),
// one JSON object for machines.
func printConfig(w io.Writer, cfg conductor.Config, asJSON bool) error {
	knobs := cfg.Knobs()
	if asJSON {
		return writeJSON(w, map[string]any{"configFile": cfg.ConfigFile, "knobs": knobs})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KNOB\tVALUE\tSOURCE\tSET BY")
	for _, k := range knobs {
		v, src := k.Value, k.Source.String()
		if v == "" {
			v = "-"
		}
		if k.Source.About != "" {
			src += ": " + k.Source.About
		}
		by := k.Env
		if k.Field != "" {
			by += ", " + k.Field
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.Name, v, src, by)
	}
	return tw.Flush()
}

// doctorJSON is the --json document.
type doctorJSON struct {
	sandbox.Report
	Selected string              `json:"selected"` // the backend asked about (--sandbox)
	Works    bool                `json:"works"`    // whether it works: the exit status
	Runtimes []runtimeReport     `json:"runtimes"`
	Forge    *forge.Report       `json:"forge,omitempty"`
	Warm     *sandbox.WarmReport `json:"warmGoCache,omitempty"`
	DataRoot *dataRootReport     `json:"dataRoot,omitempty"`
}

// runtimeReport says whether one worker runtime can run here.
type runtimeReport struct {
	Name   string `json:"name"`
	Works  bool   `json:"works"`
	Detail string `json:"detail"`
}

// runtimeReports checks the worker runtimes: the built-in loop always
// works; pi when its install (CONDUCTOR_PI_DIR) and node are usable.
func runtimeReports(cfg conductor.Config) []runtimeReport {
	out := []runtimeReport{{Name: runtask.RuntimeBuiltin, Works: true, Detail: "conductor's own tool loop"}}
	pi := runtimeReport{Name: runtask.RuntimePi}
	if in, err := runtask.FindPi(cfg.PiDir); err != nil {
		pi.Detail = err.Error()
	} else {
		pi.Works, pi.Detail = true, fmt.Sprintf("pi %s in %s, node %s", in.Version, in.Prefix, in.Node)
	}
	return append(out, pi)
}

func printDoctor(w io.Writer, rep sandbox.Report, opts doctorOptions) error {
	sel, _ := rep.Backend(opts.Backend)
	if opts.JSON {
		if err := writeJSON(w, doctorJSON{Report: rep, Selected: opts.Backend, Works: sel.Works, Runtimes: opts.Runtimes, Forge: opts.Forge, Warm: opts.Warm, DataRoot: opts.DataRoot}); err != nil {
			return err
		}
	} else {
		def := rep.Default
		if def == "" {
			def = "none works: runs that need a sandbox are refused"
		}
		fmt.Fprintf(w, "sandbox backends (auto: %s)\n", def)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, b := range rep.Backends {
			state := "works"
			if !b.Works {
				state = "unavailable"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", b.Name, state, b.Detail)
			for _, c := range b.Checks {
				mark := "ok"
				if !c.OK {
					mark = "FAIL"
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\n", mark, c.Name, c.Detail)
			}
		}
		if len(opts.Runtimes) > 0 {
			fmt.Fprintf(tw, "worker runtimes\n")
			for _, r := range opts.Runtimes {
				state := "works"
				if !r.Works {
					state = "unavailable"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, state, r.Detail)
			}
		}
		if wr := opts.Warm; wr != nil {
			fmt.Fprintf(tw, "warm Go cache\t%s\t%s\n", wr.State(), wr.Detail)
		}
		if dr := opts.DataRoot; dr != nil {
			fmt.Fprintf(tw, "data root\t%s (%s)\t%s: %s\n", dr.State, dr.FS, dr.Path, dr.Detail)
		}
		if f := opts.Forge; f != nil {
			fmt.Fprintf(tw, "forge\t%s\t%s\n", map[bool]string{true: "works", false: "FAILS"}[f.Works], redactedURL(f.URL))
			for _, c := range f.Checks {
				mark := "ok"
				switch {
				case !c.OK:
					mark = "FAIL"
				case c.Skipped:
					mark = "skip"
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\n", mark, c.Name, c.Detail)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		verdict := "works"
		if !sel.Works {
			verdict = "does NOT work: " + strings.TrimSpace(sel.Detail)
		}
		fmt.Fprintf(w, "selected backend %s: %s\n", opts.Backend, verdict)
	}
	if !sel.Works || (opts.Forge != nil && !opts.Forge.Works) {
		return &silentError{code: exitError}
	}
	return nil
}

// redactedURL drops a password from a URL shown in the report.
func redactedURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return u.Redacted()
	}
	return raw
}
