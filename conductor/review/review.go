package review

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/policy"
)

// Options configures one review.
type Options struct {
	Store  bus.Store      // required when a verdict or a decision is recorded
	Policy *policy.Policy // the effective contracts (landing rules, checks, gate)
	RunDir runrec.Dir     // the run's folder

	Approve        bool   // record an approval (refused unless every check passes)
	RequestChanges string // record a request for changes with this text
	Reviewer       string // who reviews (recorded with the verdict)
	// Raise, with Approve, raises a git.merge.protected decision to land the
	// approved commit on this target branch.
	Raise string

	// Sandbox runs every check and gate command (they run worker-written
	// code). nil: the default backend (bubblewrap); when none works the
	// review is refused (sandbox-unavailable), never run unisolated.
	Sandbox sandbox.Sandbox

	// ScratchDir is where the scratch export for the checks and the gate is
	// made (default: the system temp folder). It is removed afterwards.
	ScratchDir string
	// Getenv reads the environment the gate's allowlist draws from
	// (default os.Getenv).
	Getenv func(string) string

	Now func() time.Time
}

// Check statuses.
const (
	StatusPass = "pass"
	StatusFail = "fail"
	StatusSkip = "skip"
)

// Check is one mechanical check's result.
type Check struct {
	Name     string   `json:"name"`
	Status   string   `json:"status"`
	Summary  string   `json:"summary"`
	Findings []string `json:"findings,omitempty"`
}

// FileStat is one line of the diffstat.
type FileStat struct {
	Status  string `json:"status"`
	Path    string `json:"path"`
	Added   int64  `json:"added"`
	Deleted int64  `json:"deleted"`
	Binary  bool   `json:"binary,omitempty"`
}

// Report is what a review found and did.
type Report struct {
	RunID     string `json:"runId"`
	TaskID    string `json:"taskId"`
	Session   string `json:"session,omitempty"`
	RunStatus string `json:"runStatus"`
	Model     string `json:"model,omitempty"`
	Repo      string `json:"repo"`
	Base      string `json:"base"`
	WorkRef   string `json:"workRef"`
	Parent    string `json:"parent"`
	Commit    string `json:"commit"`
	PatchID   string `json:"patchId"`
	// WorkRefUpdated says whether the work branch was moved to Commit
	// (only when a verdict is recorded).
	WorkRefUpdated bool                 `json:"workRefUpdated"`
	Files          []FileStat           `json:"files"`
	Checks         []Check              `json:"checks"`
	Gate           []sandbox.GateResult `json:"gate"`
	// GateNotRun says why the gate was not run (a run refused for a
	// breach); empty when it ran or the policy has none.
	GateNotRun string        `json:"gateNotRun,omitempty"`
	Clean      bool          `json:"clean"`
	Findings   []string      `json:"findings,omitempty"`
	Verdict    *bus.Verdict  `json:"verdict,omitempty"`
	Decision   *bus.Decision `json:"decision,omitempty"`

	complete bool // the review ran to its verdict (see Complete)
}

// Complete reports whether the review ran to its verdict: every check and
// the gate ran (or was skipped for a breach) and the outcome was decided.
// A complete report is worth showing even when Run returns a refusal; an
// incomplete one (the review could not be done) is not.
func (r Report) Complete() bool { return r.complete }

// FollowUp is the refinement message for a re-dispatch: the reviewer's text
// and every finding of the checks and the gate.
func (r Report) FollowUp(text string) string {
	var b strings.Builder
	b.WriteString("Review of your patch (run " + r.RunID + ") requested changes.\n")
	if strings.TrimSpace(text) != "" {
		b.WriteString("\nReviewer: " + strings.TrimSpace(text) + "\n")
	}
	if len(r.Findings) > 0 {
		b.WriteString("\nYour patch had these problems:\n")
		for _, f := range r.Findings {
			b.WriteString("- " + f + "\n")
		}
	}
	b.WriteString("\nFix them in the same worktree, run the checks again, then stop.")
	return b.String()
}

// WorkRef returns the work branch of a task: refs/heads/work/<task-id>. On
// top of the name rule (runrec.ValidName) git refuses a component ending in
// ".lock" or ".".
func WorkRef(taskID string) (string, error) {
	if !runrec.ValidName(taskID) || strings.HasSuffix(taskID, ".lock") || strings.HasSuffix(taskID, ".") {
		return "", fmt.Errorf("task id %q cannot name a work branch (%s; not ending in '.' or '.lock')", taskID, runrec.NameRule)
	}
	return "refs/heads/work/" + taskID, nil
}

