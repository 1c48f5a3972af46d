package review

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/runtask/sandbox"
)

// checker runs the mechanical checks and the gate for one work commit.
type checker struct {
	ctx        context.Context
	g          patch.Git
	landing    *policy.Landing
	base       string
	commit     string
	changes    []policy.Change
	scratchDir string
	getenv     func(string) string
	sb         sandbox.Sandbox // every check and gate command runs in it

	export    string // the scratch export of the commit's tree, made on first use
	exportErr error
	removeFn  func()
}

func (c *checker) cleanup() {
	if c.removeFn != nil {
		c.removeFn()
	}
}

// tree returns the scratch export, making it on first use.
func (c *checker) tree() (string, error) {
	if c.export == "" && c.exportErr == nil {
		c.export, c.removeFn, c.exportErr = exportTree(c.ctx, c.g, c.commit, c.scratchDir)
	}
	return c.export, c.exportErr
}

// paths applies the landing path rules (forbidden paths, new root files, new
// top-level folders, symlinks) against the base's tree.
func (c *checker) paths() Check {
	top := map[string]bool{}
	out, err := c.g.Run(c.ctx, "ls-tree", "-z", "--name-only", c.base)
	if err != nil {
		return Check{Name: "paths", Status: StatusFail, Summary: "cannot list the base tree: " + err.Error(),
			Findings: []string{"paths: cannot list the base tree: " + err.Error()}}
	}
	for _, name := range strings.Split(string(out), "\x00") {
		if name != "" {
			top[name] = true
		}
	}
	refusals := c.landing.CheckChanges(c.changes, func(p string) bool { return top[p] })
	if len(refusals) == 0 {
		return Check{Name: "paths", Status: StatusPass,
			Summary: fmt.Sprintf("%d path(s) obey the landing rules", len(c.changes))}
	}
	ck := Check{Name: "paths", Status: StatusFail, Summary: fmt.Sprintf("%d path problem(s)", len(refusals))}
	for _, r := range refusals {
		ck.Findings = append(ck.Findings, r.Code+": "+r.Reason)
	}
	return ck
}

// size applies the size limits: files touched, lines changed, bytes of any
// one file after the change.
func (c *checker) size() Check {
	lim := c.landing.SizeLimits()
	var lines int64
	for _, ch := range c.changes {
		lines += ch.Added + ch.Deleted
	}
	ck := Check{Name: "size", Status: StatusPass,
		Summary: fmt.Sprintf("%d file(s), %d line(s) changed", len(c.changes), lines)}
	fail := func(f string, args ...any) {
		ck.Status = StatusFail
		ck.Findings = append(ck.Findings, "size: "+fmt.Sprintf(f, args...))
	}
	if lim.MaxFiles > 0 && len(c.changes) > lim.MaxFiles {
		fail("%d files changed, the limit is %d (review.sizeLimits.maxFiles)", len(c.changes), lim.MaxFiles)
	}
	if lim.MaxChangedLines > 0 && lines > int64(lim.MaxChangedLines) {
		fail("%d lines changed, the limit is %d (review.sizeLimits.maxChangedLines)", lines, lim.MaxChangedLines)
	}
	if lim.MaxFileBytes > 0 {
		sizes, err := c.blobSizes()
		if err != nil {
			fail("cannot read file sizes: %v", err)
		}
		for _, ch := range c.changes {
			if n, ok := sizes[ch.Path]; ok && ch.Status != 'D' && n > lim.MaxFileBytes {
				fail("%s is %d bytes, the limit is %d (review.sizeLimits.maxFileBytes)", ch.Path, n, lim.MaxFileBytes)
			}
		}
	}
	if ck.Status == StatusFail {
		ck.Summary = fmt.Sprintf("%d limit(s) exceeded", len(ck.Findings))
	}
	return ck
}

