package policy

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/refusal"
)

// Canonical tool names. Task files may use the short convention
// (read/write/edit/bash); contracts use these names only.
const (
	ToolReadFile   = "read_file"
	ToolWriteFile  = "write_file"
	ToolEditFile   = "edit_file"
	ToolGrep       = "grep"
	ToolListDir    = "list_dir"
	ToolRunCommand = "run_command"
)

// Tools lists every canonical tool name.
var toolNames = []string{ToolReadFile, ToolWriteFile, ToolEditFile, ToolGrep, ToolListDir, ToolRunCommand}

// Tools returns the canonical tool names.
func Tools() []string { return slices.Clone(toolNames) }

// CanonicalTool maps a tool name of either convention (read, write, edit,
// bash or the canonical names) to its canonical name.
func CanonicalTool(name string) (string, bool) {
	switch name {
	case "read":
		return ToolReadFile, true
	case "write":
		return ToolWriteFile, true
	case "edit":
		return ToolEditFile, true
	case "bash":
		return ToolRunCommand, true
	}
	if slices.Contains(toolNames, name) {
		return name, true
	}
	return "", false
}

// Sandbox backends a contract may name.
const (
	SandboxBwrap  = "bwrap"
	SandboxDocker = "docker"
	SandboxNone   = "none"
	SandboxAuto   = "auto"
)

// Harness kinds.
const (
	HarnessCode   = "code"
	HarnessDoc    = "doc"
	HarnessReview = "review"
)

// RoleContract is one role's contract as written in roles/<name>.json.
type RoleContract struct {
	Schema          string      `json:"$schema,omitempty"`
	ContractVersion int         `json:"contractVersion"`
	Role            string      `json:"role"`
	Description     string      `json:"description,omitempty"`
	Harness         string      `json:"harness"`
	SystemPrompt    string      `json:"systemPrompt"`
	Tools           []string    `json:"tools"`
	Commands        [][]string  `json:"commands,omitempty"`
	DeniedArgs      []string    `json:"deniedArgs,omitempty"`
	Write           *WriteRules `json:"write,omitempty"`
	Env             []string    `json:"env,omitempty"`
	Sandbox         string      `json:"sandbox"`
	// Runtime is who drives the role's sessions: "builtin" (default, the
	// conductor's tool loop) or "pi" (the pi agent); a task's own runtime
	// wins.
	Runtime string `json:"runtime,omitempty"`
	// PR is when a queued run of the role opens a draft PR: "on-success"
	// (the run succeeded and its review approved it) or "never" (default);
	// a task's own "pr" wins.
	PR     string `json:"pr,omitempty"`
	Limits Limits `json:"limits"`
}

// WriteRules say which worktree paths a role may write: a path must match an
// Allow pattern and no Deny pattern. Deny patterns match case-insensitively
// (a case-insensitive file system maps SRC/x onto src/x); Allow patterns
// match exactly.
type WriteRules struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny,omitempty"`
}

// Limits bound a session; 0 means the worker's default.
type Limits struct {
	MaxSteps              int   `json:"maxSteps,omitempty"`
	TokenBudget           int64 `json:"tokenBudget,omitempty"`
	CommandTimeoutSeconds int   `json:"commandTimeoutSeconds,omitempty"`
	OutputLimitBytes      int   `json:"outputLimitBytes,omitempty"`
	// MemoryBytes bounds the memory of each of the role's commands
	// (sandbox.Spec.MemoryLimit): it may lower the operator's limit
	// (CONDUCTOR_SANDBOX_MAX_MEMORY, default 1 GiB), never raise it; 0
	// means the operator's limit.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// PromptBytes bounds each file a run's system prompt is read from
	// (.cursor/agents/role-<name>.md and the brief); 0 means the worker's
	// default (256 KiB).
	PromptBytes int `json:"promptBytes,omitempty"`
}

// Role answers what one role may do. It implements runtask's RolePolicy.
type Role struct {
	c      RoleContract
	source string
	src    sources
	// landing is the policy's landing rules: a role never writes a path
	// that could not land.
	landing *Landing
}

// Contract returns a copy of the effective contract (after overrides).
func (r *Role) Contract() RoleContract {
	c := r.c
	c.Tools = slices.Clone(c.Tools)
	c.Commands = slices.Clone(c.Commands)
	c.DeniedArgs = slices.Clone(c.DeniedArgs)
	c.Env = slices.Clone(c.Env)
	if c.Write != nil {
		w := *c.Write
		w.Allow, w.Deny = slices.Clone(w.Allow), slices.Clone(w.Deny)
		c.Write = &w
	}
	return c
}

// Source names the file(s) the effective contract came from.
func (r *Role) Source() string { return r.source }

