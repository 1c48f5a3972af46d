package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/ctxwait"
	"github.com/conductor-dev/conductor/conductor/queue"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/runtask"
)

// WorkerOptions configure a queue worker: what every run shares, where the
// jobs come from and where the records go.
type WorkerOptions struct {
	// Run is what every run shares (model, registry, repository, config,
	// events); Task, RunID, Role and Sandbox are set per job.
	Run runtask.Options
	// RolesDir is the operator's roles folder ("" = the repository's roles/).
	RolesDir string
	// Sandbox is the operator's backend ("" = the role's).
	Sandbox   string
	Sandboxes Sandboxes

	// OpenStore and OpenQueue are dialled at start; while they answer
	// bus.ErrUnreachable / queue.ErrUnreachable they are retried with
	// backoff unless Once is set (cron: the next round tries again).
	OpenStore func() (bus.Store, error)
	OpenQueue func() (queue.Queue, error)

	// LockTTL is how long the per-run lock of a queue.RunLocker lives
	// without a refresh (the consumers' heartbeat TTL).
	LockTTL time.Duration

	// Concurrency is how many jobs are in their model conversation at
	// once; Finishing how many more may be past it, extracting their patch
	// and writing their records; Prefetch how many are taken ahead of a
	// free lane (queue.Consumer).
	Concurrency int
	Finishing   int
	Prefetch    int
	Wait        time.Duration // one take's wait (WORKER_BLPOP_TIMEOUT_S)
	Once        bool
	Grace       time.Duration

	// Unattended is the path after a successful run that asks for a draft
	// PR (a task's or job's "pr", or its role's).
	Unattended Unattended

	// RoleIDs are the operator's roleId → role mappings for seed jobs.
	RoleIDs map[string]string

	// Consumer names this worker process (host:pid:n): its heartbeat row.
	Consumer string
	// Now is the clock of the heartbeat (default time.Now).
	Now func() time.Time

	// Out gets one JSON line per run the worker finished or recorded.
	Out io.Writer
	Log *slog.Logger
}

// WorkerStats is what a worker did, for its last line.
type WorkerStats struct {
	queue.Stats
	Repaired int  // store records repaired from the run folders at start
	Consumed bool // the store and the queue answered and jobs were taken
}

// Serve runs a queue worker until ctx ends (or, with Once, one round is
// done). The error is a configuration error, or ctx's when it ended while
// the store or the queue was being waited for.
func Serve(ctx context.Context, o WorkerOptions) (WorkerStats, error) {
	var stats WorkerStats
	never := func(err error) error { return err }
	if o.Once {
		never = func(error) error { return errNeverMatches }
	}
	st, err := WaitFor(ctx, o.Log, "bus store", never(bus.ErrUnreachable), o.OpenStore)
	if err != nil {
		return stats, err
	}
	// Repair what a completion lost to an outage (or an older conductor)
	// left: the run folders are the source.
	cfg := o.Run.Config
	if reps, err := bus.Reconcile(ctx, st, cfg.RunsDir()); err != nil {
		o.Log.Warn("reconcile the store with the run folders", "err", err)
	} else if len(reps) > 0 {
		stats.Repaired = len(reps)
		o.Log.Info("store repaired from the run folders", "runs", len(reps))
	}
	q, err := WaitFor(ctx, o.Log, "queue", never(queue.ErrUnreachable), o.OpenQueue)
	if err != nil {
		return stats, err
	}
	defer q.Close()
	// The worker's heartbeat: mission control shows it, with its jobs in
	// flight, until the worker stops (or goes silent).
	now := o.Now
	if now == nil {
		now = time.Now
	}
	h := &Handler{o: o, store: st, q: q}
	cons := &queue.Consumer{
		Queue: q, Handle: h.Handle, OnDead: h.Dead, Concurrency: o.Concurrency, Finishing: o.Finishing, Prefetch: o.Prefetch,
		StartAhead: true, // Handle takes its lane (dl.Lane) after the run's lookups, lock and checks
		Wait:       o.Wait, Once: o.Once, Grace: o.Grace, Log: o.Log,
	}
	stopBeat := startWorkerBeat(ctx, st, o.Log, o.Consumer, q.Name(), o.Concurrency, cons.Occupancy, o.LockTTL, now)
	defer stopBeat()
	stats.Consumed = true
	stats.Stats, err = cons.Run(ctx)
	return stats, err
}

// Handler runs queue jobs as worker runs (queue.Handler and queue.DeadHook).
type Handler struct {
	o     WorkerOptions
	store bus.Store
	q     queue.Queue
}

// NewHandler is a job handler on store and q, for a consumer of one's own.
func NewHandler(o WorkerOptions, store bus.Store, q queue.Queue) *Handler {
	return &Handler{o: o, store: store, q: q}
}

