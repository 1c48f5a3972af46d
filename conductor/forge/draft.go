package forge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/patch"
)

// WorkBranchPrefix is the review step's branch naming convention: the
// reviewed commit of task T lives on work/T.
const WorkBranchPrefix = "work/"

// WorkBranch returns the work branch name of a task.
func WorkBranch(taskID string) string { return WorkBranchPrefix + taskID }

// PRRecordFile is written into a run folder once its pull request is open.
const PRRecordFile = "pr.json"

// VerdictSource is what OpenDraftPR reads from the bus store (optional).
type VerdictSource interface {
	LatestVerdict(ctx context.Context, workRef string) (bus.Verdict, error)
}

// DraftOptions are the inputs of OpenDraftPR.
type DraftOptions struct {
	// RunDir is the run folder when opening from a run (branch and
	// repository come from its record); empty when Branch is given.
	RunDir string
	// Branch is the local branch to push and propose (from a run: the
	// work branch of its task).
	Branch string
	// Repo is the local repository (ignored with RunDir: the record names
	// the workspace repository).
	Repo patch.Git
	// Base is the target branch on the forge; empty: the repository's
	// default branch.
	Base string
	// Issue, when > 0, adds a "Closes #N" line.
	Issue int64
	// Title overrides the title (the WIP prefix is still added).
	Title string
	// Force pushes with a leading '+' (a rewritten work branch).
	Force bool

	Settings Settings
	Getenv   func(string) string
	Verdicts VerdictSource // may be nil
	Log      *slog.Logger
	// Connect overrides how the forge is reached (tests); nil: Connect.
	Connect func(ctx context.Context, s Settings, local patch.Git) (DraftForge, error)
	// Lock, when set, serializes OpenDraftPR per forge repository and
	// branch across processes (the bus store's Locker): the push, the look
	// for an open pull request and the create run under it, so two `pr
	// open` of one branch never open two pull requests (Gitea answers 409
	// only to sequential creates).
	Lock func(ctx context.Context, name string, ttl time.Duration) (unlock func(), err error)
}

// DraftForge is the Forge plus the lookups OpenDraftPR does before it
// pushes anything.
type DraftForge interface {
	Forge
	FullName() string
	Repository(ctx context.Context) (Repository, error)
	BranchExists(ctx context.Context, branch string) (bool, error)
	IssueExists(ctx context.Context, n int64) (bool, error)
	// CanWrite reports whether the token may push to the repository.
	CanWrite(ctx context.Context) (bool, error)
	// URL is the forge's base URL (for messages and the lock's name).
	URL() string
}

// DraftResult is what OpenDraftPR did.
type DraftResult struct {
	PR       PR         `json:"pr"`
	Push     PushResult `json:"push"`
	Repo     string     `json:"repo"` // owner/name on the forge
	RunID    string     `json:"runId,omitempty"`
	Warnings []string   `json:"warnings,omitempty"`
}

