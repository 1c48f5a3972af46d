package policy

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
)

// PolicyContract is roles/conductor-policy.json: the landing rules and
// review's mechanical checks.
type PolicyContract struct {
	Schema        string       `json:"$schema,omitempty"`
	PolicyVersion int          `json:"policyVersion"`
	Landing       LandingRules `json:"landing"`
	Review        ReviewRules  `json:"review"`
}

// LandingRules is the "landing" object of conductor-policy.json.
type LandingRules struct {
	// Targets are the branches a landing may move (short names or globs
	// such as "release/*").
	Targets []string `json:"targets"`
	// ForbiddenPaths no landing may add, change, delete or rename into or
	// out of.
	ForbiddenPaths []string `json:"forbiddenPaths"`
	// CaseInsensitivePaths matches ForbiddenPaths ignoring case, so SRC/x
	// is refused like src/x (as a case-insensitive checkout would write it).
	CaseInsensitivePaths bool `json:"caseInsensitivePaths"`
	// NoNewRootFiles refuses a file added at the repository root.
	NoNewRootFiles bool `json:"noNewRootFiles"`
	// NoNewTopLevelDirs refuses a path whose first segment does not exist
	// at the target.
	NoNewTopLevelDirs bool `json:"noNewTopLevelDirs"`
	// RequiredOption is the decision option a landing needs ("merge").
	RequiredOption string `json:"requiredOption"`
	// RequiredVerdict is the verdict a landing needs ("approve").
	RequiredVerdict string `json:"requiredVerdict"`
	// Gate lists the commands that must all pass on the tree being landed.
	Gate []GateRule `json:"gate"`
}

// GateRule is one gate command as written in the contract.
type GateRule struct {
	Name           string   `json:"name"`
	Argv           []string `json:"argv"`
	TimeoutSeconds int      `json:"timeoutSeconds"`
	NeedsFiles     bool     `json:"needsFiles"`
}

// ReviewRules is the "review" object of conductor-policy.json.
type ReviewRules struct {
	SizeLimits   SizeLimits        `json:"sizeLimits"`
	SyntaxChecks []SyntaxCheckRule `json:"syntaxChecks"`
}

// SizeLimits bound one reviewed diff; 0 means no limit.
type SizeLimits struct {
	MaxFiles        int   `json:"maxFiles,omitempty"`        // files touched
	MaxChangedLines int   `json:"maxChangedLines,omitempty"` // added + deleted lines
	MaxFileBytes    int64 `json:"maxFileBytes,omitempty"`    // size of any one file after the change
}

// SyntaxCheckRule is one per-file syntax check as written in the contract.
type SyntaxCheckRule struct {
	Glob           string   `json:"glob"`
	Argv           []string `json:"argv"`
	IfPresent      bool     `json:"ifPresent,omitempty"`
	TimeoutSeconds int      `json:"timeoutSeconds,omitempty"`
	// FailOnOutput makes any standard output a failure (gofmt -l prints
	// the names of badly formatted files and exits 0).
	FailOnOutput bool `json:"failOnOutput,omitempty"`
}

// GateCommand is one gate command as landing and review run it.
type GateCommand struct {
	Name       string
	Argv       []string
	Timeout    time.Duration
	NeedsFiles bool // needs a checkout of the tree (else a temp index is enough)
}

// SyntaxCheck is one per-file check: Argv with the file's path appended,
// run in a checkout of the reviewed commit, for every changed (added,
// modified, renamed-to) file matching Glob. IfPresent skips the check when
// Argv[0] is not installed.
type SyntaxCheck struct {
	Glob         string
	Argv         []string
	IfPresent    bool
	Timeout      time.Duration
	FailOnOutput bool
}

// Landing answers what a landing may do.
type Landing struct {
	r      LandingRules
	rv     ReviewRules
	source string
}

// Rules returns a copy of the effective rules.
func (l *Landing) Rules() PolicyContract {
	return PolicyContract{PolicyVersion: 1, Landing: l.r, Review: l.rv}
}