// Run reviews one run. It returns the report and prints nothing (the caller
// renders it); the error is a *refusal.Refusal when the review is not clean
// (report only, or an approval refused), and any other error when the
// review could not be done. Report.Complete tells the two apart.
func Run(ctx context.Context, opts Options) (Report, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.Reviewer == "" {
		opts.Reviewer = "conductor"
	}
	var rep Report
	switch {
	case opts.Policy == nil:
		return rep, errors.New("review: no policy")
	case opts.Approve && opts.RequestChanges != "":
		return rep, errors.New("review: --approve and --request-changes exclude each other")
	case opts.Raise != "" && !opts.Approve:
		return rep, errors.New("review: raising a decision needs --approve")
	case (opts.Approve || opts.RequestChanges != "") && opts.Store == nil:
		return rep, errors.New("review: recording a verdict needs the bus store")
	}
	sb, err := sandbox.ForGate(opts.Sandbox)
	if opts.Sandbox == nil && err == nil {
		defer func() { _ = sandbox.Close(sb) }() // made here: ours to release
	}
	if err != nil {
		return rep, refusal.NoSandbox("the checks and the gate",
			"review runs worker-written code in its gate and no sandbox works here: %v", err)
	}
	landing := opts.Policy.Landing()
	if opts.Raise != "" {
		// Refuse before doing anything.
		if err := landing.TargetAllowed(opts.Raise); err != nil {
			return rep, err
		}
	}

	res, diff, err := readRun(opts.RunDir)
	if err != nil {
		return rep, err
	}
	rep = Report{RunID: res.RunID, TaskID: res.TaskID, Session: res.Session, RunStatus: res.Status,
		Model: modelName(res), Repo: res.Repo, Files: []FileStat{}, Checks: []Check{}, Gate: []sandbox.GateResult{}}
	if rep.WorkRef, err = WorkRef(res.TaskID); err != nil {
		return rep, fmt.Errorf("review %s: %w", res.RunID, err)
	}
	g := patch.Git{GitDir: res.Repo}
	if rep.Base, err = resolveCommit(ctx, g, res.BaseCommit); err != nil {
		return rep, fmt.Errorf("review %s: base commit: %w", res.RunID, err)
	}

	wc, err := makeWorkCommit(ctx, g, res, rep.Base, rep.WorkRef, diff, opts.Now())
	if err != nil {
		return rep, fmt.Errorf("review %s: %w", res.RunID, err)
	}
	rep.Parent, rep.Commit = wc.parent, wc.commit

	// The binding patch-id of the commit, from the run's base.
	var canon bytes.Buffer
	if rep.PatchID, err = patch.DiffTrees(ctx, g, rep.Base, rep.Commit, &canon); err != nil {
		return rep, fmt.Errorf("review %s: diff %s..%s: %w", res.RunID, patch.Short(rep.Base), patch.Short(rep.Commit), err)
	}
	if rep.PatchID != res.PatchID {
		return rep, fmt.Errorf("review %s: the work commit %s has patch-id %s but the run recorded %s: "+
			"the run's patch.diff and its record disagree (a bug, or the record was edited)",
			res.RunID, patch.Short(rep.Commit), rep.PatchID, res.PatchID)
	}
	changes, err := policy.ParseChanges(bytes.NewReader(canon.Bytes()))
	if err != nil {
		return rep, fmt.Errorf("review %s: %w", res.RunID, err)
	}
	for _, c := range changes {
		rep.Files = append(rep.Files, FileStat{Status: string(c.Status), Path: c.Path, Added: c.Added, Deleted: c.Deleted, Binary: c.Binary})
	}

	// Mechanical checks and the gate.
	ck := &checker{ctx: ctx, g: g, landing: landing, commit: rep.Commit, base: rep.Base, changes: changes,
		scratchDir: opts.ScratchDir, getenv: opts.Getenv, sb: sb}
	defer ck.cleanup()
	role, roleErr := opts.Policy.Role(roleName(res))
	rep.Checks = append(rep.Checks, checkRunStatus(res))
	rep.Checks = append(rep.Checks, ck.hazards(res.Hazards))
	rep.Checks = append(rep.Checks, ck.paths())
	rep.Checks = append(rep.Checks, ck.writes(role, roleErr))
	rep.Checks = append(rep.Checks, ck.size())
	// A run refused for a breach (a worktree hazard, a path the role may
	// not write, a policy change, an unsafe name) can never be approved:
	// nothing of it is run.
	breach := firstBreach(ck.refusals)
	if breach == nil {
		rep.Checks = append(rep.Checks, ck.syntax())
		rep.Gate = append(rep.Gate, ck.gate()...)
	} else {
		notRun := "not run: the run is refused (" + string(breach.Code) + ")"
		rep.Checks = append(rep.Checks, Check{Name: "syntax", Status: StatusSkip, Summary: notRun})
		if len(landing.Gate()) > 0 {
			rep.GateNotRun = notRun
		}
	}
	rep.Clean = true
	for _, c := range rep.Checks {
		if c.Status == StatusFail {
			rep.Clean = false
			rep.Findings = append(rep.Findings, c.Findings...)
		}
	}
	for _, gr := range rep.Gate {
		if !gr.OK() {
			rep.Clean = false
			rep.Findings = append(rep.Findings, gateFinding(gr))
		}
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}

	// The verdict.
	var outcome error
	switch {
	case breach != nil:
		verb := "review refused"
		if opts.Approve {
			verb = "approval refused"
		}
		outcome = &refusal.Refusal{Code: breach.Code, Fix: breach.Fix,
			Reason: fmt.Sprintf("%s: %s (%s)", verb, breach.Reason, failedSummary(rep))}
	case opts.Approve && !rep.Clean:
		outcome = refusal.Newf("review-failed", "fix the findings (or re-dispatch with --request-changes TEXT --redispatch), then review again",
			"approval refused: %s", failedSummary(rep))
	case opts.Approve, opts.RequestChanges != "":
		verdict, findings := bus.VerdictApprove, []string(nil)
		if opts.RequestChanges != "" {
			verdict = bus.VerdictRequestChanges
			findings = append([]string{strings.TrimSpace(opts.RequestChanges)}, rep.Findings...)
		}
		if err := wc.publish(ctx, g); err != nil {
			return rep, fmt.Errorf("review %s: %w", res.RunID, err)
		}
		rep.WorkRefUpdated = true
		v, err := opts.Store.PutVerdict(ctx, bus.Verdict{RunID: res.RunID, WorkRef: rep.WorkRef, Commit: rep.Commit,
			PatchID: rep.PatchID, Verdict: verdict, Reviewer: opts.Reviewer, Findings: findings})
		if err != nil {
			return rep, fmt.Errorf("review %s: record verdict: %w", res.RunID, err)
		}
		rep.Verdict = &v
		if opts.Raise != "" {
			d, err := opts.Store.RaiseDecision(ctx, bus.Decision{Kind: bus.KindMergeProtected, RaisedBy: opts.Reviewer,
				Repo: res.Repo, WorkRef: rep.WorkRef, Commit: rep.Commit, Target: strings.TrimPrefix(opts.Raise, "refs/heads/"),
				RunID: res.RunID})
			if err != nil {
				return rep, fmt.Errorf("review %s: raise decision: %w", res.RunID, err)
			}
			rep.Decision = &d
		}
	case !rep.Clean:
		outcome = refusal.Newf("review-failed", "fix the findings, or record them with --request-changes TEXT [--redispatch]",
			"review found problems: %s", failedSummary(rep))
	}
	if err := writeRecord(opts.RunDir, rep); err != nil {
		return rep, fmt.Errorf("review %s: %w", res.RunID, err)
	}
	rep.complete = true
	return rep, outcome
}

