package policy

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/refusal"
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
	// PolicyChanges lets a landing change roles/** (the role contracts and
	// this file). Off by default: a worker's change never loosens the rules
	// it is checked by; a person sets it, in the policy the target already
	// has, for the one landing that needs it.
	PolicyChanges bool `json:"policyChanges,omitempty"`
	// NoNewTopLevelDirs refuses a path whose first segment does not exist
	// at the target.
	NoNewTopLevelDirs bool `json:"noNewTopLevelDirs"`
	// RequiredOption is the decision option a landing needs ("merge").
	RequiredOption string `json:"requiredOption"`
	// RequiredVerdict is the verdict a landing needs ("approve").
	RequiredVerdict string `json:"requiredVerdict"`
	// Gate lists the commands that must all pass on the tree being landed.
	Gate []GateRule `json:"gate"`
	// Record says where the Record step (conductor record, land --record)
	// writes the build log and the status file.
	Record RecordRules `json:"record"`
}

// Record modes.
const (
	// RecordFiles keeps the build log and the status file outside the
	// repository, under the data root (nothing in the repository changes).
	RecordFiles = "files"
	// RecordCommit writes them as one local commit on the target that
	// changes those two files only.
	RecordCommit = "commit"
)

// RecordRules is the "landing.record" object of conductor-policy.json.
type RecordRules struct {
	Mode     string `json:"mode"`     // RecordFiles or RecordCommit
	BuildLog string `json:"buildLog"` // the build log's path (in the repository, or under the record folder)
	Current  string `json:"current"`  // the status file's path
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

// Record is where the Record step writes (defaults filled in: mode files,
// BUILD-LOG.md, CURRENT.md).
func (l *Landing) Record() RecordRules {
	r := l.r.Record
	if r.Mode == "" {
		r.Mode = RecordFiles
	}
	if r.BuildLog == "" {
		r.BuildLog = "BUILD-LOG.md"
	}
	if r.Current == "" {
		r.Current = "CURRENT.md"
	}
	return r
}

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
// ("main" or "refs/heads/main"), else a *refusal.Refusal with code
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
	return refusal.Newf("target-not-allowed", "land on one of: "+strings.Join(l.r.Targets, ", ")+
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

// Tree is what the landing path rules know of the tree a change lands on
// (the target's tip, or the run's base for review).
type Tree struct {
	// Exists reports whether a path (a file or a folder) exists; nil means
	// nothing exists (every added root file and top-level folder is new).
	Exists func(path string) bool
	// Link returns the target of the symlink at a clean path; nil, or ok
	// false, when the path is not a symlink in the tree.
	Link func(path string) (target string, ok bool)
}

// PolicyPaths are the paths of the role contracts and the landing policy
// itself: a change to them needs landing.policyChanges.
var policyPaths = []string{"roles/**"}

// maxLinkHops bounds how many symlinks a new link is followed through (as
// the kernel's 40).
const maxLinkHops = 40

// CheckChanges is CheckChangesOn with a tree known only by existsAtTarget
// (no symlinks in it).
func (l *Landing) CheckChanges(changes []Change, existsAtTarget func(path string) bool) []*refusal.Refusal {
	return l.CheckChangesOn(changes, Tree{Exists: existsAtTarget})
}

// CheckChangesOn applies the landing path rules to a diff's changes and
// returns every refusal (nil when the changes may land).
//
// Rules: a path (both sides of a rename, the new side of a copy) with
// control characters, bidirectional controls or invalid UTF-8 is
// unsafe-path-name. Every other path is normalised first; a path that does
// not normalise, or that falls under a forbidden pattern (case-insensitively,
// with full Unicode folding, when caseInsensitivePaths is set), is
// forbidden-path — whatever the change: added, modified, deleted, renamed
// into or out of. A path under roles/** (the role contracts and this policy)
// is policy-change unless landing.policyChanges is set. A symlink is
// followed through the links of the tree after the change (the tree's, less
// those the change removes, plus those it adds; at most 40 hops): when a
// path it reaches is forbidden, or it leaves the repository, it is
// forbidden-path. An added (or renamed-to) path at the root that does not
// exist at the target is adds-root-file; one whose first segment does not
// exist at the target is adds-top-level-dir.
func (l *Landing) CheckChangesOn(changes []Change, tree Tree) []*refusal.Refusal {
	existsAtTarget := tree.Exists
	if existsAtTarget == nil {
		existsAtTarget = func(string) bool { return false }
	}
	var out []*refusal.Refusal
	seen := map[string]bool{}
	add := func(r *refusal.Refusal) {
		key := string(r.Code) + "\x00" + r.Reason
		if !seen[key] {
			seen[key] = true
			out = append(out, r)
		}
	}
	forbidden := func(raw, what string) (string, bool) {
		if why := UnsafeName(raw); why != "" {
			add(refusal.Newf("unsafe-path-name", "rename the file to a name of printable UTF-8 characters",
				"%s %s: the name %s", what, quotePath(raw), why))
			return "", false
		}
		c, err := CleanPath(raw)
		if err != nil {
			add(refusal.Newf("forbidden-path", "leave that path out of the change", "%s: %v", what, err))
			return "", false
		}
		ok := true
		if f := l.forbiddenBy(c); f != "" {
			add(refusal.Newf("forbidden-path", "revert the change to "+quotePath(c)+"; "+f+" is forbidden by landing.forbiddenPaths",
				"%s %s is under forbidden path %s", what, quotePath(c), f))
			ok = false
		}
		if f := l.policyPath(c); f != "" {
			add(refusal.Newf("policy-change", "revert the change to "+quotePath(c)+"; a person changes the role contracts and the landing policy "+
				"(or sets landing.policyChanges in the policy the target already has)",
				"%s %s changes the policy (%s) and landing.policyChanges is not set", what, quotePath(c), f))
			ok = false
		}
		return c, ok
	}
	links := postChangeLinks(changes, tree.Link)
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
			} else if why := UnsafeName(ch.OldPath); why != "" {
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
				l.checkLink(p, ch.LinkTarget, links, add)
			}
			continue
		}
		if ch.NewMode == "120000" {
			l.checkLink(newPath, ch.LinkTarget, links, add)
		}
		first, _, nested := strings.Cut(newPath, "/")
		switch {
		case !nested && l.r.NoNewRootFiles && !existsAtTarget(newPath):
			add(refusal.Newf("adds-root-file", "put the file in an existing folder",
				"the change adds %s at the repository root", quotePath(newPath)))
		case nested && l.r.NoNewTopLevelDirs && !existsAtTarget(first):
			add(refusal.Newf("adds-top-level-dir", "put "+quotePath(newPath)+" under an existing top-level folder",
				"the change adds a new top-level folder %s/", quotePath(first)))
		}
	}
	return out
}