// Source names the file(s) the rules came from.
func (l *Landing) Source() string { return l.source }

// RequiredOption is the decision option a landing needs ("merge").
func (l *Landing) RequiredOption() string { return l.r.RequiredOption }

// RequiredVerdict is the verdict a landing needs ("approve").
func (l *Landing) RequiredVerdict() string { return l.r.RequiredVerdict }

// Gate returns the gate commands.
func (l *Landing) Gate() []GateCommand {
	out := make([]GateCommand, len(l.r.Gate))
	for i, g := range l.r.Gate {
		out[i] = GateCommand{
			Name:       g.Name,
			Argv:       slices.Clone(g.Argv),
			Timeout:    time.Duration(g.TimeoutSeconds) * time.Second,
			NeedsFiles: g.NeedsFiles,
		}
	}
	return out
}

// SizeLimits returns review's size limits.
func (l *Landing) SizeLimits() SizeLimits { return l.rv.SizeLimits }

// SyntaxChecks returns review's per-file syntax checks.
func (l *Landing) SyntaxChecks() []SyntaxCheck {
	out := make([]SyntaxCheck, len(l.rv.SyntaxChecks))
	for i, s := range l.rv.SyntaxChecks {
		out[i] = SyntaxCheck{
			Glob:         s.Glob,
			Argv:         slices.Clone(s.Argv),
			IfPresent:    s.IfPresent,
			Timeout:      time.Duration(s.TimeoutSeconds) * time.Second,
			FailOnOutput: s.FailOnOutput,
		}
	}
	return out
}

// SyntaxChecksFor returns the checks that apply to a path.
func (l *Landing) SyntaxChecksFor(p string) []SyntaxCheck {
	var out []SyntaxCheck
	for _, s := range l.SyntaxChecks() {
		if matchGlob(s.Glob, p, false) {
			out = append(out, s)
		}
	}
	return out
}

// ForbiddenPaths returns the forbidden path patterns.
func (l *Landing) ForbiddenPaths() []string { return slices.Clone(l.r.ForbiddenPaths) }

// TargetAllowed returns nil when a landing may move the branch target
// ("main" or "refs/heads/main"), else a *Refusal with code
// target-not-allowed.
func (l *Landing) TargetAllowed(target string) error {
	name := strings.TrimPrefix(target, "refs/heads/")
	if name != "" && !strings.HasPrefix(name, "refs/") {
		for _, t := range l.r.Targets {
			if matchGlob(t, name, false) {
				return nil
			}
		}
	}
	return Refusef("target-not-allowed", "land on one of: "+strings.Join(l.r.Targets, ", ")+
		" (landing.targets in roles/conductor-policy.json)", "target %q is not an allowed landing target", target)
}

// IsForbidden reports whether a path falls under a forbidden pattern, after
// normalisation. A path that cannot be normalised (absolute, escaping, a
// .git entry) is forbidden.
func (l *Landing) IsForbidden(p string) bool {
	c, err := CleanPath(p)
	if err != nil {
		return true
	}
	return l.forbiddenBy(c) != ""
}

func (l *Landing) forbiddenBy(clean string) string {
	for _, f := range l.r.ForbiddenPaths {
		if matchGlob(f, clean, l.r.CaseInsensitivePaths) {
			return f
		}
	}
	return ""
}

