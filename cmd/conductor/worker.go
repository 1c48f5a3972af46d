package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/conductor/queue"
	"github.com/conductor-dev/conductor/conductor/review"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/runtask"
)

func newWorkerCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "worker",
		Usage: "consume jobs from the queue (Redis with REDIS_URL, else the embedded store) and run them",
		Description: "Each job is run as `conductor run-task run` would, with its run id as the\n" +
			"idempotency key: a redelivered job whose run finished is acknowledged without\n" +
			"running; an interrupted one resumes from its checkpoint. Backlog claims are\n" +
			"atomic and completed with outcome, model alias and token totals.\n" +
			"Store, queue and disk failures are waited out with backoff, the job kept\n" +
			"leased and never charged an attempt; a job that can never run (not JSON, an\n" +
			"unknown role or model, a missing repository) is dead-lettered at once\n" +
			"(conductor queue dead list). A worker killed holding jobs loses them to the\n" +
			"others when its lease (--heartbeat-ttl) runs out, on Redis and embedded.\n" +
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
			if c.Int("wait") < 0 {
				return usagef("worker: --wait (WORKER_BLPOP_TIMEOUT_S) %d: want 0 or more seconds", c.Int("wait"))
			}
			cfg := d.config(c)
			backend := "embedded store queue (no REDIS_URL)"
			if u := cfg.RedisURL; u != "" {
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
			if names, err := reapDockerOrphans(c.Context, sandbox.OptionsFrom(cfg.SandboxLimits)); err != nil && cfg.Sandbox == sandbox.BackendDocker {
				fmt.Fprintf(d.Stderr, "conductor: reap orphan sandbox containers: %v\n", err)
			} else if len(names) > 0 {
				fmt.Fprintf(d.Stderr, "  reaped:      %d orphan sandbox containers (%s)\n", len(names), strings.Join(names, ", "))
			}
			if base.ModelAlias != "" && base.Registry != nil {
				if _, err := base.Registry.Lookup(base.ModelAlias); err != nil {
					return usageErr(fmt.Errorf("worker: --model: %w", err))
				}
			}
			// A server that does not answer yet is waited for; only a
			// configuration error (or a signal) ends the worker. With
			// --once (cron) it is an error: the next round tries again.
			unreachable := func(err error) error { return err }
			if c.Bool("once") {
				unreachable = func(error) error { return errNeverMatches }
			}
			st, err := waitFor(c.Context, d.Log, "bus store", unreachable(bus.ErrUnreachable), func() (bus.Store, error) {
				d.storeOnce = sync.Once{}
				return d.openStore(c)
			})
			if err != nil {
				if c.Context.Err() != nil {
					return &silentError{code: exitInterrupted}
				}
				return fmt.Errorf("worker: %w", err)
			}
			// Repair what a completion lost to an outage (or an older
			// conductor) left: the run folders are the source.
			if reps, err := bus.Reconcile(c.Context, st, cfg.RunsDir()); err != nil {
				d.Log.Warn("reconcile the store with the run folders", "err", err)
			} else if len(reps) > 0 {
				d.Log.Info("store repaired from the run folders", "runs", len(reps))
			}
			consumer := consumerName()
			q, err := waitFor(c.Context, d.Log, "queue", unreachable(queue.ErrUnreachable), func() (queue.Queue, error) {
				return d.openQueue(c, consumer)
			})
			if err != nil {
				if c.Context.Err() != nil {
					return &silentError{code: exitInterrupted}
				}
				return fmt.Errorf("worker: %w", err)
			}
			defer q.Close()
			beat, stopBeat := startWorkerBeat(c.Context, st, d.Log, consumer, q.Name(), c.Int("concurrency"), c.Duration("heartbeat-ttl"), d.Now)
			defer stopBeat()
			w := &jobRunner{d: d, c: c, base: base, store: st, q: q, consumer: consumer}
			cons := &queue.Consumer{
				Queue: q, Handle: beat.track(w.handle), OnDead: w.dead, Concurrency: c.Int("concurrency"),
				Wait: time.Duration(c.Int("wait")) * time.Second, Once: c.Bool("once"),
				Grace: c.Duration("grace"), Log: d.Log,
			}
			stats, err := cons.Run(c.Context)
			fmt.Fprintf(d.Stderr, "worker %s: %d done, %d failed (requeued), %d dead-lettered, %d handed back, %d lost to an expired lease\n",
				consumer, stats.Done, stats.Failed, stats.Dead, stats.Released, stats.Lost)
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
//
// Its errors tell the consumer what to do with the job: input that can never
// run (not JSON, an unknown role or model, a missing repository) is
// queue.Permanent and dead-lettered at once; a store or queue failure is
// queue.Infra and retried with the job kept leased, never counted as an
// attempt; anything else counts a failed attempt.
func (w *jobRunner) handle(ctx context.Context, stop <-chan struct{}, dl *queue.Delivery) error {
	job, err := queue.ParseJob(dl.Payload)
	if err != nil {
		return queue.Permanent(err)
	}
	task, err := runtask.ParseTask("job "+dl.ID, job.Task)
	if err != nil {
		return queue.Permanent(err)
	}
	if err := runrec.ValidRunID(job.RunID); err != nil {
		return queue.Permanent(fmt.Errorf("job %s: %w", dl.ID, err))
	}
	log := w.d.Log.With("job", dl.ID, "run", job.RunID, "task", task.ID, "attempt", dl.Attempt)

	// The run folder is the source of truth: a run it says ended (the store
	// may have been down when it did) is only recorded, never run again.
	dir := runrec.Dir(w.base.Config.RunDir(job.RunID))
	folder, ferr := dir.ReadResult()
	if ferr == nil && runrec.Final(folder.Status) {
		log.Info("run already ended; recording its completion", "status", folder.Status)
		return w.complete(ctx, log, job, task, folder)
	}
	prev, err := w.store.GetRun(ctx, job.RunID)
	known := err == nil || ferr == nil
	if err != nil && !errors.Is(err, bus.ErrNotFound) {
		return queue.Infra(err)
	}
	if err == nil && runrec.Final(prev.Status) {
		log.Info("run already finished; acknowledging without running", "status", prev.Status)
		return nil
	}
	if r, ok := w.q.(*queue.Redis); ok {
		ttl := w.c.Duration("heartbeat-ttl")
		got, refresh, release, err := r.Lock(ctx, "run:"+job.RunID, ttl)
		if err != nil {
			return queue.Infra(err)
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
		} else if err != nil && !errors.Is(err, bus.ErrNotFound) {
			return queue.Infra(err)
		}
	}

	opts := w.base
	opts.Task, opts.RunID = task, job.RunID
	// What can never work is found before anything is claimed or created.
	if err := w.checkInput(opts, task); err != nil {
		return queue.Permanent(err)
	}
	won, err := w.store.ClaimTask(ctx, task.ID, job.RunID)
	if err != nil {
		return queue.Infra(err)
	}
	if !won {
		cl, err := w.store.GetClaim(ctx, task.ID)
		if err != nil {
			return queue.Infra(err)
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
		if errors.Is(err, runtask.ErrSessionBusy) {
			// Another process still runs it (it held the job until its
			// lease ran out, e.g. through a store outage): not this job's
			// failure. Hand it back uncounted; once that process ends, the
			// run folder answers the next delivery.
			log.Info("session busy in another process; handing the job back")
			select {
			case <-time.After(2 * time.Second):
			case <-ctx.Done():
			}
			return queue.ErrInterrupted
		}
		return err
	}
	if res.Status == runrec.StatusCancelled && isStopped(stop) {
		log.Info("run checkpointed for shutdown; handing the job back", "steps", res.Steps)
		return queue.ErrInterrupted
	}
	return w.complete(ctx, log, job, task, res)
}

// checkInput refuses a job that can never run as it is: an unknown role or
// model alias, a repository that does not exist.
func (w *jobRunner) checkInput(opts runtask.Options, task runtask.Task) error {
	if _, err := loadRunRole(w.c, opts, task); err != nil {
		return err
	}
	// The job's own alias; the worker's --model was checked at start.
	if opts.ModelAlias == "" && task.Model != "" && opts.Model == nil && opts.Connect == nil && opts.Registry != nil {
		if _, err := opts.Registry.Lookup(task.Model); err != nil {
			return fmt.Errorf("task %s: %w", task.ID, err)
		}
	}
	if _, err := runtask.ResolveRepo(opts.Repo, task.Workspace, opts.Config); err != nil {
		return fmt.Errorf("task %s: %w", task.ID, err)
	}
	return nil
}

// complete records an ended run in the store from its receipt (the run
// folder's result; runtask's own store write may have failed) and closes its
// backlog claim. Both writes are idempotent, so a completion interrupted by
// a store outage is replayed until it is written.
func (w *jobRunner) complete(ctx context.Context, log *slog.Logger, job queue.Job, task runtask.Task, res runrec.Result) error {
	ctx = context.WithoutCancel(ctx)
	if err := w.store.PutRun(ctx, bus.RunFromResult(res)); err != nil {
		return queue.Infra(err)
	}
	err := w.store.CompleteTask(ctx, bus.Completion{
		TaskID: task.ID, Claimant: job.RunID, RunID: res.RunID, Outcome: res.Status,
		ModelAlias: res.ModelAlias, PromptTokens: res.PromptTokens,
		CompletionTokens: res.CompletionTokens, TotalTokens: res.TotalTokens,
	})
	switch {
	case errors.Is(err, bus.ErrConflict):
		// Completed already (a replay after the store came back, or a
		// redelivery), or claimed by another run: nothing left to do.
		log.Info("claim already closed; acknowledging", "detail", err)
		return nil
	case errors.Is(err, bus.ErrNotFound):
		log.Warn("run ended without a claim; acknowledging", "status", res.Status)
		return nil
	case err != nil:
		return queue.Infra(err)
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
	if err := writeJSONLine(w.d.Stdout, line); err != nil {
		log.Warn("print the job line", "err", err)
	}
	log.Info("run finished", "status", res.Status, "steps", res.Steps)
	return nil
}

// dead releases the claim of a job about to be dead-lettered: the claim is
// completed as failed with the reason, so that enqueueing the task again
// (or retrying the dead letter) runs it.
func (w *jobRunner) dead(ctx context.Context, dl *queue.Delivery, cause error) error {
	job, err := queue.ParseJob(dl.Payload)
	if err != nil {
		return nil // never parsed: it claimed nothing
	}
	task, err := runtask.ParseTask("job "+dl.ID, job.Task)
	if err != nil {
		return nil
	}
	err = w.store.CompleteTask(context.WithoutCancel(ctx), bus.Completion{
		TaskID: task.ID, Claimant: job.RunID, RunID: job.RunID, Outcome: runrec.StatusFailed,
		Reason: "dead-lettered: " + cause.Error(),
	})
	if err == nil || errors.Is(err, bus.ErrNotFound) || errors.Is(err, bus.ErrConflict) {
		return nil
	}
	return queue.Infra(err)
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
		Getenv: w.d.Getenv, Now: w.d.Now,
	})
	if err != nil {
		return "", fmt.Errorf("review: %w", err)
	}
	settings, err := forge.LoadSettings(cfg.ConfigFile)
	if err != nil {
		return "", err
	}
	dopts := forge.DraftOptions{
		RunDir: string(dir), Issue: issue, Settings: settings.Merge(forge.Settings{Timeout: cfg.ForgeTimeout}).WithDefaults(w.d.Getenv),
		Getenv: w.d.Getenv, Verdicts: w.store, Log: w.d.Log,
	}
	if l, ok := w.store.(bus.Locker); ok {
		dopts.Lock = l.Lock
	}
	pr, err := forge.OpenDraftPR(ctx, dopts)
	if err != nil {
		return "", fmt.Errorf("draft PR: %w", err)
	}
	return pr.PR.URL, nil
}

// waitFor calls open until it succeeds, retrying with backoff (one log
// line per outage) while its error matches unreachable; any other error, or
// the end of ctx, is returned.
func waitFor[T any](ctx context.Context, log *slog.Logger, what string, unreachable error, open func() (T, error)) (T, error) {
	bo := queue.Backoff{Min: 500 * time.Millisecond, Max: 30 * time.Second}
	logged := false
	for {
		v, err := open()
		if err == nil {
			if logged {
				log.Info(what + " reachable again")
			}
			return v, nil
		}
		if !errors.Is(err, unreachable) {
			return v, err
		}
		if !logged {
			log.Warn(what+" unreachable; retrying with backoff", "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(bo.Next()):
		}
	}
}

// errNeverMatches is an unreachable sentinel no error matches.
var errNeverMatches = errors.New("never matches")

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
	sb, err := d.openSandbox(c, cmp.Or(d.config(c).Sandbox, role.SandboxBackend(), sandbox.BackendAuto), opts.RunID)
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