// readRun reads and checks a run record and its patch.
func readRun(dir runrec.Dir) (runrec.Result, []byte, error) {
	if fi, err := os.Stat(string(dir)); err != nil || !fi.IsDir() {
		return runrec.Result{}, nil, fmt.Errorf("review: no run record at %s", dir)
	}
	res, err := dir.ReadResult()
	if err != nil {
		return res, nil, fmt.Errorf("review: %w", err)
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"runId", res.RunID}, {"taskId", res.TaskID}, {"repo", res.Repo}, {"baseCommit", res.BaseCommit}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return res, nil, fmt.Errorf("review: run record %s: %s lacks %s", dir, runrec.ResultFile, strings.Join(missing, ", "))
	}
	if err := runrec.ValidRunID(res.RunID); err != nil {
		return res, nil, fmt.Errorf("review: run record %s: %w", dir, err)
	}
	if res.Status == runrec.StatusRunning {
		return res, nil, fmt.Errorf("review %s: the run is still running; review it when it has finished", res.RunID)
	}
	diff, err := os.ReadFile(dir.Path(runrec.PatchFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return res, nil, fmt.Errorf("review %s: the run has no patch (%s missing): nothing to review", res.RunID, dir.Path(runrec.PatchFile))
	case err != nil:
		return res, nil, fmt.Errorf("review %s: %w", res.RunID, err)
	case len(bytes.TrimSpace(diff)) == 0 || res.PatchID == "":
		return res, nil, fmt.Errorf("review %s: the run's patch is empty: the worker changed nothing, nothing to review", res.RunID)
	}
	// The patch must be the one the record names.
	id, err := patch.BindingPatchID(bytes.NewReader(diff))
	if err != nil {
		return res, nil, fmt.Errorf("review %s: %s: %w", res.RunID, dir.Path(runrec.PatchFile), err)
	}
	if id != res.PatchID {
		return res, nil, fmt.Errorf("review %s: %s has patch-id %s but %s records %s: the record and the patch disagree",
			res.RunID, runrec.PatchFile, id, runrec.ResultFile, res.PatchID)
	}
	return res, diff, nil
}