// CheckChanges applies the landing path rules to a diff's changes and returns
// every refusal (nil when the changes may land). existsAtTarget reports
// whether a path (a file or a folder) exists at the landing target; nil means
// "nothing exists" (every added root file and top-level folder is new).
//
// Rules: every path (both sides of a rename or copy) is normalised first; a
// path that does not normalise, or that falls under a forbidden pattern
// (case-insensitively when caseInsensitivePaths is set), is forbidden-path —
// whatever the change: added, modified, deleted, renamed into or out of. A
// symlink whose target resolves into a forbidden path or out of the
// repository is forbidden-path. An added (or renamed-to) path at the root
// that does not exist at the target is adds-root-file; one whose first
// segment does not exist at the target is adds-top-level-dir.
func (l *Landing) CheckChanges(changes []Change, existsAtTarget func(path string) bool) []*Refusal {
	if existsAtTarget == nil {
		existsAtTarget = func(string) bool { return false }
	}
	var out []*Refusal
	seen := map[string]bool{}
	add := func(r *Refusal) {
		key := r.Code + "\x00" + r.Reason
		if !seen[key] {
			seen[key] = true
			out = append(out, r)
		}
	}
	forbidden := func(raw, what string) (string, bool) {
		c, err := CleanPath(raw)
		if err != nil {
			add(Refusef("forbidden-path", "leave that path out of the change", "%s: %v", what, err))
			return "", false
		}
		if f := l.forbiddenBy(c); f != "" {
			add(Refusef("forbidden-path", "revert the change to "+c+"; "+f+" is forbidden by landing.forbiddenPaths",
				"%s %s is under forbidden path %s", what, quotePath(c), f))
			return c, false
		}
		return c, true
	}
	for _, ch := range changes {
		var newPath string
		switch ch.Status {
		case 'D':
			forbidden(ch.Path, "deleting")
			continue
		case 'R', 'C':
			verb := "renaming from"
			if ch.Status == 'C' {
				verb = "copying from"
			}
			if ch.Status == 'R' {
				forbidden(ch.OldPath, verb)
			}
			p, ok := forbidden(ch.Path, "renaming into")
			if !ok {
				continue
			}
			newPath = p
		case 'A':
			p, ok := forbidden(ch.Path, "adding")
			if !ok {
				continue
			}
			newPath = p
		default: // 'M', 'T'
			p, ok := forbidden(ch.Path, "changing")
			if !ok {
				continue
			}
			if ch.NewMode == "120000" {
				l.checkLink(p, ch.LinkTarget, add)
			}
			continue
		}
		if ch.NewMode == "120000" {
			l.checkLink(newPath, ch.LinkTarget, add)
		}
		first, _, nested := strings.Cut(newPath, "/")
		switch {
		case !nested && l.r.NoNewRootFiles && !existsAtTarget(newPath):
			add(Refusef("adds-root-file", "put the file in an existing folder",
				"the change adds %s at the repository root", quotePath(newPath)))
		case nested && l.r.NoNewTopLevelDirs && !existsAtTarget(first):
			add(Refusef("adds-top-level-dir", "put "+quotePath(newPath)+" under an existing top-level folder",
				"the change adds a new top-level folder %s/", quotePath(first)))
		}
	}
	return out
}

// checkLink refuses a symlink at p whose target leaves the repository or
// points into a forbidden path.
func (l *Landing) checkLink(p, target string, add func(*Refusal)) {
	if target == "" {
		return
	}
	if path.IsAbs(target) {
		add(Refusef("forbidden-path", "replace the symlink with a regular file",
			"symlink %s points to the absolute path %s", quotePath(p), quotePath(target)))
		return
	}
	resolved := path.Join(path.Dir(p), target)
	c, err := CleanPath(resolved)
	if err != nil {
		add(Refusef("forbidden-path", "replace the symlink with a regular file",
			"symlink %s points outside the repository (%s)", quotePath(p), quotePath(target)))
		return
	}
	if f := l.forbiddenBy(c); f != "" {
		add(Refusef("forbidden-path", "replace the symlink; "+f+" is forbidden by landing.forbiddenPaths",
			"symlink %s points into forbidden path %s (%s)", quotePath(p), f, c))
	}
}

func quotePath(p string) string {
	for _, r := range p {
		if r < 0x20 || r == 0x7f || r == '"' || r == '\\' || r == ' ' {
			return fmt.Sprintf("%q", p)
		}
	}
	return p
}
