package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
)

// extractOptions are the parsed flags of `conductor extract`.
type extractOptions struct {
	Repo     string
	Worktree string
	Base     string
	Output   string
	JSON     bool
}

func newExtractCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "extract",
		Usage:     "print one canonical diff of a worktree against a base, and its patch-id",
		UsageText: "conductor extract --repo DIR --worktree DIR --base REV [-o FILE] [--json]",
		Description: `Writes ONE diff of everything the worktree holds against the base commit:
modified, added (untracked and not ignored), deleted, binary (full content),
executable-bit and symlink changes, in conductor's canonical form (full index,
no renames, no external diff or textconv, 3 lines of context, --binary, a/ b/
prefixes; see docs/patch.md). The diff goes to stdout, or atomically to FILE
with -o; the binding patch-id (git patch-id --verbatim) goes to stderr.
--json prints {"patchId", "files", "tree", "baseTree", "bytes", "diff"} instead
("diffBase64" when the diff is not UTF-8; no diff with -o).

The worktree must be the main worktree of --repo or one of its linked
worktrees. It is read through a temporary index in a neutral git dir: the
worker's index, hooks, config, attributes and .git are never used, and nothing
in them can run. On error nothing is written.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "repo", Usage: "the repository (its folder or git dir)", Required: true},
			&cli.StringFlag{Name: "worktree", Usage: "the worktree to extract", Required: true},
			&cli.StringFlag{Name: "base", Usage: "the commit the diff is taken against", Required: true},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the diff to `FILE` (atomically) instead of stdout"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object with the patch-id, files, tree, size and diff"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("extract: unexpected argument %q", c.Args().First())
			}
			return runExtract(c.Context, d, extractOptions{
				Repo:     c.String("repo"),
				Worktree: c.String("worktree"),
				Base:     c.String("base"),
				Output:   c.String("output"),
				JSON:     c.Bool("json"),
			})
		},
	}
}

// extractJSON is the --json output.
type extractJSON struct {
	patch.Extracted
	Base       string  `json:"base"`
	Output     string  `json:"output,omitempty"`
	Diff       *string `json:"diff,omitempty"`
	DiffBase64 *string `json:"diffBase64,omitempty"`
}

func runExtract(ctx context.Context, d *deps, opts extractOptions) error {
	repo, err := git.OpenRepo(opts.Repo)
	if err != nil {
		return fmt.Errorf("extract: --repo: %w", err)
	}
	wt, err := patch.WorktreeRepo(repo, opts.Worktree)
	if err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	var ex patch.Extracted
	extract := func(w io.Writer) (err error) {
		ex, err = patch.Extract(ctx, patch.ExtractOptions{Repo: wt, WorkTree: wt.WorkTree, Base: opts.Base, Out: w})
		return err
	}
	if opts.Output != "" {
		// -o FILE is published atomically (temp beside it, fsync, rename)
		// and only when everything worked.
		if dir := filepath.Dir(opts.Output); !isDir(dir) {
			return fmt.Errorf("extract: -o %s: folder %s does not exist", opts.Output, dir)
		}
		var exErr error
		err := runrec.WriteAtomic(opts.Output, 0o644, func(w io.Writer) error { exErr = extract(w); return exErr })
		if exErr != nil {
			return exErr // the extraction's own error (nothing was written)
		}
		if err != nil {
			return fmt.Errorf("extract: -o %s: %w", opts.Output, err)
		}
	}
	// To stdout the diff is spooled first, so a failure prints nothing.
	var tmp *os.File
	if opts.Output == "" {
		var err error
		if tmp, err = os.CreateTemp("", ".conductor-extract-*.diff"); err != nil {
			return fmt.Errorf("extract: %w", err)
		}
		defer func() { tmp.Close(); os.Remove(tmp.Name()) }()
		if err := extract(tmp); err != nil {
			return err
		}
	}
	if opts.JSON {
		out := extractJSON{Extracted: ex, Base: opts.Base, Output: opts.Output}
		if out.Files == nil {
			out.Files = []string{}
		}
		if opts.Output == "" {
			b, err := os.ReadFile(tmp.Name())
			if err != nil {
				return fmt.Errorf("extract: %w", err)
			}
			if utf8.Valid(b) {
				s := string(b)
				out.Diff = &s
			} else {
				s := base64.StdEncoding.EncodeToString(b)
				out.DiffBase64 = &s
			}
		}
		return writeJSON(d.Stdout, out)
	}
	if opts.Output == "" {
		if _, err := tmp.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("extract: %w", err)
		}
		if _, err := io.Copy(d.raw(), tmp); err != nil { // the diff's exact bytes
			return fmt.Errorf("extract: write diff: %w", err)
		}
	}
	if ex.PatchID == "" {
		fmt.Fprintf(d.Stderr, "extract: no changes against %s\n", opts.Base)
		return nil
	}
	fmt.Fprintln(d.Stderr, ex.PatchID)
	return nil
}
