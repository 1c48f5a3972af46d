package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/conductor/queue"
	"github.com/conductor-dev/conductor/conductor/review"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/runtask"
	"github.com/conductor-dev/conductor/runtask/sandbox"
)

func newWorkerCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "worker",
		Usage: "consume jobs from the queue (Redis with REDIS_URL, else the embedded store) and run them",
		Description: "Each job is run as `conductor run-task run` would, with its run id as the\n" +
			"idempotency key: a redelivered job whose run finished is acknowledged without\n" +
			"running; an interrupted one resumes from its checkpoint. Backlog claims are\n" +
			"atomic and completed with outcome, model alias and token totals.\n" +
			"SIGTERM: stop taking jobs, let running ones checkpoint at their next step and\n" +
			"hand them back to the queue, exit within --grace. See docs/queue.md.",
		Flags: append(append(queueFlags(), runTaskFlags()...),
			&cli.IntFlag{Name: "concurrency", Value: 1, Usage: "jobs run at once by this process", EnvVars: []string{"WORKER_CONCURRENCY"}},
			&cli.BoolFlag{Name: "once", Usage: "take one round of jobs (up to --concurrency), run them and exit: for cron"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the banner and configuration and exit without connecting", EnvVars: []string{"WORKER_DRY_RUN"}},
			&cli.IntFlag{Name: "wait", Value: 5, Usage: "seconds one take waits for a job", EnvVars: []string{"WORKER_BLPOP_TIMEOUT_S"}},
			&cli.DurationFlag{Name: "grace", Value: 30 * time.Second, Usage: "how long running jobs get to checkpoint after SIGTERM"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usagef("worker takes no arguments, got %q", c.Args().Slice())
			}
			if c.Int("concurrency") < 1 {
				return usagef("worker: --concurrency must be at least 1")
			}
			cfg := d.config(c)
			backend := "embedded store queue (no REDIS_URL)"
			if u := c.String("redis-url"); u != "" {
				backend = "redis " + bus.RedactURL(u)
			}
			store := "embedded " + cfg.DataRoot + "/bus.db"
			if cfg.DatabaseURL != "" {
				store = "postgres " + bus.RedactURL(cfg.DatabaseURL)
			}
			fmt.Fprintf(d.Stderr, "conductor worker %s\n  queue:       %s key %s (max attempts %d)\n  store:       %s\n  concurrency: %d%s\n  data root:   %s\n",
				version, backend, c.String("queue"), c.Int("max-attempts"), store, c.Int("concurrency"),
				map[bool]string{true: " (once)", false: ""}[c.Bool("once")], cfg.DataRoot)
			if c.Bool("dry-run") {
				fmt.Fprintln(d.Stderr, "  dry run:     not connecting; exiting")
				return nil
			}
			base, err := runTaskOptions(c, d)
			if err != nil {
				return err
			}
			// Containers a killed worker left behind (the docker backend).
			if names, err := reapDockerOrphans(c.Context, d); err != nil && c.String("sandbox") == sandbox.BackendDocker {
				fmt.Fprintf(d.Stderr, "conductor: reap orphan sandbox containers: %v\n", err)
			} else if len(names) > 0 {
				fmt.Fprintf(d.Stderr, "  reaped:      %d orphan sandbox containers (%s)\n", len(names), strings.Join(names, ", "))
			}
			st, err := d.openStore(c)
			if err != nil {
				return fmt.Errorf("worker: %w", err)
			}
			consumer := consumerName()
			q, err := d.openQueue(c, consumer)
			if err != nil {
				return fmt.Errorf("worker: %w", err)
			}
			defer q.Close()
			w := &jobRunner{d: d, c: c, base: base, store: st, q: q, consumer: consumer}
			cons := &queue.Consumer{
				Queue: q, Handle: w.handle, Concurrency: c.Int("concurrency"),
				Wait: time.Duration(c.Int("wait")) * time.Second, Once: c.Bool("once"),
				Grace: c.Duration("grace"), Log: d.Log,
			}
			stats, err := cons.Run(c.Context)
			fmt.Fprintf(d.Stderr, "worker %s: %d done, %d failed (requeued), %d dead-lettered, %d handed back\n",
				consumer, stats.Done, stats.Failed, stats.Dead, stats.Released)
			if err != nil {
				return err
			}
			if c.Context.Err() != nil {
				return &silentError{code: exitInterrupted}
			}
			return nil
		},
	}
}

