package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/review"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
)

// newCacheCmd is `conductor cache`: the warm Go caches gates start from
// (conductor/sandbox/cache.go, docs/security.md "Warm caches").
func newCacheCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "cache",
		Usage: "the warm Go build and module caches review checks, landing gates and worker commands start from",
		Subcommands: []*cli.Command{{
			Name:      "warm",
			Usage:     "compile (never run) a repository's target tip into a new generation of the warm cache and make it current",
			ArgsUsage: "REPO",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "ref", Value: "HEAD", Usage: "the trusted commit to warm from: the landing target (a branch, a tag or a commit)"},
				&cli.BoolFlag{Name: "json", Usage: "print the result as one JSON object"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usagef("cache warm takes one argument, the repository (got %d)", c.NArg())
				}
				return cacheWarm(c, d, c.Args().First(), c.String("ref"))
			},
		}},
	}
}

// cacheWarm warms the cache from REPO at ref: the tree exported from the
// object store under the data root's scratch folder, compiled in the
// sandbox by sandbox.WarmGo (no code of the tree runs).
func cacheWarm(c *cli.Context, d *deps, repo, ref string) error {
	o := sandbox.OptionsFrom(d.config(c).SandboxLimits)
	g, err := git.OpenRepo(repo)
	if err != nil {
		return usagef("cache warm: %v", err)
	}
	out, err := g.Run(c.Context, "rev-parse", "--verify", "--end-of-options", ref+"^{commit}")
	if err != nil {
		return usagef("cache warm: %s in %s is not a commit", ref, repo)
	}
	commit := strings.TrimSpace(string(out))
	res, err := warmFrom(c, d, o, g, repo, commit)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return writeJSON(d.Stdout, res)
	}
	// Each warning was already printed as it happened (WarmOptions.Log).
	_, err = fmt.Fprintf(d.Stdout, "%s\t%d files\t%.1f MB\t%.1fs\n", res.Dir, res.Files, float64(res.Bytes)/1e6, res.Duration.Seconds())
	return err
}

// warmFrom exports commit of g and warms the cache from it.
func warmFrom(c *cli.Context, d *deps, o sandbox.Options, g patch.Git, repo, commit string) (sandbox.WarmResult, error) {
	tree, remove, err := review.ExportTree(c.Context, g, commit, d.config(c).ScratchDir())
	if err != nil {
		return sandbox.WarmResult{}, fmt.Errorf("cache warm: export %s: %w", commit, err)
	}
	defer remove()
	res, err := sandbox.WarmGo(c.Context, sandbox.WarmOptions{
		Tree: tree, Getenv: d.Getenv, Sandbox: o, Log: d.Stderr, Label: repo + "@" + commit,
	})
	if err != nil {
		return res, err
	}
	return res, nil
}

// refreshWarmCache starts `conductor cache warm REPO --ref COMMIT` in the
// background after a landing moved the target, when this host uses a warm
// cache (it has a current generation: an operator warmed it once). The
// warming compiles the landed tip, which the next gates then find warm; it
// runs detached from the landing (its own session, its output in the data
// root's logs/cache-warm.log) and outside any worker's reach.
func refreshWarmCache(c *cli.Context, d *deps, repo, commit string) {
	cfg := d.config(c)
	o := sandbox.OptionsFrom(cfg.SandboxLimits)
	if o.GoCache == "" || repo == "" {
		return
	}
	if _, err := os.Lstat(filepath.Join(o.GoCache, "current")); err != nil {
		return
	}
	exe, err := os.Executable()
	if err != nil || strings.HasSuffix(exe, ".test") {
		return // a test binary is not the conductor
	}
	logDir := filepath.Join(cfg.DataRoot, "logs")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return
	}
	logf, err := os.OpenFile(filepath.Join(logDir, "cache-warm.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	defer logf.Close()
	// The warming resolves the same configuration: the data root and the
	// file this landing read (the goCache, bwrap and uid settings in it).
	args := []string{"--data-root", cfg.DataRoot}
	if cfg.ConfigFile != "" {
		args = append(args, "--config", cfg.ConfigFile)
	}
	cmd := exec.Command(exe, append(args, "cache", "warm", repo, "--ref", commit)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(d.Stderr, "conductor: refresh the warm Go cache: %v\n", err)
		return
	}
	fmt.Fprintf(d.Stderr, "conductor: warming the Go cache from %s in the background (pid %d, log %s)\n", patch.Short(commit), cmd.Process.Pid, logf.Name())
	_ = cmd.Process.Release()
}