// Handle maps the job onto a task, makes delivery idempotent by run id,
// claims the backlog item, runs or resumes, and completes the claim.
//
// Its errors tell the consumer what to do with the job: input that can never
// run (not JSON, an unknown role or model, a missing repository, a brief or
// role prompt that cannot be read at the base commit) is queue.Permanent and
// dead-lettered at once, before anything is created; a store or queue
// failure is queue.Infra and retried with the job kept leased, never counted
// as an attempt; anything else counts a failed attempt.
func (h *Handler) Handle(ctx context.Context, stop <-chan struct{}, dl *queue.Delivery) error {
	job, task, err := parse(dl, h.o.RoleIDs)
	if err != nil {
		return queue.Permanent(err)
	}
	log := h.o.Log.With("job", dl.ID, "run", job.RunID, "task", task.ID, "attempt", dl.Attempt)

	// The run folder is the source of truth: a run it says ended (the store
	// may have been down when it did) is only recorded, never run again.
	dir := runrec.Dir(h.o.Run.Config.RunDir(job.RunID))
	folder, ferr := dir.ReadResult()
	if ferr == nil && runrec.Final(folder.Status) {
		log.Info("run already ended; recording its completion", "status", folder.Status)
		h.ensureRoleComplete(ctx, log, folder)
		return h.complete(ctx, log, job, task, folder, nil)
	}
	prev, err := h.store.GetRun(ctx, job.RunID)
	known := err == nil || ferr == nil
	if err != nil && !errors.Is(err, bus.ErrNotFound) {
		return queue.Infra(err)
	}
	if err == nil && runrec.Final(prev.Status) {
		log.Info("run already finished; acknowledging without running", "status", prev.Status)
		return nil
	}
	if l, ok := h.q.(queue.RunLocker); ok {
		release, err := h.lockRun(ctx, log, l, job.RunID)
		if err != nil || release == nil {
			return err
		}
		defer release()
		if prev, err := h.store.GetRun(ctx, job.RunID); err == nil && runrec.Final(prev.Status) {
			log.Info("run finished meanwhile; acknowledging", "status", prev.Status)
			return nil
		} else if err != nil && !errors.Is(err, bus.ErrNotFound) {
			return queue.Infra(err)
		}
	}

	opts := h.o.Run
	opts.Task, opts.RunID = task, job.RunID
	// What can never work is found before anything is claimed or created.
	if err := h.checkInput(ctx, opts, task, known || job.Resume); err != nil {
		return queue.Permanent(err)
	}
	// The claim starts now, in the background: a prefetched job holds it
	// before a lane frees, and a run asks for it (Options.Claim) once its
	// first model request is out, so its commit overlaps the model's first
	// answer either way. A claim is the run's: a job handed back and run
	// again under the same run id finds it its own.
	claim := sync.OnceValues(func() (bool, error) {
		won, err := h.store.ClaimTask(ctx, task.ID, job.RunID)
		if err != nil {
			return false, queue.Infra(err)
		}
		if won {
			h.emit(ctx, log, bus.EventClaimed, job.RunID, task.ID, map[string]any{"harnessAlias": task.Harness, "role": task.Role, "shape": job.Shape})
			return true, nil
		}
		cl, err := h.store.GetClaim(ctx, task.ID)
		if err != nil {
			return false, queue.Infra(err)
		}
		if cl.Claimant != job.RunID {
			log.Warn("backlog item already claimed by another run; acknowledging", "claimant", cl.Claimant)
			return false, nil
		}
		return true, nil
	})
	go claim()
	defer claim() // never returns while its claim is on the way
	opts.Claim = func(context.Context) (bool, error) { return claim() }

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel() // the loop stops at its next step boundary and checkpoints
		case <-runCtx.Done():
		}
	}()
	if err := Prepare(h.o.RolesDir, h.o.Sandbox, h.o.Sandboxes, &opts); err != nil {
		return err
	}
	defer h.o.Sandboxes.close(opts.Sandbox)
	opts.Store = h.store
	rows := &rowsPut{}
	opts.RunRowPut = rows.put
	opts.LoopDone = dl.LoopDone
	// Everything above needs no lane: a prefetched job did it while the
	// lanes were busy, and starts its conversation as soon as one frees.
	if err := dl.Lane(runCtx); err != nil {
		return err // shutting down: handed back uncounted
	}
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
		if errors.Is(err, runtask.ErrNotClaimed) {
			return nil // acknowledged: the other run's
		}
		if errors.Is(err, runtask.ErrSessionBusy) {
			// Another process still runs it (it held the job until its
			// lease ran out, e.g. through a store outage): not this job's
			// failure. Hand it back uncounted; once that process ends, the
			// run folder answers the next delivery.
			log.Info("session busy in another process; handing the job back")
			ctxwait.Sleep(ctx, 2*time.Second)
			return queue.ErrInterrupted
		}
		return err
	}
	if res.Status == runrec.StatusCancelled && isStopped(stop) {
		log.Info("run checkpointed for shutdown; handing the job back", "steps", res.Steps)
		return queue.ErrInterrupted
	}
	return h.complete(ctx, log, job, task, res, rows)
}