// jobRunner runs one queue job as a worker run.
type jobRunner struct {
	d        *deps
	c        *cli.Context
	base     runtask.Options
	store    bus.Store
	q        queue.Queue
	consumer string
}

// handle maps the job onto a task, makes delivery idempotent by run id,
// claims the backlog item, runs or resumes, and completes the claim.
func (w *jobRunner) handle(ctx context.Context, stop <-chan struct{}, dl *queue.Delivery) error {
	job, err := queue.ParseJob(dl.Payload)
	if err != nil {
		return err
	}
	task, err := runtask.ParseTask("job "+dl.ID, job.Task)
	if err != nil {
		return err
	}
	if err := runtask.ValidRunID(job.RunID); err != nil {
		return fmt.Errorf("job %s: %w", dl.ID, err)
	}
	log := w.d.Log.With("job", dl.ID, "run", job.RunID, "task", task.ID, "attempt", dl.Attempt)

	prev, err := w.store.GetRun(ctx, job.RunID)
	known := err == nil
	if err != nil && !errors.Is(err, bus.ErrNotFound) {
		return err
	}
	if known && runrec.Final(prev.Status) {
		log.Info("run already finished; acknowledging without running", "status", prev.Status)
		return nil
	}
	if r, ok := w.q.(*queue.Redis); ok {
		ttl := w.c.Duration("heartbeat-ttl")
		got, refresh, release, err := r.Lock(ctx, "run:"+job.RunID, ttl)
		if err != nil {
			return err
		}
		if !got {
			// Another consumer runs it (a redelivery raced a slow
			// heartbeat): hand it back without counting an attempt.
			log.Info("run is held by another consumer; handing the job back")
			select {
			case <-time.After(min(ttl/2, 2*time.Second)):
			case <-ctx.Done():
			}
			return queue.ErrInterrupted
		}
		defer release(context.WithoutCancel(ctx))
		lctx, stopRefresh := context.WithCancel(ctx)
		defer stopRefresh()
		go keepRefreshed(lctx, refresh, ttl/3)
		if prev, err := w.store.GetRun(ctx, job.RunID); err == nil && runrec.Final(prev.Status) {
			log.Info("run finished meanwhile; acknowledging", "status", prev.Status)
			return nil
		}
	}
	won, err := w.store.ClaimTask(ctx, task.ID, job.RunID)
	if err != nil {
		return err
	}
	if !won {
		cl, err := w.store.GetClaim(ctx, task.ID)
		if err != nil {
			return err
		}
		if cl.Claimant != job.RunID {
			log.Warn("backlog item already claimed by another run; acknowledging", "claimant", cl.Claimant)
			return nil
		}
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel() // the loop stops at its next step boundary and checkpoints
		case <-runCtx.Done():
		}
	}()
	opts := w.base
	opts.Task, opts.RunID = task, job.RunID
	if err := prepareRun(w.c, w.d, &opts, task); err != nil {
		return err
	}
	defer closeSandbox(w.d, opts.Sandbox)
	var res runrec.Result
	if known || job.Resume {
		log.Info("resuming run")
		res, err = runtask.Resume(runCtx, opts, job.RunID)
	} else {
		log.Info("starting run")
		res, err = runtask.Run(runCtx, opts)
	}
	if err != nil {
		if isStopped(stop) {
			return queue.ErrInterrupted
		}
		return err
	}
	if res.Status == runrec.StatusCancelled && isStopped(stop) {
		log.Info("run checkpointed for shutdown; handing the job back", "steps", res.Steps)
		return queue.ErrInterrupted
	}
	if err := w.store.CompleteTask(context.WithoutCancel(ctx), bus.Completion{
		TaskID: task.ID, Claimant: job.RunID, RunID: res.RunID, Outcome: res.Status,
		ModelAlias: res.ModelAlias, PromptTokens: res.PromptTokens,
		CompletionTokens: res.CompletionTokens, TotalTokens: res.TotalTokens,
	}); err != nil {
		return err
	}
	line := map[string]any{"runId": res.RunID, "taskId": res.TaskID, "status": res.Status, "steps": res.Steps, "patchId": res.PatchID}
	if res.Status == runrec.StatusSucceeded && (job.PR || task.PR) && res.PatchID != "" {
		pr, err := w.reviewAndOpenDraft(ctx, res, int64(task.Issue))
		if err != nil {
			// The run is done and recorded; the automation's failure is
			// reported, not retried (re-running would not change it).
			log.Warn("unattended review/PR stopped", "err", err)
			line["pr"] = "not opened: " + err.Error()
		} else {
			line["pr"] = pr
		}
	}
	out, _ := json.Marshal(line)
	fmt.Fprintln(w.d.Stdout, string(out))
	log.Info("run finished", "status", res.Status, "steps", res.Steps)
	return nil
}