// blobSizes returns the size of every blob in the commit's tree, by path.
func (c *checker) blobSizes() (map[string]int64, error) {
	out, err := c.g.Run(c.ctx, "ls-tree", "-r", "-z", "-l", "--full-tree", c.commit)
	if err != nil {
		return nil, err
	}
	sizes := map[string]int64{}
	for _, rec := range strings.Split(string(out), "\x00") {
		meta, name, ok := strings.Cut(rec, "\t")
		if !ok {
			continue
		}
		f := strings.Fields(meta) // mode type id size
		if len(f) == 4 && f[1] == "blob" {
			if n, err := strconv.ParseInt(f[3], 10, 64); err == nil {
				sizes[name] = n
			}
		}
	}
	return sizes, nil
}

// syntax runs the per-file syntax checks on every added or modified regular
// file that a check's glob matches.
func (c *checker) syntax() Check {
	ck := Check{Name: "syntax", Status: StatusPass}
	ran, skipped := 0, map[string]bool{}
	for _, ch := range c.changes {
		if ch.Status == 'D' || ch.NewMode == "120000" || ch.NewMode == "160000" {
			continue
		}
		for _, sc := range c.landing.SyntaxChecksFor(ch.Path) {
			if _, err := exec.LookPath(sc.Argv[0]); err != nil {
				if sc.IfPresent {
					skipped[sc.Argv[0]] = true
					continue
				}
				ck.Status = StatusFail
				ck.Findings = append(ck.Findings, fmt.Sprintf("syntax: %s: %s is not installed", ch.Path, sc.Argv[0]))
				continue
			}
			dir, err := c.tree()
			if err != nil {
				ck.Status = StatusFail
				ck.Findings = append(ck.Findings, "syntax: cannot export the commit: "+err.Error())
				return ck
			}
			timeout := sc.Timeout
			if timeout <= 0 {
				timeout = time.Minute
			}
			argv := append(append([]string(nil), sc.Argv...), ch.Path)
			r := c.run(dir, argv, timeout)
			ran++
			failed := r.exitCode != 0 || r.timedOut || r.startErr != nil || (sc.FailOnOutput && strings.TrimSpace(r.output) != "")
			if failed {
				ck.Status = StatusFail
				f := fmt.Sprintf("syntax: %s: %s", ch.Path, strings.Join(argv, " "))
				switch {
				case r.startErr != nil:
					f += ": " + r.startErr.Error()
				case r.timedOut:
					f += fmt.Sprintf(": timed out after %s", timeout)
				case r.exitCode != 0:
					f += fmt.Sprintf(": exit status %d", r.exitCode)
				default:
					f += ": reported the file (not formatted)"
				}
				if tail := lastLines(r.output, 8); tail != "" {
					f += "\n" + tail
				}
				ck.Findings = append(ck.Findings, f)
			}
		}
	}
	var skips []string
	for k := range skipped {
		skips = append(skips, k)
	}
	switch {
	case ck.Status == StatusFail:
		ck.Summary = fmt.Sprintf("%d of %d file check(s) failed", len(ck.Findings), ran)
	case ran == 0 && len(skips) == 0:
		ck.Status, ck.Summary = StatusSkip, "no changed file has a syntax check"
	default:
		ck.Summary = fmt.Sprintf("%d file check(s) passed", ran)
	}
	if len(skips) > 0 {
		ck.Summary += " (skipped, not installed: " + strings.Join(sortStrings(skips), ", ") + ")"
	}
	return ck
}

// gate runs every gate command on the scratch export.
func (c *checker) gate() []GateResult {
	var out []GateResult
	for _, gc := range c.landing.Gate() {
		gr := GateResult{Name: gc.Name, Argv: gc.Argv, Status: StatusFail, ExitCode: -1}
		dir, err := c.tree()
		if err != nil {
			gr.OutputTail = "cannot export the commit for the gate: " + err.Error()
			out = append(out, gr)
			continue
		}
		r := c.run(dir, gc.Argv, gc.Timeout)
		gr.ExitCode, gr.TimedOut, gr.Duration = r.exitCode, r.timedOut, r.duration
		gr.OutputTail = tailBytes(r.output, 4096)
		if r.startErr != nil {
			gr.OutputTail = r.startErr.Error()
		}
		if r.exitCode == 0 && !r.timedOut && r.startErr == nil {
			gr.Status = StatusPass
		}
		out = append(out, gr)
	}
	return out
}