// Name is the role's name.
func (r *Role) Name() string { return r.c.Role }

// Harness is "code", "doc" or "review".
func (r *Role) Harness() string { return r.c.Harness }

// SystemPrompt is the role's prompt; the task's brief is appended by the worker.
func (r *Role) SystemPrompt() string { return r.c.SystemPrompt }

// AllowsTool reports whether the role may use a tool (either naming
// convention).
func (r *Role) AllowsTool(tool string) bool {
	name, ok := CanonicalTool(tool)
	return ok && slices.Contains(r.c.Tools, name)
}

// CheckCommand returns nil when argv starts with one of the role's allowlisted
// argv prefixes, element by element and exactly, and no later argument is one
// of the role's denied arguments or the program's own denied forms, in any
// spelling the program accepts (see argv.go). Otherwise it returns a
// *refusal.Refusal. These rules narrow what a worker asks for; the sandbox is the
// boundary.
func (r *Role) CheckCommand(argv []string) error {
	if !slices.Contains(r.c.Tools, ToolRunCommand) {
		return refusal.Newf("tool-not-allowed", "use the file tools, or a role whose contract allows run_command",
			"role %s may not run commands", r.c.Role)
	}
	if len(argv) == 0 || argv[0] == "" {
		return refusal.Newf("command-not-allowed", "pass the command as an argv array", "role %s: empty command", r.c.Role)
	}
	var match []string
	for _, prefix := range r.c.Commands {
		if len(prefix) <= len(argv) && slices.Equal(prefix, argv[:len(prefix)]) && len(prefix) > len(match) {
			match = prefix
		}
	}
	if match == nil {
		return &refusal.Refusal{
			Code:   "command-not-allowed",
			Reason: fmt.Sprintf("role %s may not run %s", r.c.Role, quoteArgv(argv)),
			Fix:    "use one of the allowlisted commands: " + r.commandList(),
		}
	}
	return r.checkArgs(match, argv[len(match):])
}

// deniedArg reports whether argument a is the denied flag d, alone or with
// "=value", in its one-dash or two-dash spelling (Go's flag package, and
// many tools, take both: -exec and --exec are the same flag).
func deniedArg(a, d string) bool {
	forms := []string{a}
	switch {
	case strings.HasPrefix(a, "--"):
		forms = append(forms, a[1:])
	case strings.HasPrefix(a, "-"):
		forms = append(forms, "-"+a)
	}
	for _, f := range forms {
		if f == d || strings.HasPrefix(f, d+"=") {
			return true
		}
	}
	return false
}

func (r *Role) commandList() string {
	if len(r.c.Commands) == 0 {
		return "(none)"
	}
	s := make([]string, len(r.c.Commands))
	for i, c := range r.c.Commands {
		s[i] = quoteArgv(c)
	}
	return strings.Join(s, ", ")
}

func quoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = fmt.Sprintf("%q", a)
	}
	return "[" + strings.Join(q, " ") + "]"
}

// CheckWrite returns nil when the role may write the worktree-relative path
// p: the role has a write tool, p is inside the worktree and not a .git
// entry, p matches an allow pattern and no deny pattern. Otherwise it returns
// a *refusal.Refusal.
func (r *Role) CheckWrite(p string) error {
	if !slices.Contains(r.c.Tools, ToolWriteFile) && !slices.Contains(r.c.Tools, ToolEditFile) {
		return refusal.Newf("write-not-allowed", "this role is read-only", "role %s may not write files", r.c.Role)
	}
	if why := UnsafeName(p); why != "" {
		return refusal.Newf("write-not-allowed", "use a name of printable UTF-8 characters", "role %s: the name %s %s", r.c.Role, quotePath(p), why)
	}
	clean, err := CleanPath(p)
	if err != nil {
		return refusal.Newf("write-not-allowed", "write a path inside the worktree", "role %s: %v", r.c.Role, err)
	}
	w := r.c.Write
	if w == nil {
		return refusal.Newf("write-not-allowed", "this role has no write rules", "role %s may not write %s", r.c.Role, clean)
	}
	if r.landing != nil {
		if f := r.landing.forbiddenBy(clean); f != "" {
			return refusal.Newf("write-not-allowed", "leave "+f+" alone (landing.forbiddenPaths in roles/conductor-policy.json)",
				"role %s may not write %s: no landing may carry %s", r.c.Role, clean, f)
		}
	}
	for _, d := range w.Deny {
		if matchGlob(d, clean, true) {
			return refusal.Newf("write-not-allowed", "leave "+d+" alone",
				"role %s may not write %s (denied by %q)", r.c.Role, clean, d)
		}
	}
	for _, a := range w.Allow {
		if matchGlob(a, clean, false) {
			return nil
		}
	}
	return refusal.Newf("write-not-allowed", "write only paths matching "+strings.Join(w.Allow, ", "),
		"role %s may not write %s", r.c.Role, clean)
}

