package dispatch

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/runtask"
)

// RedispatchOptions continue a reviewed run's session with the review's
// findings.
type RedispatchOptions struct {
	// Run is what the new run shares with any other (model, registry,
	// config, events); its Repo and ModelAlias default to the reviewed
	// run's.
	Run       runtask.Options
	RunDir    runrec.Dir    // the reviewed run's folder
	Prev      runrec.Result // its receipt
	FollowUp  string        // the findings, as the next user message
	RolesDir  string        // the operator's roles folder ("" = the repository's)
	Sandbox   string        // the operator's backend ("" = the role's)
	Sandboxes Sandboxes
}

// Redispatch runs a refinement round: a new run of the reviewed task on the
// same session, told what to change. It returns the new run's receipt.
func Redispatch(ctx context.Context, o RedispatchOptions) (runrec.Result, error) {
	opts := o.Run
	taskPath := o.RunDir.Path(runrec.TaskFile)
	task, err := runtask.LoadTask(taskPath)
	if err != nil {
		return runrec.Result{}, fmt.Errorf("redispatch %s: %w", o.Prev.RunID, err)
	}
	opts.Task, opts.FollowUp = task, o.FollowUp
	if filepath.IsAbs(task.Brief) {
		// A run-task brief beside its task file (recorded absolute); a
		// job's brief stays a path in the repository, read at the base.
		opts.TaskPath = taskPath
	}
	if opts.Repo == "" {
		opts.Repo = o.Prev.Repo
		if filepath.Base(o.Prev.Repo) == ".git" {
			opts.Repo = filepath.Dir(o.Prev.Repo)
		}
	}
	if opts.ModelAlias == "" {
		opts.ModelAlias = o.Prev.ModelAlias
	}
	if err := Prepare(o.RolesDir, o.Sandbox, o.Sandboxes, &opts); err != nil {
		return runrec.Result{}, fmt.Errorf("redispatch %s: %w", o.Prev.RunID, err)
	}
	defer o.Sandboxes.close(opts.Sandbox)
	res, err := runtask.Run(ctx, opts)
	if err != nil {
		return res, fmt.Errorf("redispatch %s: %w", o.Prev.RunID, err)
	}
	return res, nil
}