// policyPath returns the policy pattern a clean path falls under when
// policy changes are not allowed, else "". It always folds case: a
// case-insensitive checkout would write ROLES/x over roles/x.
func (l *Landing) policyPath(clean string) string {
	if l.r.PolicyChanges {
		return ""
	}
	for _, p := range policyPaths {
		if matchGlob(p, clean, true) {
			return p
		}
	}
	return ""
}

// postChangeLinks answers "is this clean path a symlink, and to what?" for
// the tree after the changes: the changes' own links first, then the tree's
// links less those the changes delete, rename away or replace.
func postChangeLinks(changes []Change, treeLink func(string) (string, bool)) func(string) (string, bool) {
	added, removed := map[string]string{}, map[string]bool{}
	clean := func(p string) string {
		c, err := CleanPath(p)
		if err != nil {
			return p
		}
		return c
	}
	for _, ch := range changes {
		switch ch.Status {
		case 'D':
			removed[clean(ch.Path)] = true
			continue
		case 'R':
			removed[clean(ch.OldPath)] = true
		}
		if ch.NewMode == "120000" {
			added[clean(ch.Path)] = ch.LinkTarget
		} else {
			removed[clean(ch.Path)] = true
		}
	}
	return func(p string) (string, bool) {
		if t, ok := added[p]; ok {
			return t, true
		}
		if removed[p] || treeLink == nil {
			return "", false
		}
		return treeLink(p)
	}
}