// writeRule returns the write rule that refuses clean path p ("" when the
// role's write rules allow it): the deny pattern that matches, or the
// allow list none of whose patterns match.
func (r *Role) writeRule(clean string) string {
	if !slices.Contains(r.c.Tools, ToolWriteFile) && !slices.Contains(r.c.Tools, ToolEditFile) {
		return "no write tool (a read-only role)"
	}
	w := r.c.Write
	if w == nil {
		return "no write rules"
	}
	for _, d := range w.Deny {
		if matchGlob(d, clean, true) {
			return fmt.Sprintf("write.deny %q", d)
		}
	}
	for _, a := range w.Allow {
		if matchGlob(a, clean, false) {
			return ""
		}
	}
	return "write.allow " + quoteArgv(w.Allow)
}

// CheckChangeWrites applies the role's write rules to every path of a
// diff's changes, however the change was made (a write tool, or a command
// such as a Makefile recipe): the path of an add, a modification, a mode or
// type change and a deletion, and both names of a rename (a copy's source is
// only read). It returns a role-write-denied refusal per path the role may
// not write, naming the path and the rule; nil when every path is allowed.
func (r *Role) CheckChangeWrites(changes []Change) []*refusal.Refusal {
	var out []*refusal.Refusal
	check := func(raw string) {
		clean, err := CleanPath(raw)
		if err != nil {
			out = append(out, refusal.Newf("role-write-denied", "leave that path out of the change",
				"role %s may not write %s: %v", r.c.Role, quotePath(raw), err))
			return
		}
		if rule := r.writeRule(clean); rule != "" {
			out = append(out, refusal.Newf("role-write-denied",
				"revert the change to "+quotePath(clean)+" (however it was made: a command's writes count too), or give the task a role that may write it",
				"role %s may not write %s (%s); the diff changes it", r.c.Role, quotePath(clean), rule))
		}
	}
	for _, ch := range changes {
		if ch.Status == 'R' {
			check(ch.OldPath)
		}
		check(ch.Path)
	}
	return out
}

// MayWrite is CheckWrite as a boolean.
func (r *Role) MayWrite(p string) bool { return r.CheckWrite(p) == nil }

// EnvAllowlist is the extra environment variable names the role may pass to
// commands (beyond the worker's fixed base).
func (r *Role) EnvAllowlist() []string { return slices.Clone(r.c.Env) }

// SandboxBackend is "bwrap", "docker", "none" or "auto".
func (r *Role) SandboxBackend() string {
	if r.c.Sandbox == "" {
		return SandboxAuto
	}
	return r.c.Sandbox
}

// Runtime is the role's worker runtime ("" = the task's, else builtin).
func (r *Role) Runtime() string { return r.c.Runtime }

// MaxSteps is the step limit; 0 means the worker's default.
func (r *Role) MaxSteps() int { return r.c.Limits.MaxSteps }

// TokenBudget is the token budget; 0 means the worker's default.
func (r *Role) TokenBudget() int64 { return r.c.Limits.TokenBudget }

// CommandTimeout bounds one run_command; 0 means the worker's default.
func (r *Role) CommandTimeout() time.Duration {
	return time.Duration(r.c.Limits.CommandTimeoutSeconds) * time.Second
}

// OutputLimit caps tool output sent to the model, in bytes; 0 means default.
func (r *Role) OutputLimit() int { return r.c.Limits.OutputLimitBytes }

// MemoryLimit bounds the memory of one command, in bytes; 0 means the
// sandbox's default.
func (r *Role) MemoryLimit() int64 { return r.c.Limits.MemoryBytes }

// PR is when a queued run of the role opens a draft PR: "on-success",
// "never" or "" (never).
func (r *Role) PR() string { return r.c.PR }

// PromptLimit bounds each prompt file in bytes; 0 means the worker's default.
func (r *Role) PromptLimit() int { return r.c.Limits.PromptBytes }

// Commands returns the allowlisted argv prefixes.
func (r *Role) Commands() [][]string {
	out := make([][]string, len(r.c.Commands))
	for i, c := range r.c.Commands {
		out[i] = slices.Clone(c)
	}
	return out
}

// shells are programs that turn any argument into any command; an allowlist
// prefix that is one of them would allow everything.
var shells = []string{"sh", "bash", "dash", "zsh", "ksh", "fish", "csh", "tcsh", "busybox",
	"env", "sudo", "su", "doas", "xargs", "nohup", "timeout", "exec", "eval", "nice", "setsid", "time"}

func isShell(argv0 string) bool { return slices.Contains(shells, path.Base(argv0)) }