// reviewAndOpenDraft is the unattended path for a task with "pr": true:
// review with approval (checks and gate must pass), then push the work branch
// and open a draft PR. The forge token is read here, by the conductor, and
// never reaches the worker.
func (w *jobRunner) reviewAndOpenDraft(ctx context.Context, res runrec.Result, issue int64) (string, error) {
	cfg := w.d.config(w.c)
	dir := runrec.Dir(cfg.RunDir(res.RunID))
	pol, err := enforcedPolicy(ctx, w.c.String("roles"), res.Repo, "HEAD")
	if err != nil {
		return "", err
	}
	_, err = review.Run(ctx, review.Options{
		Store: w.store, Policy: pol, RunDir: dir, Approve: true,
		Reviewer: "conductor worker", ScratchDir: filepath.Join(cfg.DataRoot, "scratch"),
		Getenv: w.d.Getenv, Now: w.d.Now, Out: io.Discard,
	})
	if err != nil {
		return "", fmt.Errorf("review: %w", err)
	}
	settings, err := forge.LoadSettings(cfg.ConfigFile)
	if err != nil {
		return "", err
	}
	pr, err := forge.OpenDraftPR(ctx, forge.DraftOptions{
		RunDir: string(dir), Issue: issue, Settings: settings.WithDefaults(w.d.Getenv),
		Getenv: w.d.Getenv, Verdicts: w.store, Log: w.d.Log,
	})
	if err != nil {
		return "", fmt.Errorf("draft PR: %w", err)
	}
	return pr.PR.URL, nil
}

func isStopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

func keepRefreshed(ctx context.Context, refresh func(context.Context) error, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			refresh(ctx)
		}
	}
}

// prepareRun loads the task's role and its sandbox and attaches the store:
// what every dispatch path (run-task, worker, review --redispatch) needs.
func prepareRun(c *cli.Context, d *deps, opts *runtask.Options, task runtask.Task) error {
	role, err := loadRunRole(c, *opts, task)
	if err != nil {
		return err
	}
	opts.Role = role
	sb, err := openSandbox(firstOf(c.String("sandbox"), role.SandboxBackend(), sandbox.BackendAuto), opts.RunID)
	if err != nil {
		return err
	}
	opts.Sandbox = sb
	if store, err := d.openStore(c); err != nil {
		fmt.Fprintf(d.Stderr, "conductor: bus store unavailable (%v); the run folder is the only record\n", err)
	} else {
		opts.Store = store
	}
	return nil
}
