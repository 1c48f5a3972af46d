package main

import (
	"bytes"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/patch"
)

// patchIDOptions are the parsed flags of `conductor patch-id`.
type patchIDOptions struct {
	Mode    patch.Mode
	Lenient bool
}

func newPatchIDCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "patch-id",
		Usage:     "compute git-compatible patch-ids of diffs read from stdin",
		UsageText: "conductor patch-id [--stable | --unstable | --verbatim] [--lenient] < DIFF",
		Description: `Reads patches (git diff, git show, git log -p, git format-patch output) on
standard input and prints one "<patch-id> <commit-id>" line per patch, byte for
byte what "git patch-id" (git 2.39) prints in the same mode. Computed in Go;
git is not run. --unstable is the default, as in git without configuration;
--verbatim is stable and hashes whitespace (it is the id conductor binds
reviews to landings with). Repository configuration (patchid.*) is not read.

Unlike git, input that is not empty but holds no patch, and "GIT binary patch"
hunks that are malformed or truncated, are errors (exit 1) naming the line;
--lenient accepts what git accepts.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "stable", Usage: "sum of per-file hashes: file order does not matter; whitespace ignored"},
			&cli.BoolFlag{Name: "unstable", Usage: "one hash over the whole patch (the default)"},
			&cli.BoolFlag{Name: "verbatim", Usage: "stable, and whitespace is hashed as given"},
			&cli.BoolFlag{Name: "lenient", Usage: "accept what git accepts: no check of binary hunks, no error on input without a patch"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("patch-id: unexpected argument %q (the diff is read from stdin)", c.Args().First())
			}
			var opts patchIDOptions
			var set []string
			for _, m := range []struct {
				flag string
				mode patch.Mode
			}{{"unstable", patch.Unstable}, {"stable", patch.Stable}, {"verbatim", patch.Verbatim}} {
				if c.Bool(m.flag) {
					set = append(set, "--"+m.flag)
					opts.Mode = m.mode
				}
			}
			if len(set) > 1 {
				return usagef("patch-id: options %s and %s cannot be used together", set[0], set[1])
			}
			opts.Lenient = c.Bool("lenient")
			return runPatchID(d, opts)
		},
	}
}

// runPatchID computes the ids. The lines (82 bytes per patch) are held
// until the input has been read whole, so bad input writes nothing.
func runPatchID(d *deps, opts patchIDOptions) error {
	var out bytes.Buffer
	if err := patch.WritePatchIDsTo(&out, d.Stdin, opts.Mode, patch.Options{Strict: !opts.Lenient, Name: "stdin"}); err != nil {
		return err
	}
	_, err := d.raw().Write(out.Bytes())
	return err
}