// OpenDraftPR pushes a work branch and opens a draft pull request for it, or
// returns the one already open (Existing). It checks everything it can
// before pushing: the branch exists locally, owner/repo resolve, the token
// is set, the server answers, the repository and the base branch exist on
// the forge. Nothing is pushed when any of these fails.
func OpenDraftPR(ctx context.Context, o DraftOptions) (DraftResult, error) {
	d := &draft{o: o, getenv: o.Getenv, log: o.Log}
	if d.getenv == nil {
		d.getenv = os.Getenv
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if err := d.findHead(ctx); err != nil {
		return d.res, fmt.Errorf("pr open: %w", err)
	}
	if err := d.connect(ctx); err != nil {
		return d.res, fmt.Errorf("pr open: %w", err)
	}
	if err := d.checkForge(ctx); err != nil {
		return d.res, fmt.Errorf("pr open: %w", err)
	}
	if o.Lock != nil {
		// The lease outlives a holder that died by at most a few forge
		// deadlines (the push, the look-up and the create each have one).
		unlock, err := o.Lock(ctx, "forge-pr "+d.f.URL()+" "+d.res.Repo+" "+d.branch, 5*d.s.Deadline())
		if err != nil {
			return d.res, fmt.Errorf("pr open: %w (nothing pushed)", err)
		}
		defer unlock()
	}
	if err := d.push(ctx); err != nil {
		return d.res, err
	}
	if existing, err := d.f.FindPR(ctx, d.branch, d.base); err == nil {
		d.res.PR = existing
		return d.res, writePRRecord(o.RunDir, d.res)
	} else if !errors.Is(err, ErrNotFound) {
		return d.res, d.pushed(err)
	}
	if err := d.open(ctx); err != nil {
		return d.res, d.pushed(err)
	}
	return d.res, writePRRecord(o.RunDir, d.res)
}

// draft is one OpenDraftPR, step by step.
type draft struct {
	o      DraftOptions
	getenv func(string) string
	log    *slog.Logger
	res    DraftResult

	rec    *runrec.Result // the run, when the draft is for one
	local  patch.Git
	branch string
	tip    string // the local branch's commit

	s    Settings
	f    DraftForge
	repo Repository
	base string
}

// findHead resolves the local side: the run's record and repository (with
// RunDir), the branch and its tip commit.
func (d *draft) findHead(ctx context.Context) error {
	d.local, d.branch = d.o.Repo, d.o.Branch
	if d.o.RunDir != "" {
		r, err := runrec.Dir(d.o.RunDir).ReadResult()
		if err != nil {
			return err
		}
		d.rec = &r
		d.res.RunID = r.RunID
		if r.TaskID == "" {
			return fmt.Errorf("run %s: record has no task id", r.RunID)
		}
		if r.Repo == "" {
			return fmt.Errorf("run %s: record names no repository", r.RunID)
		}
		d.local = patch.Git{GitDir: r.Repo}
		if d.branch == "" {
			d.branch = WorkBranch(r.TaskID)
		}
	}
	if d.local.GitDir == "" {
		return fmt.Errorf("no local repository")
	}
	if d.branch == "" {
		return fmt.Errorf("no branch given")
	}
	if err := checkBranchName(ctx, d.local, d.branch); err != nil {
		return err
	}
	tip, err := d.local.Line(ctx, "rev-parse", "--verify", "--quiet", "refs/heads/"+d.branch+"^{commit}")
	if err != nil || tip == "" {
		if d.rec != nil {
			return fmt.Errorf("run %s has no work branch: %s does not exist in %s (review and approve the run first: conductor review %s)",
				d.rec.RunID, d.branch, d.local.GitDir, d.rec.RunID)
		}
		return fmt.Errorf("branch %q does not exist in %s", d.branch, d.local.GitDir)
	}
	d.tip = tip
	return nil
}

// connect reaches the forge and reads the repository.
func (d *draft) connect(ctx context.Context) error {
	d.s = d.o.Settings.WithDefaults(d.getenv)
	connect := d.o.Connect
	if connect == nil {
		connect = func(ctx context.Context, s Settings, local patch.Git) (DraftForge, error) {
			return Connect(ctx, s, local, d.getenv, d.log)
		}
	}
	f, err := connect(ctx, d.s, d.local)
	if err != nil {
		return err
	}
	d.f = f
	if gf, ok := f.(*Gitea); ok && gf.VersionWarning != nil {
		d.res.Warnings = append(d.res.Warnings, fmt.Sprintf("forge version: %v (continuing with the oldest supported API)", gf.VersionWarning))
	}
	d.res.Repo = f.FullName()
	d.repo, err = f.Repository(ctx)
	return err
}

// checkForge checks, before anything is pushed, that the forge can take
// the pull request: the repository is live, the base branch exists, the
// issue (when named) exists and the token may push.
func (d *draft) checkForge(ctx context.Context) error {
	f, repo := d.f, d.repo
	if repo.Archived {
		return fmt.Errorf("repository %s on %s is archived: unarchive it, or point --owner/--repo elsewhere (nothing pushed)", d.res.Repo, f.URL())
	}
	d.base = cmp.Or(d.o.Base, repo.DefaultBranch)
	if d.base == "" && !repo.Empty {
		return fmt.Errorf("repository %s has no default branch: pass --base", d.res.Repo)
	}
	if d.base == d.branch {
		return fmt.Errorf("head and base are the same branch %q", d.branch)
	}
	ok := false
	if d.base != "" {
		// A repository still marked empty answers a branch lookup with
		// HTTP 500 (Gitea clears "empty" after a first push
		// asynchronously): that is "not there yet", said below.
		var err error
		if ok, err = f.BranchExists(ctx, d.base); err != nil && !repo.Empty {
			return err
		}
	}
	if !ok && repo.Empty {
		return fmt.Errorf("repository %s on %s is empty: push the base branch first (conductor push %s), or, just after a first push, retry in a moment (nothing pushed)", d.res.Repo, f.URL(), cmp.Or(d.base, "main"))
	}
	if !ok {
		return notFoundf("base branch %q does not exist on the forge repository %s (nothing pushed)", d.base, d.res.Repo)
	}
	if d.o.Issue > 0 {
		ok, err := f.IssueExists(ctx, d.o.Issue)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w (nothing pushed)", issueNotFound(d.o.Issue, d.res.Repo, f.URL()))
		}
	}
	// The token must be able to push: asked before pushing (a read-only
	// token would otherwise fail at the push with a bare 403).
	if !repo.CanPush {
		return fmt.Errorf("%w (nothing pushed)", forbidden(d.res.Repo, f.URL()))
	}
	if ok, err := f.CanWrite(ctx); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w (nothing pushed)", forbidden(d.res.Repo, f.URL()))
	}
	return nil
}

