package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/patch/git"
)

// versionInfo is what `conductor version` reports.
type versionInfo struct {
	Version  string `json:"version"`
	Go       string `json:"go"`
	Git      string `json:"git"`
	Platform string `json:"platform"`
	Revision string `json:"revision,omitempty"` // the build's VCS revision, when known
	Modified bool   `json:"modified,omitempty"` // built from a modified tree
	Module   string `json:"module,omitempty"`
}

func newVersionCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "version",
		Usage:     "print conductor's version, the Go and git versions and build info",
		UsageText: "conductor version [--json]",
		Description: "The same version as `conductor --version`, plus the Go toolchain it was built with, the\n" +
			"git it runs (or the error running it) and the build's VCS revision when the binary records it.",
		Flags: []cli.Flag{
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usagef("version takes no arguments, got %d", c.NArg())
			}
			v := versionInfo{Version: version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
			if gv, err := git.GitVersion(c.Context); err == nil {
				v.Git = gv
			} else {
				v.Git = "unavailable: " + err.Error()
			}
			if bi, ok := debug.ReadBuildInfo(); ok {
				v.Module = bi.Main.Path
				for _, s := range bi.Settings {
					switch s.Key {
					case "vcs.revision":
						v.Revision = s.Value
					case "vcs.modified":
						v.Modified = s.Value == "true"
					}
				}
			}
			if c.Bool("json") {
				return writeJSON(d.Stdout, v)
			}
			fmt.Fprintf(d.Stdout, "conductor version %s\n", v.Version)
			fmt.Fprintf(d.Stdout, "go        %s\n", v.Go)
			fmt.Fprintf(d.Stdout, "git       %s\n", v.Git)
			fmt.Fprintf(d.Stdout, "platform  %s\n", v.Platform)
			if v.Revision != "" {
				mod := ""
				if v.Modified {
					mod = " (modified)"
				}
				fmt.Fprintf(d.Stdout, "revision  %s%s\n", v.Revision, mod)
			}
			return nil
		},
	}
}
