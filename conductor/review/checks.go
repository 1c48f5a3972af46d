package review

import (
	"context"
	"fmt"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/policy"
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
	sb         sandbox.Sandbox    // every check and gate command runs in it
	refusals   []*refusal.Refusal // every coded refusal of the checks, in order

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

// paths applies the landing path rules (unsafe names, forbidden paths,
// policy changes, new root files, new top-level folders, symlinks followed
// through the base's links) against the base's tree.
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
	links, err := c.baseLinks()
	if err != nil {
		return Check{Name: "paths", Status: StatusFail, Summary: "cannot list the base's symlinks: " + err.Error(),
			Findings: []string{"paths: cannot list the base's symlinks: " + err.Error()}}
	}
	refusals := c.landing.CheckChangesOn(c.changes, policy.Tree{Exists: func(p string) bool { return top[p] }, Link: links})
	return c.refusalCheck("paths", refusals, fmt.Sprintf("%d path(s) obey the landing rules", len(c.changes)),
		fmt.Sprintf("%d path problem(s)", len(refusals)))
}

// hazards refuses every worktree hazard the host found (a nested
// repository, a special file, an unsafe name), with the hazard's code.
func (c *checker) hazards(hs []runrec.Hazard) Check {
	var refusals []*refusal.Refusal
	for _, h := range hs {
		what := h.Path
		if h.Detail != "" {
			what += " (" + h.Detail + ")"
		}
		what = escapeText(what)
		switch h.Code {
		case runrec.HazardNestedRepo:
			refusals = append(refusals, refusal.Newf("nested-repository",
				"remove the .git file or folder from the worktree (a worker never makes a repository; vendor code as plain files)",
				"%s: the worktree holds a nested repository", what))
		case runrec.HazardSpecialFile:
			refusals = append(refusals, refusal.Newf("special-file",
				"remove the FIFO, socket or device file; a change holds regular files, symlinks and folders only",
				"%s: the worktree holds a special file", what))
		case runrec.HazardUnsafeName:
			refusals = append(refusals, refusal.Newf("unsafe-path-name",
				"rename the file to a name of printable UTF-8 characters",
				"%s: the name has control characters or invalid UTF-8", what))
		default:
			refusals = append(refusals, refusal.Newf("special-file",
				"remove what the host refused from the worktree",
				"%s: the host found an unknown hazard %s", what, escapeText(h.Code)))
		}
	}
	return c.refusalCheck("hazards", refusals, "the worktree held no nested repository, special file or unsafe name",
		fmt.Sprintf("%d worktree hazard(s)", len(refusals)))
}