// rowsPut keeps the last run row the store took from a run
// (runtask.Options.RunRowPut), so the completion does not write the same
// row again.
type rowsPut struct {
	mu   sync.Mutex
	last *bus.Run
}

func (s *rowsPut) put(r bus.Run, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = nil
	if err == nil {
		s.last = &r
	}
}

// has reports whether r is the last row the store took.
func (s *rowsPut) has(r bus.Run) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last != nil && reflect.DeepEqual(*s.last, r)
}

// lockRun takes the run's lock on a queue that has one. A nil release with
// a nil error means another consumer holds it: the job was handed back.
func (h *Handler) lockRun(ctx context.Context, log *slog.Logger, l queue.RunLocker, runID string) (func(), error) {
	ttl := h.o.LockTTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	got, refresh, release, err := l.Lock(ctx, "run:"+runID, ttl)
	if err != nil {
		return nil, queue.Infra(err)
	}
	if !got {
		// Another consumer runs it (a redelivery raced a slow heartbeat):
		// hand it back without counting an attempt.
		log.Info("run is held by another consumer; handing the job back")
		ctxwait.Sleep(ctx, min(ttl/2, 2*time.Second))
		return nil, queue.ErrInterrupted
	}
	lctx, stopRefresh := context.WithCancel(ctx)
	go keepRefreshed(lctx, refresh, ttl/3)
	return func() {
		stopRefresh()
		release(context.WithoutCancel(ctx))
	}, nil
}