// roleName is the run's role; a record from before roles were recorded ran
// as the implementer.
func roleName(res runrec.Result) string {
	if res.Role == "" {
		return "implementer"
	}
	return res.Role
}

// breachCodes are the refusals that make a run unapprovable whatever else
// it holds: the worker reached past its contract.
var breachCodes = []refusal.Code{runrec.HazardNestedRepo, runrec.HazardSpecialFile, runrec.HazardUnsafeName,
	refusal.RoleWriteDenied, refusal.PolicyChange}

func firstBreach(rs []*refusal.Refusal) *refusal.Refusal {
	for _, code := range breachCodes {
		for _, r := range rs {
			if r.Code == code {
				return r
			}
		}
	}
	return nil
}

func modelName(res runrec.Result) string {
	switch {
	case res.ModelAlias != "" && res.Model != "" && res.Model != res.ModelAlias:
		return res.ModelAlias + " (" + res.Model + ")"
	case res.ModelAlias != "":
		return res.ModelAlias
	}
	return res.Model
}

func resolveCommit(ctx context.Context, g patch.Git, rev string) (string, error) {
	id, err := g.Line(ctx, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
	if err != nil || id == "" {
		return "", fmt.Errorf("%q is not a commit in %s", rev, g.GitDir)
	}
	return id, nil
}

func checkRunStatus(res runrec.Result) Check {
	if res.Status == runrec.StatusSucceeded {
		return Check{Name: "run", Status: StatusPass, Summary: "the worker finished (succeeded)"}
	}
	msg := fmt.Sprintf("the run ended %s, not succeeded", res.Status)
	if res.Error != "" {
		msg += ": " + res.Error
	}
	return Check{Name: "run", Status: StatusFail, Summary: msg, Findings: []string{msg}}
}

func failedSummary(rep Report) string {
	var names []string
	for _, c := range rep.Checks {
		if c.Status == StatusFail {
			names = append(names, c.Name)
		}
	}
	for _, g := range rep.Gate {
		if !g.OK() {
			names = append(names, "gate "+g.Name)
		}
	}
	return fmt.Sprintf("%d failed (%s); %d finding(s)", len(names), strings.Join(names, ", "), len(rep.Findings))
}

func gateFinding(g sandbox.GateResult) string {
	what := fmt.Sprintf("exit status %d", g.ExitCode)
	if g.TimedOut {
		what = "timed out after " + g.Duration.Round(time.Millisecond).String() + " and was killed"
	}
	f := fmt.Sprintf("gate %s (%s) failed: %s", g.Name, strings.Join(g.Argv, " "), what)
	if tail := sandbox.LastLines(g.OutputTail, 10); tail != "" {
		f += "\n" + tail
	}
	return f
}
