package policy

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var (
	roleNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	envNameRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	gateNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

// Bounds of limits.memoryBytes: below 64 MiB (sandbox.MinMemory) the
// sandbox itself cannot start reliably; above 64 GiB is a typo.
const (
	minMemoryBytes = 64 << 20
	maxMemoryBytes = 64 << 30
)

type checker struct {
	l   *loader
	src sources
}

func (c checker) bad(field, format string, args ...any) {
	c.l.add(Problem{File: c.src.fileFor(field), Field: field, Message: fmt.Sprintf(format, args...)})
}

func idx(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

// validateRole checks one role contract, part by part; every problem is
// added to the loader with its field path.
func (l *loader) validateRole(r *RoleContract, fileRole string, src sources) {
	c := checker{l: l, src: src}
	c.roleIdentity(r, fileRole)
	runs, writes := c.roleTools(r)
	c.roleCommands(r, runs)
	c.roleWrite(r, writes)
	c.roleEnv(r)
	c.roleRuntime(r)
	c.roleLimits(r)
}

// roleIdentity: the version, the name (as the file says), the harness and
// the system prompt.
func (c checker) roleIdentity(r *RoleContract, fileRole string) {
	if r.ContractVersion != 1 {
		c.bad("contractVersion", "want 1, got %d", r.ContractVersion)
	}
	switch {
	case r.Role == "":
		c.bad("role", "required: the role's name (%q, as the file name says)", fileRole)
	case r.Role != fileRole:
		c.bad("role", "%q does not match the file name %s.json", r.Role, fileRole)
	case !roleNameRE.MatchString(r.Role):
		c.bad("role", "%q: want lowercase letters, digits and dashes", r.Role)
	}
	switch r.Harness {
	case HarnessCode, HarnessDoc, HarnessReview:
	case "":
		c.bad("harness", "required: one of code, doc, review")
	default:
		c.bad("harness", "unknown harness %q (want code, doc or review)", r.Harness)
	}
	if strings.TrimSpace(r.SystemPrompt) == "" {
		c.bad("systemPrompt", "required: the role's system prompt")
	}
}

// roleTools: known, canonical, unique tools that fit the harness. It
// reports whether the role runs commands and whether it writes files.
func (c checker) roleTools(r *RoleContract) (runs, writes bool) {
	if len(r.Tools) == 0 {
		c.bad("tools", "required: at least one tool (%s)", strings.Join(toolNames, ", "))
	}
	seen := map[string]bool{}
	for i, t := range r.Tools {
		f := idx("tools", i)
		canon, ok := CanonicalTool(t)
		switch {
		case !ok:
			c.bad(f, "unknown tool %q (known: %s)", t, strings.Join(toolNames, ", "))
		case canon != t:
			c.bad(f, "use the canonical tool name %q, not %q", canon, t)
		case seen[t]:
			c.bad(f, "tool %q listed twice", t)
		}
		seen[t] = true
	}
	runs = slices.Contains(r.Tools, ToolRunCommand)
	writes = slices.Contains(r.Tools, ToolWriteFile) || slices.Contains(r.Tools, ToolEditFile)
	if r.Harness == HarnessDoc && runs {
		c.bad("tools", "a doc harness never runs commands: remove run_command or use harness code")
	}
	if r.Harness == HarnessReview && writes {
		c.bad("tools", "a review harness is read-only: remove write_file/edit_file")
	}
	return runs, writes
}

// roleCommands: the command allowlist (argv prefixes, no shells, no
// duplicates) and the denied arguments, present exactly when the role
// runs commands.
func (c checker) roleCommands(r *RoleContract, runs bool) {
	switch {
	case len(r.Commands) > 0 && !runs:
		c.bad("commands", "contradictory: commands are allowlisted but tools does not include run_command")
	case runs && len(r.Commands) == 0:
		c.bad("commands", "tools includes run_command but no command is allowlisted: add argv prefixes such as [\"go\",\"test\"]")
	}
	seenCmd := map[string]int{}
	for i, argv := range r.Commands {
		f := idx("commands", i)
		if len(argv) == 0 {
			c.bad(f, "empty argv: an allowlist entry is an argv prefix such as [\"go\",\"test\"]")
			continue
		}
		checkArgs(c, f, argv)
		if isShell(argv[0]) {
			c.bad(idx(f, 0), "%q runs arbitrary commands: allowlist the real commands instead", argv[0])
		}
		if strings.Contains(argv[0], " ") && len(argv) == 1 {
			c.bad(idx(f, 0), "%q looks like a shell string: split it into argv entries", argv[0])
		}
		key := strings.Join(argv, "\x00")
		if j, ok := seenCmd[key]; ok {
			c.bad(f, "duplicate of commands[%d]", j)
		}
		seenCmd[key] = i
	}
	if len(r.DeniedArgs) > 0 && !runs {
		c.bad("deniedArgs", "contradictory: deniedArgs without run_command in tools")
	}
	for i, a := range r.DeniedArgs {
		if strings.TrimSpace(a) == "" {
			c.bad(idx("deniedArgs", i), "empty argument")
		}
	}
}

// roleWrite: write rules exactly when the role writes, valid globs, and
// no pattern both allowed and denied.
func (c checker) roleWrite(r *RoleContract, writes bool) {
	switch {
	case r.Write != nil && len(r.Write.Allow) > 0 && !writes:
		c.bad("write.allow", "contradictory: write rules on a role whose tools include neither write_file nor edit_file")
	case writes && (r.Write == nil || len(r.Write.Allow) == 0):
		c.bad("write.allow", "the role has write tools but may write nothing: list the path patterns it may write")
	}
	if r.Write == nil {
		return
	}
	for i, g := range r.Write.Allow {
		if err := checkGlob(g); err != nil {
			c.bad(idx("write.allow", i), "%q: %v", g, err)
		}
	}
	for j, d := range r.Write.Deny {
		if err := checkGlob(d); err != nil {
			c.bad(idx("write.deny", j), "%q: %v", d, err)
		}
	}
	for i, g := range r.Write.Allow {
		for j, d := range r.Write.Deny {
			if patternCovers(d, g, true) {
				c.bad(idx("write.allow", i), "contradictory: %q is allowed and denied (write.deny[%d] %q covers it)", g, j, d)
			}
		}
	}
}

// roleEnv: variable names passed to commands; never a withheld one.
func (c checker) roleEnv(r *RoleContract) {
	seenEnv := map[string]bool{}
	for i, e := range r.Env {
		f := idx("env", i)
		switch {
		case !envNameRE.MatchString(e):
			c.bad(f, "%q is not an environment variable name", e)
		case Withheld(e):
			c.bad(f, "%q may hold a credential or run host code: a worker never receives it", e)
		case seenEnv[e]:
			c.bad(f, "%q listed twice", e)
		}
		seenEnv[e] = true
	}
}

// roleRuntime: the sandbox backend and the worker runtime, by name.
func (c checker) roleRuntime(r *RoleContract) {
	switch r.Sandbox {
	case "", SandboxBwrap, SandboxDocker, SandboxNone, SandboxAuto:
	default:
		c.bad("sandbox", "unknown sandbox %q (want bwrap, docker, none or auto)", r.Sandbox)
	}
	switch r.Runtime {
	case "", "builtin", "pi":
	default:
		c.bad("runtime", "unknown runtime %q (want builtin or pi)", r.Runtime)
	}
	switch r.PR {
	case "", "on-success", "never":
	default:
		c.bad("pr", "unknown value %q (want on-success or never)", r.PR)
	}
}

// roleLimits: no negative limit; memory within what a sandbox can run.
func (c checker) roleLimits(r *RoleContract) {
	for _, lim := range []struct {
		field string
		v     int64
	}{
		{"limits.promptBytes", int64(r.Limits.PromptBytes)},
		{"limits.maxSteps", int64(r.Limits.MaxSteps)},
		{"limits.tokenBudget", int64(r.Limits.TokenBudget)},
		{"limits.commandTimeoutSeconds", int64(r.Limits.CommandTimeoutSeconds)},
		{"limits.outputLimitBytes", int64(r.Limits.OutputLimitBytes)},
	} {
		if lim.v < 0 {
			c.bad(lim.field, "must not be negative")
		}
	}
	if m := r.Limits.MemoryBytes; m != 0 && (m < minMemoryBytes || m > maxMemoryBytes) {
		c.bad("limits.memoryBytes", "%d: want 0 (the sandbox's default) or between %d (64 MiB) and %d (64 GiB) bytes", m, minMemoryBytes, int64(maxMemoryBytes))
	}
}

func (l *loader) validatePolicy(p *PolicyContract, src sources) {
	c := checker{l: l, src: src}
	lr := &p.Landing
	if p.PolicyVersion != 1 {
		c.bad("policyVersion", "want 1, got %d", p.PolicyVersion)
	}
	c.recordRules(lr.Record)
	if len(lr.Targets) == 0 {
		c.bad("landing.targets", "required: the branches a landing may move, e.g. [\"main\"]")
	}
	for i, t := range lr.Targets {
		f := idx("landing.targets", i)
		if strings.HasPrefix(t, "refs/") {
			c.bad(f, "%q: give the branch name without refs/heads/", t)
		} else if err := checkGlob(t); err != nil {
			c.bad(f, "%q: %v", t, err)
		}
	}
	for i, g := range lr.ForbiddenPaths {
		f := idx("landing.forbiddenPaths", i)
		if err := checkGlob(g); err != nil {
			c.bad(f, "%q: %v", g, err)
			continue
		}
		if g == "**" || g == "**/*" {
			c.bad(f, "%q forbids every path: nothing could ever land", g)
		}
	}
	switch lr.RequiredOption {
	case "":
		c.bad("landing.requiredOption", "required: the decision option a landing needs (\"merge\")")
	case "reject":
		c.bad("landing.requiredOption", "contradictory: a rejected decision can never be what a landing needs")
	}
	if lr.RequiredVerdict != "approve" {
		c.bad("landing.requiredVerdict", "want \"approve\" (the only verdict a landing can rest on), got %q", lr.RequiredVerdict)
	}
	names := map[string]int{}
	for i, g := range lr.Gate {
		f := idx("landing.gate", i)
		switch {
		case g.Name == "":
			c.bad(f+".name", "required: a short name for the report")
		case !gateNameRE.MatchString(g.Name):
			c.bad(f+".name", "%q: want letters, digits, dots, dashes, underscores", g.Name)
		}
		if j, ok := names[g.Name]; ok && g.Name != "" {
			c.bad(f+".name", "%q is also the name of landing.gate[%d]", g.Name, j)
		}
		names[g.Name] = i
		checkArgv(c, f+".argv", g.Argv)
		if g.TimeoutSeconds <= 0 {
			c.bad(f+".timeoutSeconds", "required and positive: a gate without a timeout can hang a landing forever")
		}
	}
	sl := p.Review.SizeLimits
	if sl.MaxFiles < 0 {
		c.bad("review.sizeLimits.maxFiles", "must not be negative")
	}
	if sl.MaxChangedLines < 0 {
		c.bad("review.sizeLimits.maxChangedLines", "must not be negative")
	}
	if sl.MaxFileBytes < 0 {
		c.bad("review.sizeLimits.maxFileBytes", "must not be negative")
	}
	for i, s := range p.Review.SyntaxChecks {
		f := idx("review.syntaxChecks", i)
		if err := checkGlob(s.Glob); err != nil {
			c.bad(f+".glob", "%q: %v", s.Glob, err)
		}
		checkArgv(c, f+".argv", s.Argv)
		if s.TimeoutSeconds < 0 {
			c.bad(f+".timeoutSeconds", "must not be negative")
		}
	}
}

func checkArgv(c checker, field string, argv []string) {
	if len(argv) == 0 {
		c.bad(field, "required: a non-empty argv array")
		return
	}
	checkArgs(c, field, argv)
}

// checkArgs checks each argument of argv (at field): not blank, no NUL.
func checkArgs(c checker, field string, argv []string) {
	for j, a := range argv {
		if strings.TrimSpace(a) == "" {
			c.bad(idx(field, j), "empty argument")
		} else if strings.ContainsRune(a, 0) {
			c.bad(idx(field, j), "argument contains a NUL byte")
		}
	}
}

// crossCheck rejects rules that contradict across files: a role allowed to
// write a path that no landing may ever carry.
func (l *loader) crossCheck(p *Policy) {
	if p.landing == nil {
		return
	}
	for _, name := range p.RoleNames() {
		r := p.roles[name]
		if r.c.Write == nil {
			continue
		}
		for i, g := range r.c.Write.Allow {
			for _, f := range p.landing.r.ForbiddenPaths {
				if patternCovers(f, g, p.landing.r.CaseInsensitivePaths) {
					l.add(Problem{File: r.src.fileFor(idx("write.allow", i)), Field: idx("write.allow", i),
						Message: fmt.Sprintf("contradictory: %q is allowed but %s forbids landing %q", g, p.landing.source, f)})
				}
			}
		}
	}
}

// recordRules: a known mode and two distinct, clean relative paths that
// name files, never inside .git.
func (c checker) recordRules(r RecordRules) {
	switch r.Mode {
	case "", RecordFiles, RecordCommit:
	default:
		c.bad("landing.record.mode", "unknown mode %q (want files or commit)", r.Mode)
	}
	for _, f := range []struct{ field, p string }{{"landing.record.buildLog", r.BuildLog}, {"landing.record.current", r.Current}} {
		if f.p == "" {
			continue
		}
		first, _, _ := strings.Cut(f.p, "/")
		switch {
		case UnsafeName(f.p) != "":
			c.bad(f.field, "%q: %s", f.p, UnsafeName(f.p))
		case path.IsAbs(f.p) || path.Clean(f.p) != f.p || f.p == "." || strings.HasPrefix(f.p, "../") || f.p == "..":
			c.bad(f.field, "%q: want a clean path relative to the repository root (no leading /, no .., no trailing /)", f.p)
		case strings.EqualFold(first, ".git"):
			c.bad(f.field, "%q: a record file never lives in .git", f.p)
		}
	}
	if r.BuildLog != "" && r.BuildLog == r.Current {
		c.bad("landing.record.current", "%q is the build log too: name two files", r.Current)
	}
}