// resolveLink follows the symlink at clean path p with target through
// links, component by component as the kernel does (a ".." after a link
// climbs out of the link's target, not out of the link's folder), and
// returns every repository path the walk visits, in order (the last is
// where it ends). An absolute target, a walk out of the repository or into
// a .git entry, one that ends at the repository root and more than
// maxLinkHops links are errors.
func resolveLink(p, target string, links func(string) (string, bool)) ([]string, error) {
	var visited, stack []string
	rest := append(strings.Split(path.Dir(p), "/"), strings.Split(target, "/")...)
	if path.IsAbs(target) {
		return nil, fmt.Errorf("points to the absolute path %s", quotePath(target))
	}
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return visited, fmt.Errorf("points outside the repository (%s)", quotePath(target))
			}
			stack = stack[:len(stack)-1]
			continue
		}
		stack = append(stack, c)
		cur := strings.Join(stack, "/")
		if _, err := CleanPath(cur); err != nil {
			return visited, fmt.Errorf("points to %s: %v", quotePath(cur), err)
		}
		visited = append(visited, cur)
		t, ok := links(cur)
		if !ok {
			continue
		}
		if hops++; hops > maxLinkHops {
			return visited, fmt.Errorf("goes through more than %d symlinks (a loop?)", maxLinkHops)
		}
		if path.IsAbs(t) {
			return visited, fmt.Errorf("goes through %s, a symlink to the absolute path %s", quotePath(cur), quotePath(t))
		}
		stack = stack[:len(stack)-1]
		rest = append(strings.Split(t, "/"), rest...)
	}
	if len(stack) == 0 {
		return visited, fmt.Errorf("points at the repository root (%s)", quotePath(target))
	}
	return append(visited, strings.Join(stack, "/")), nil
}

// checkLink refuses a symlink at p whose target, followed through links,
// leaves the repository or reaches a forbidden path.
func (l *Landing) checkLink(p, target string, links func(string) (string, bool), add func(*refusal.Refusal)) {
	if target == "" {
		return
	}
	if why := UnsafeName(target); why != "" {
		add(refusal.Newf("unsafe-path-name", "point the symlink at a name of printable UTF-8 characters",
			"symlink %s: its target %s", quotePath(p), why))
		return
	}
	reached, err := resolveLink(p, target, links)
	lexical := path.Join(path.Dir(p), target)
	for i := len(reached) - 1; i >= 0; i-- { // where it ends first, then the way there
		c := reached[i]
		if f := l.forbiddenBy(c); f != "" {
			via := ""
			if c != lexical && !strings.HasPrefix(lexical, c+"/") {
				via = " through the tree's symlinks"
			}
			add(refusal.Newf("forbidden-path", "replace the symlink; "+f+" is forbidden by landing.forbiddenPaths",
				"symlink %s points into forbidden path %s (%s)%s", quotePath(p), f, quotePath(c), via))
			return
		}
	}
	if err != nil {
		add(refusal.Newf("forbidden-path", "replace the symlink with a regular file",
			"symlink %s %v", quotePath(p), err))
	}
}

// quotePath shows a path as is when it is plain, else Go-quoted (control
// characters, bidi controls and invalid UTF-8 escaped: never raw on a
// terminal).
func quotePath(p string) string {
	if UnsafeName(p) != "" {
		return fmt.Sprintf("%q", p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f || r == '"' || r == '\\' || r == ' ' {
			return fmt.Sprintf("%q", p)
		}
	}
	return p
}
