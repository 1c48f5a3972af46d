package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/conductor/review"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/policy"
)

// Unattended is the path a successful run takes when its task (or role)
// asks for a draft PR: review with approval (every check and the gate must
// pass), then push the work branch and open a draft PR. The forge token is
// read here, by the conductor, and never reaches the worker.
type Unattended struct {
	// Policy loads the contracts the review enforces from the committed
	// tree at rev of the repository gitDir (never a working tree).
	Policy func(ctx context.Context, gitDir, rev string) (*policy.Policy, error)
	// Forge is the forge's settings (URL, token variable, remote), loaded
	// when a PR is to be opened.
	Forge      func() (forge.Settings, error)
	RunsDir    func(runID string) string
	ScratchDir string
	Reviewer   string // default "conductor worker"
	// Sandbox is the backend the review's checks and gate run in, the
	// operator's choice ("" = auto), opened with Sandboxes as `conductor
	// review` opens its own: with the operator's options (the bwrap path,
	// the limits, the warm caches), never the defaults. Without
	// Sandboxes.Open the review opens the default backend itself.
	Sandbox   string
	Sandboxes Sandboxes
	Getenv    func(string) string
	Now       func() time.Time
	Log       *slog.Logger
}

// Run reviews res with approval and opens its draft PR; it returns the PR's
// URL.
func (u Unattended) Run(ctx context.Context, store bus.Store, res runrec.Result, issue int64) (string, error) {
	if u.Policy == nil || u.Forge == nil || u.RunsDir == nil {
		return "", errors.New("unattended PR: not configured")
	}
	dir := runrec.Dir(u.RunsDir(res.RunID))
	pol, err := u.Policy(ctx, res.Repo, "HEAD")
	if err != nil {
		return "", err
	}
	reviewer := u.Reviewer
	if reviewer == "" {
		reviewer = "conductor worker"
	}
	var sb sandbox.Sandbox
	if u.Sandboxes.Open != nil {
		if sb, err = u.Sandboxes.Open(cmp.Or(u.Sandbox, sandbox.BackendAuto), res.RunID); err != nil {
			return "", fmt.Errorf("review: %w", err)
		}
		defer u.Sandboxes.close(sb)
	}
	rep, err := review.Run(ctx, review.Options{
		Store: store, Policy: pol, RunDir: dir, Approve: true,
		Reviewer: reviewer, ScratchDir: u.ScratchDir, Sandbox: sb,
		Getenv: u.Getenv, Now: u.Now,
	})
	if err != nil {
		return "", fmt.Errorf("review: %w", err)
	}
	if rep.Verdict != nil {
		u.emit(ctx, store, bus.EventReviewed, res, reviewer, map[string]any{"verdict": rep.Verdict.Verdict, "commit": rep.Verdict.Commit, "patchId": rep.PatchID})
	}
	settings, err := u.Forge()
	if err != nil {
		return "", err
	}
	dopts := forge.DraftOptions{
		RunDir: string(dir), Issue: issue, Settings: settings,
		Getenv: u.Getenv, Verdicts: store, Log: u.Log,
	}
	if l, ok := store.(bus.Locker); ok {
		dopts.Lock = l.Lock
	}
	pr, err := forge.OpenDraftPR(ctx, dopts)
	if err != nil {
		return "", fmt.Errorf("draft PR: %w", err)
	}
	u.emit(ctx, store, bus.EventPROpened, res, "conductor worker", map[string]any{"repo": pr.Repo, "number": pr.PR.Number, "url": pr.PR.URL, "draft": pr.PR.Draft})
	return pr.PR.URL, nil
}

func (u Unattended) emit(ctx context.Context, store bus.Store, kind string, res runrec.Result, actor string, md map[string]any) {
	if err := bus.Emit(context.WithoutCancel(ctx), store, kind, res.RunID, res.TaskID, actor, md); err != nil && u.Log != nil {
		u.Log.Warn("lifecycle event not recorded", "kind", kind, "run", res.RunID, "err", err)
	}
}