// push pushes the branch and checks the forge now sees it (else the
// remote is not this forge's repository).
func (d *draft) push(ctx context.Context) error {
	push, err := d.f.Push(ctx, d.branch, PushOptions{Force: d.o.Force})
	d.res.Push = push
	if err != nil {
		return fmt.Errorf("pr open: %w", err)
	}
	if ok, err := d.f.BranchExists(ctx, d.branch); err != nil {
		return d.pushed(err)
	} else if !ok {
		return fmt.Errorf("pr open: pushed %s to remote %q, but the forge repository %s does not have it: is the remote this forge's repository? (check the remote URL, --owner/--repo and --gitea-url)", d.branch, push.Remote, d.res.Repo)
	}
	return nil
}

// pushed wraps an error after the push: the branch is on the remote, and
// every error says so, so that nothing is left half-done unreported.
func (d *draft) pushed(err error) error {
	return fmt.Errorf("pr open: pushed %s (%s) to %s, but no pull request was opened: %w (run pr open again)", d.branch, patch.Short(d.res.Push.Commit), d.res.Push.Remote, err)
}

// open writes the title and the body (with what the review store says)
// and opens the draft pull request.
func (d *draft) open(ctx context.Context) error {
	title := d.o.Title
	if title == "" {
		title, _ = d.local.Line(ctx, "log", "-1", "--format=%s", d.tip)
	}
	if title == "" && d.rec != nil {
		title = d.rec.TaskID
	}
	title = DraftTitle(d.s.WIPPrefix, title)
	in := BodyInput{Record: d.rec, Repo: d.local, Branch: d.branch, Tip: d.tip, Base: d.base, Issue: d.o.Issue, Verdicts: d.o.Verdicts}
	if d.o.Issue > 0 && d.repo.HTMLURL != "" {
		in.IssueURL = fmt.Sprintf("%s/issues/%d", strings.TrimRight(d.repo.HTMLURL, "/"), d.o.Issue)
	}
	body := PRBody(ctx, in)
	d.warnVerdict(ctx)
	pr, err := d.f.OpenPR(ctx, PROpts{Head: d.branch, Base: d.base, Title: title, Body: body})
	if err != nil {
		return err
	}
	d.res.PR = pr
	if !pr.Existing && !pr.Draft {
		d.res.Warnings = append(d.res.Warnings, fmt.Sprintf(
			"the forge did not mark pull request #%d as a draft (title prefix %q): is %q among the server's WORK_IN_PROGRESS_PREFIXES? (set forge.wipPrefix or --wip-prefix)",
			pr.Number, d.s.WIPPrefix, d.s.WIPPrefix))
	}
	return nil
}

// warnVerdict warns when the branch is not the approved commit.
func (d *draft) warnVerdict(ctx context.Context) {
	if d.o.Verdicts == nil {
		return
	}
	switch v, ok := latestVerdict(ctx, d.o.Verdicts, d.branch); {
	case !ok:
		d.res.Warnings = append(d.res.Warnings, fmt.Sprintf("no review verdict recorded for %s: the pull request says so", d.branch))
	case v.Verdict != bus.VerdictApprove:
		d.res.Warnings = append(d.res.Warnings, fmt.Sprintf("the latest verdict for %s is %q, not approve: the pull request says so", d.branch, v.Verdict))
	case v.Commit != d.tip:
		d.res.Warnings = append(d.res.Warnings, fmt.Sprintf("%s moved past the approved commit %s (now %s)", d.branch, patch.Short(v.Commit), patch.Short(d.tip)))
	}
}

// DraftTitle prefixes title with the WIP prefix unless it already has it.
func DraftTitle(prefix, title string) string {
	title = strings.TrimSpace(title)
	if prefix == "" || strings.HasPrefix(strings.ToUpper(title), strings.ToUpper(prefix)) {
		return title
	}
	return prefix + " " + title
}

func writePRRecord(runDir string, res DraftResult) error {
	if runDir == "" {
		return nil
	}
	b, err := jsonIndent(res)
	if err != nil {
		return err
	}
	if err := runrec.WriteFileAtomic(filepath.Join(runDir, PRRecordFile), b, 0o644); err != nil {
		return fmt.Errorf("pr open: record %s: %w", PRRecordFile, err)
	}
	return nil
}
