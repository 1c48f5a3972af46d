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
	var res DraftResult
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var rec *runrec.Result
	local := o.Repo
	branch := o.Branch
	if o.RunDir != "" {
		r, err := runrec.Dir(o.RunDir).ReadResult()
		if err != nil {
			return res, fmt.Errorf("pr open: %w", err)
		}
		rec = &r
		res.RunID = r.RunID
		if r.TaskID == "" {
			return res, fmt.Errorf("pr open: run %s: record has no task id", r.RunID)
		}
		if r.Repo == "" {
			return res, fmt.Errorf("pr open: run %s: record names no repository", r.RunID)
		}
		local = patch.Git{GitDir: r.Repo}
		if branch == "" {
			branch = WorkBranch(r.TaskID)
		}
	}
	if local.GitDir == "" {
		return res, fmt.Errorf("pr open: no local repository")
	}
	if branch == "" {
		return res, fmt.Errorf("pr open: no branch given")
	}
	if err := checkBranchName(ctx, local, branch); err != nil {
		return res, fmt.Errorf("pr open: %w", err)
	}
	tip, err := local.Line(ctx, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch+"^{commit}")
	if err != nil || tip == "" {
		if rec != nil {
			return res, fmt.Errorf("pr open: run %s has no work branch: %s does not exist in %s (review and approve the run first: conductor review %s)",
				rec.RunID, branch, local.GitDir, rec.RunID)
		}
		return res, fmt.Errorf("pr open: branch %q does not exist in %s", branch, local.GitDir)
	}

	s := o.Settings.WithDefaults(getenv)
	connect := o.Connect
	if connect == nil {
		connect = func(ctx context.Context, s Settings, local patch.Git) (DraftForge, error) {
			return Connect(ctx, s, local, getenv, log)
		}
	}
	f, err := connect(ctx, s, local)
	if err != nil {
		return res, fmt.Errorf("pr open: %w", err)
	}
	if gf, ok := f.(*Gitea); ok && gf.VersionWarning != nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("forge version: %v (continuing with the oldest supported API)", gf.VersionWarning))
	}
	res.Repo = f.FullName()
	repo, err := f.Repository(ctx)
	if err != nil {
		return res, fmt.Errorf("pr open: %w", err)
	}
	if repo.Archived {
		return res, fmt.Errorf("pr open: repository %s on %s is archived: unarchive it, or point --owner/--repo elsewhere (nothing pushed)", res.Repo, f.URL())
	}
	base := o.Base
	if base == "" {
		base = repo.DefaultBranch
	}
	if base == "" && !repo.Empty {
		return res, fmt.Errorf("pr open: repository %s has no default branch: pass --base", res.Repo)
	}
	if base == branch {
		return res, fmt.Errorf("pr open: head and base are the same branch %q", branch)
	}
	ok := false
	if base != "" {
		// A repository still marked empty answers a branch lookup with
		// HTTP 500 (Gitea clears "empty" after a first push
		// asynchronously): that is "not there yet", said below.
		if ok, err = f.BranchExists(ctx, base); err != nil && !repo.Empty {
			return res, fmt.Errorf("pr open: %w", err)
		}
	}
	if !ok && repo.Empty {
		return res, fmt.Errorf("pr open: repository %s on %s is empty: push the base branch first (conductor push %s), or, just after a first push, retry in a moment (nothing pushed)", res.Repo, f.URL(), cmp.Or(base, "main"))
	}
	if !ok {
		return res, fmt.Errorf("pr open: %w", notFoundf("base branch %q does not exist on the forge repository %s (nothing pushed)", base, res.Repo))
	}

	if o.Issue > 0 {
		ok, err := f.IssueExists(ctx, o.Issue)
		if err != nil {
			return res, fmt.Errorf("pr open: %w", err)
		}
		if !ok {
			return res, fmt.Errorf("pr open: %w (nothing pushed)", issueNotFound(o.Issue, res.Repo, f.URL()))
		}
	}

	// The token must be able to push: asked before pushing (a read-only
	// token would otherwise fail at the push with a bare 403).
	if !repo.CanPush {
		return res, fmt.Errorf("pr open: %w (nothing pushed)", forbidden(res.Repo, f.URL()))
	}
	if ok, err := f.CanWrite(ctx); err != nil {
		return res, fmt.Errorf("pr open: %w", err)
	} else if !ok {
		return res, fmt.Errorf("pr open: %w (nothing pushed)", forbidden(res.Repo, f.URL()))
	}

	if o.Lock != nil {
		// The lease outlives a holder that died by at most a few forge
		// deadlines (the push, the look-up and the create each have one).
		unlock, err := o.Lock(ctx, "forge-pr "+f.URL()+" "+res.Repo+" "+branch, 5*s.Deadline())
		if err != nil {
			return res, fmt.Errorf("pr open: %w (nothing pushed)", err)
		}
		defer unlock()
	}

	push, err := f.Push(ctx, branch, PushOptions{Force: o.Force})
	res.Push = push
	if err != nil {
		return res, fmt.Errorf("pr open: %w", err)
	}

	// The push went to the remote; the forge must now see the branch, or
	// the remote is not this forge's repository.
	// From here on the branch is on the remote: every error says so, so
	// that nothing is left half-done unreported.
	pushed := func(err error) error {
		return fmt.Errorf("pr open: pushed %s (%s) to %s, but no pull request was opened: %w (run pr open again)", branch, patch.Short(push.Commit), push.Remote, err)
	}
	if ok, err := f.BranchExists(ctx, branch); err != nil {
		return res, pushed(err)
	} else if !ok {
		return res, fmt.Errorf("pr open: pushed %s to remote %q, but the forge repository %s does not have it: is the remote this forge's repository? (check the remote URL, --owner/--repo and --gitea-url)", branch, push.Remote, res.Repo)
	}

	if existing, err := f.FindPR(ctx, branch, base); err == nil {
		res.PR = existing
		return res, writePRRecord(o.RunDir, res)
	} else if !errors.Is(err, ErrNotFound) {
		return res, pushed(err)
	}

	title := o.Title
	if title == "" {
		title, _ = local.Line(ctx, "log", "-1", "--format=%s", tip)
	}
	if title == "" && rec != nil {
		title = rec.TaskID
	}
	title = DraftTitle(s.WIPPrefix, title)
	in := BodyInput{Record: rec, Repo: local, Branch: branch, Tip: tip, Base: base, Issue: o.Issue, Verdicts: o.Verdicts}
	if o.Issue > 0 && repo.HTMLURL != "" {
		in.IssueURL = fmt.Sprintf("%s/issues/%d", strings.TrimRight(repo.HTMLURL, "/"), o.Issue)
	}
	body := PRBody(ctx, in)
	if o.Verdicts != nil {
		switch v, ok := latestVerdict(ctx, o.Verdicts, branch); {
		case !ok:
			res.Warnings = append(res.Warnings, fmt.Sprintf("no review verdict recorded for %s: the pull request says so", branch))
		case v.Verdict != bus.VerdictApprove:
			res.Warnings = append(res.Warnings, fmt.Sprintf("the latest verdict for %s is %q, not approve: the pull request says so", branch, v.Verdict))
		case v.Commit != tip:
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s moved past the approved commit %s (now %s)", branch, patch.Short(v.Commit), patch.Short(tip)))
		}
	}
	pr, err := f.OpenPR(ctx, PROpts{Head: branch, Base: base, Title: title, Body: body})
	if err != nil {
		return res, pushed(err)
	}
	res.PR = pr
	if !pr.Existing && !pr.Draft {
		res.Warnings = append(res.Warnings, fmt.Sprintf(
			"the forge did not mark pull request #%d as a draft (title prefix %q): is %q among the server's WORK_IN_PROGRESS_PREFIXES? (set forge.wipPrefix or --wip-prefix)",
			pr.Number, s.WIPPrefix, s.WIPPrefix))
	}
	return res, writePRRecord(o.RunDir, res)
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