// checkInput refuses a job that can never run as it is: an unknown role or
// model alias, a repository that does not exist, a brief or a role prompt
// file that cannot be used at the base commit. resuming skips the prompt
// check: a resumed run keeps the prompt it started with.
func (h *Handler) checkInput(ctx context.Context, opts runtask.Options, task runtask.Task, resuming bool) error {
	role, err := LoadRole(h.o.RolesDir, opts, task)
	if err != nil {
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
	if resuming {
		return nil
	}
	// The role file and the brief at the base commit: a brief outside the
	// repository or missing there, a role file that is not UTF-8 text or
	// is over the role's prompt limit can never run.
	opts.Role = role
	_, err = runtask.CheckPrompt(ctx, opts)
	return err
}

// complete records an ended run in the store from its receipt (the run
// folder's result; runtask's own store write may have failed) and closes its
// backlog claim. Both writes are idempotent, so a completion interrupted by
// a store outage is replayed until it is written. rows, for a run this
// handler just ran, holds the row the store took from it: that row is not
// written again.
func (h *Handler) complete(ctx context.Context, log *slog.Logger, job queue.Job, task runtask.Task, res runrec.Result, rows *rowsPut) error {
	ctx = context.WithoutCancel(ctx)
	if row := bus.RunFromResult(res); rows == nil || !rows.has(row) {
		if err := h.store.PutRun(ctx, row); err != nil {
			return queue.Infra(err)
		}
	}
	err := h.store.CompleteTask(ctx, bus.Completion{
		TaskID: task.ID, Claimant: job.RunID, RunID: res.RunID, Outcome: res.Status,
		ModelAlias: res.ModelAlias, HarnessAlias: res.HarnessAlias, PromptTokens: res.PromptTokens,
		CompletionTokens: res.CompletionTokens, TotalTokens: res.TotalTokens,
	})
	redelivered := false
	switch {
	case errors.Is(err, bus.ErrConflict):
		// Completed already, or claimed by another run. Completed by this
		// run (its process was killed between the completion and its
		// report, or the store came back): the run is reported again,
		// marked, so that no finished run goes unreported. Another run's
		// claim: nothing left to do.
		cl, cerr := h.store.GetClaim(ctx, task.ID)
		if cerr != nil && !errors.Is(cerr, bus.ErrNotFound) {
			return queue.Infra(cerr)
		}
		if cerr != nil || cl.Claimant != job.RunID || cl.Completion == nil || cl.Completion.RunID != res.RunID {
			log.Info("claim already closed; acknowledging", "detail", err)
			return nil
		}
		redelivered = true
	case errors.Is(err, bus.ErrNotFound):
		log.Warn("run ended without a claim; acknowledging", "status", res.Status)
		return nil
	case err != nil:
		return queue.Infra(err)
	}
	line := map[string]any{"runId": res.RunID, "taskId": res.TaskID, "status": res.Status, "steps": res.Steps,
		"patchId": res.PatchID, "harnessAlias": res.HarnessAlias}
	if redelivered {
		line["redelivered"] = true
		h.report(line)
		log.Info("run finished; its completion was recorded before this delivery", "status", res.Status, "steps", res.Steps)
		return nil
	}
	if h.opensPR(job, task) && res.Status == runrec.StatusSucceeded && res.PatchID != "" {
		pr, err := h.o.Unattended.Run(ctx, h.store, res, int64(task.Issue))
		if err != nil {
			// The run is done and recorded; the automation's failure is
			// reported, not retried (re-running would not change it).
			log.Warn("unattended review/PR stopped", "err", err)
			line["pr"] = "not opened: " + err.Error()
		} else {
			line["pr"] = pr
		}
	}
	h.report(line)
	log.Info("run finished", "status", res.Status, "steps", res.Steps)
	return nil
}

// report prints a finished run's line on the worker's output.
func (h *Handler) report(line map[string]any) {
	if h.o.Out != nil {
		out, _ := json.Marshal(line)
		fmt.Fprintln(h.o.Out, string(out))
	}
}

// opensPR reports whether a succeeded run of the job takes the unattended
// path to a draft PR: the task's "pr" ("on-success" or true; "never" or
// false), else its role's.
func (h *Handler) opensPR(job queue.Job, task runtask.Task) bool {
	switch task.PR {
	case runtask.PROnSuccess:
		return true
	case runtask.PRNever:
		return false
	}
	if job.PR {
		return true
	}
	opts := h.o.Run
	opts.Task = task
	role, err := LoadRole(h.o.RolesDir, opts, task)
	return err == nil && role.PR() == runtask.PROnSuccess
}

// Dead releases the claim of a job about to be dead-lettered: the claim is
// completed as failed with the reason, so that enqueueing the task again
// (or retrying the dead letter) runs it.
func (h *Handler) Dead(ctx context.Context, dl *queue.Delivery, cause error) error {
	job, task, err := parse(dl, h.o.RoleIDs)
	if err != nil {
		return nil // never parsed: it claimed nothing
	}
	err = h.store.CompleteTask(context.WithoutCancel(ctx), bus.Completion{
		TaskID: task.ID, Claimant: job.RunID, RunID: job.RunID, Outcome: runrec.StatusFailed,
		HarnessAlias: task.Harness, Reason: "dead-lettered: " + cause.Error(),
	})
	if err == nil || errors.Is(err, bus.ErrNotFound) || errors.Is(err, bus.ErrConflict) {
		return nil
	}
	return queue.Infra(err)
}

// ensureRoleComplete writes the role_complete event of a run that ended
// when its process was killed between its record and the event, so that
// every finished run has one; a run that wrote it is left alone. A store
// that cannot answer costs a warning, as every event does.
func (h *Handler) ensureRoleComplete(ctx context.Context, log *slog.Logger, res runrec.Result) {
	a, ok := h.store.(bus.AgentStore)
	if !ok {
		return
	}
	evs, err := a.ListEvents(ctx, bus.EventFilter{RunID: res.RunID})
	if err != nil {
		log.Warn("lifecycle events not read", "err", err)
		return
	}
	for _, e := range evs {
		if e.Kind == bus.EventRoleComplete {
			return
		}
	}
	if err := bus.Emit(context.WithoutCancel(ctx), h.store, bus.EventRoleComplete, res.RunID, res.TaskID, "conductor", runtask.RoleComplete(res)); err != nil {
		log.Warn("lifecycle event not recorded", "kind", bus.EventRoleComplete, "err", err)
	}
}

func (h *Handler) emit(ctx context.Context, log *slog.Logger, kind, runID, taskID string, md map[string]any) {
	if err := bus.Emit(context.WithoutCancel(ctx), h.store, kind, runID, taskID, "conductor worker", md); err != nil {
		log.Warn("lifecycle event not recorded", "kind", kind, "err", err)
	}
}

// parse is a delivery's job and task, or why it can never run.
func parse(dl *queue.Delivery, roleIDs map[string]string) (queue.Job, runtask.Task, error) {
	job, err := queue.ParseJobWith(dl.Payload, roleIDs)
	if err != nil {
		return job, runtask.Task{}, err
	}
	task, err := runtask.ParseTask("job "+dl.ID, job.Task)
	if err != nil {
		return job, task, err
	}
	if err := runrec.ValidRunID(job.RunID); err != nil {
		return job, task, fmt.Errorf("job %s: %w", dl.ID, err)
	}
	return job, task, nil
}

// WaitFor calls open until it succeeds, retrying with backoff (one log line
// per outage) while its error matches unreachable; any other error, or the
// end of ctx, is returned.
func WaitFor[T any](ctx context.Context, log *slog.Logger, what string, unreachable error, open func() (T, error)) (T, error) {
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