// escapeText shows control bytes and invalid UTF-8 as Go escapes, so
// worker-chosen text never reaches a terminal raw.
func escapeText(s string) string {
	if policy.UnsafeName(s) == "" {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// writes applies the run's role's write rules to every path of the diff,
// however the worker made the change (a write tool or a command).
func (c *checker) writes(role *policy.Role, roleErr error) Check {
	if roleErr != nil {
		return c.refusalCheck("writes", []*refusal.Refusal{refusal.Newf("role-write-denied",
			"review the run with the roles it ran with (--roles DIR)", "the run's role cannot be checked: %v", roleErr)}, "", "")
	}
	refusals := role.CheckChangeWrites(c.changes)
	return c.refusalCheck("writes", refusals, fmt.Sprintf("role %s may write every changed path", role.Name()),
		fmt.Sprintf("%d path(s) role %s may not write", len(refusals), role.Name()))
}

// refusalCheck turns refusals into a check (pass when there are none) and
// keeps them for the review's outcome.
func (c *checker) refusalCheck(name string, refusals []*refusal.Refusal, pass, fail string) Check {
	if len(refusals) == 0 {
		return Check{Name: name, Status: StatusPass, Summary: pass}
	}
	if fail == "" {
		fail = fmt.Sprintf("%d problem(s)", len(refusals))
	}
	ck := Check{Name: name, Status: StatusFail, Summary: fail}
	for _, r := range refusals {
		ck.Findings = append(ck.Findings, string(r.Code)+": "+r.Reason)
	}
	c.refusals = append(c.refusals, refusals...)
	return ck
}

// baseLinks lists the base's symlinks (one ls-tree) and returns a lookup of
// their targets, read on first use.
func (c *checker) baseLinks() (func(string) (string, bool), error) {
	out, err := c.g.Run(c.ctx, "ls-tree", "-r", "-z", "--full-tree", c.base)
	if err != nil {
		return nil, err
	}
	oids := map[string]string{}
	for _, rec := range strings.Split(string(out), "\x00") {
		meta, name, ok := strings.Cut(rec, "\t")
		if f := strings.Fields(meta); ok && len(f) == 3 && f[0] == "120000" {
			oids[name] = f[2]
		}
	}
	targets := map[string]string{}
	return func(p string) (string, bool) {
		oid, ok := oids[p]
		if !ok {
			return "", false
		}
		if t, ok := targets[p]; ok {
			return t, true
		}
		b, err := c.g.Run(c.ctx, "cat-file", "blob", oid)
		t := string(b)
		if err != nil {
			t = "/" // unreadable: taken as a link out of the repository (stricter)
		}
		targets[p] = t
		return t, true
	}, nil
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
			argv := checkArgv(sc.Argv, ch.Path)
			r, startErr := c.run(dir, argv, timeout)
			ran++
			output := string(r.Output)
			failed := r.ExitCode != 0 || r.TimedOut || startErr != nil || (sc.FailOnOutput && strings.TrimSpace(output) != "")
			if failed {
				ck.Status = StatusFail
				f := fmt.Sprintf("syntax: %s: %s", ch.Path, strings.Join(argv, " "))
				switch {
				case startErr != nil:
					f += ": " + startErr.Error()
				case r.TimedOut:
					f += fmt.Sprintf(": timed out after %s", timeout)
				case r.ExitCode != 0:
					f += fmt.Sprintf(": exit status %d", r.ExitCode)
				default:
					f += ": reported the file (not formatted)"
				}
				if tail := sandbox.LastLines(output, 8); tail != "" {
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

var pythonRE = regexp.MustCompile(`^python[0-9.]*$`)

// checkArgv is a syntax check's command for one file. The file is passed as
// "./path", so a name that starts with "-" is never read as an option
// (node --check --require=./evil.js would run evil.js), and a Python
// interpreter runs isolated (-I: no current folder or script folder on
// sys.path, no PYTHON* variables), so a folder json/ in the tree cannot
// stand in for python3 -m json.tool's module.
func checkArgv(check []string, file string) []string {
	argv := []string{check[0]}
	if pythonRE.MatchString(path.Base(check[0])) && !slices.Contains(check[1:], "-I") {
		argv = append(argv, "-I")
	}
	argv = append(argv, check[1:]...)
	return append(argv, "./"+file)
}

// gate runs every gate command on the scratch export.
func (c *checker) gate() []sandbox.GateResult {
	var out []sandbox.GateResult
	for _, gc := range c.landing.Gate() {
		failed := func(why string) sandbox.GateResult {
			return sandbox.GateResult{Name: gc.Name, Argv: gc.Argv, Status: sandbox.GateFail, ExitCode: -1, OutputTail: why}
		}
		dir, err := c.tree()
		if err != nil {
			out = append(out, failed("cannot export the commit for the gate: "+err.Error()))
			continue
		}
		r, err := c.run(dir, gc.Argv, gc.Timeout)
		if err != nil {
			gr := failed(err.Error())
			gr.Duration = r.Duration
			out = append(out, gr)
			continue
		}
		out = append(out, sandbox.GateResultOf(gc.Name, gc.Argv, r))
	}
	return out
}
