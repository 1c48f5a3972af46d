package runtask

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/filelock"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/patch"
)

// Options configures one run.
type Options struct {
	Task     Task
	TaskPath string // the task file (its folder anchors a relative brief path)
	Config   conductor.Config

	Repo         string // --repo: the workspace repository (else WORKER_REPO_ROOT/<workspace>, else the conductor's clone)
	WorktreeBase string // default Config.WorktreeBase (WORKER_WORKTREE_BASE, else <data root>/worktrees)

	ModelAlias string      // --model; else the task's model
	Model      ModelClient // the model; if nil, Connect builds it
	ModelName  string      // the resolved model name, when Model is given
	// Connect builds the model client for an alias and returns the model
	// name and the names of environment variables that hold its credentials
	// (never passed to commands). The CLI wires the registry here.
	Connect func(alias string) (client ModelClient, model string, secretEnv []string, err error)
	// Registry resolves the alias when neither Model nor Connect is given.
	Registry *Registry
	// ModelSlots, when set, makes an alias's maxConcurrent hold across
	// processes and hosts (registry clients and pi's proxy).
	ModelSlots ModelSlots

	Role    RolePolicy      // required
	Sandbox sandbox.Sandbox // commands run only through it; nil: run_command fails for the model
	Store   bus.Store       // may be nil: the run folder is then the only record
	// RunRowPut, when set, hears each write of the run's row to Store and
	// its outcome (the queue's completion then skips writing the same row).
	RunRowPut func(row bus.Run, err error)
	// LoopDone, when set, is called once the model conversation has ended
	// (no more model requests), before the patch is extracted and the
	// records written: the queue hands the job's lane to its next job.
	LoopDone func()
	// Claim, when set, takes the task for this run; it is called once,
	// after the round's first model request went out and before the run's
	// folder exists (the claim's store commit overlaps the model's first
	// answer). false: another run holds the task, and Run returns
	// ErrNotClaimed, having cancelled that request and made nothing.
	Claim func(ctx context.Context) (bool, error)

	FollowUp     string // a refinement round: the session continues with this user message
	KeepWorktree bool   // keep the worktree after the run (it stays with the session)
	RunID        string // preset (the queue's idempotency key); else generated
	AcceptDrift  bool   // resume even if files changed since the checkpoint (noted to the model)
	// ContextWindow is the model's context in tokens (0: the registry's for
	// the alias; still 0: unknown, nothing is trimmed).
	ContextWindow int

	Events io.Writer // progress: one line per step, or JSONL events with JSON
	JSON   bool
	// Getenv is the host environment (default os.Getenv), read for two
	// things only: the variables a command may receive (the role's
	// allowlist, commandEnv) and API keys (the model client). Every knob
	// (limits, pool, worktree base, repository root) comes from Config.
	Getenv func(string) string
	Stderr io.Writer // warnings (also kept in the run folder's stderr.txt)
	Now    func() time.Time
	// DeniedEnv are variable names never passed to commands, whatever the role says.
	DeniedEnv []string
}

// ErrSessionBusy is returned when another process runs the same session.
var ErrSessionBusy = errors.New("session is running in another process")

// ErrNotClaimed is returned when Options.Claim says another run holds the
// task.
var ErrNotClaimed = errors.New("the task is claimed by another run")

var errTimeout = errors.New("wall-clock limit reached")

// faultHook is called at the named points of a run's start; tests replace
// it to kill the process there (a no-op otherwise).
var faultHook = func(point string) {}

// Fault points: the start record is written (run folder, task, result.json,
// the store's row) but no session state yet; the worktree is taken but the
// state that names it is not saved yet.
const (
	faultStarted  = "started"
	faultAcquired = "acquired"
)

// Run runs one task: a new session, the continuation of an interrupted run
// of the same session, or (with FollowUp) a refinement round. It returns the
// run's receipt; the error is non-nil only when the run could not be started
// or its record could not be written. The status tells how the worker ended.
func Run(ctx context.Context, opts Options) (runrec.Result, error) {
	r, err := newRunner(opts)
	if err != nil {
		return runrec.Result{}, err
	}
	return r.run(ctx, "")
}

// Resume continues an interrupted run (crash, cancellation, drift) from the
// session state, else from the store's latest checkpoint. The task is read
// from the run folder when opts.Task is empty. A finished run is returned as
// it is.
func Resume(ctx context.Context, opts Options, runID string) (runrec.Result, error) {
	if err := runrec.ValidRunID(runID); err != nil {
		return runrec.Result{}, err
	}
	opts.Config = opts.Config.WithDefaults()
	dir := runrec.Dir(opts.Config.RunDir(runID))
	prev, err := dir.ReadResult()
	if err != nil {
		if opts.Store == nil {
			return runrec.Result{}, fmt.Errorf("resume %s: %w", runID, err)
		}
		if _, serr := opts.Store.GetRun(ctx, runID); serr != nil {
			return runrec.Result{}, fmt.Errorf("resume %s: no run record here and none in the store: %w", runID, serr)
		}
	}
	if opts.Repo == "" && prev.Repo != "" {
		opts.Repo = prev.Repo
	}
	if opts.Task.TaskVersion == 0 {
		t, err := LoadTask(dir.Path(runrec.TaskFile))
		if err != nil {
			return runrec.Result{}, fmt.Errorf("resume %s: %w", runID, err)
		}
		opts.Task = t
	}
	if runrec.Final(prev.Status) && !prev.Resumable {
		return prev, nil
	}
	opts.RunID = runID
	r, err := newRunner(opts)
	if err != nil {
		return runrec.Result{}, err
	}
	r.reopen = prev.Resumable
	return r.run(ctx, runID)
}

func getenvOr(f func(string) string) func(string) string {
	if f == nil {
		return os.Getenv
	}
	return f
}

// runner is one run in progress.
type runner struct {
	opts        Options
	restartBase string // set by neverSaved: the base a run killed before its first save starts over from
	task        Task
	cfg         conductor.Config
	getenv      func(string) string
	now         func() time.Time
	lim         limits
	tools       []string

	repo     patch.Git
	pool     *Pool
	lease    *Lease
	root     *os.Root
	tb       *toolbox
	model    ModelClient
	sessDir  string
	state    *sessionState
	runDir   runrec.Dir
	log      *runrec.Log
	stderr   io.Writer
	errFile  *os.File
	ev       *emitter
	touched  touchedSet
	hazards  []runrec.Hazard // what the worktree scans found, for the result
	scratch  string
	recorded map[string]transcriptLine // results of an interrupted turn's calls (loop start only)
	result   runrec.Result
	started  time.Time
	stopText string
	pi       PiInstall // the pi install, for runtime pi
	// outside: the loop failed from an outside cause (model server, disk):
	// the run is recorded resumable. reopen: Resume continues such a run.
	outside, reopen bool
	// knownChanges: the worktree was taken clean by this process and only
	// file tools changed it, so touched and the extraction name every path
	// that differs from the base (see Lease.ReleaseKnown).
	knownChanges bool
	// saving: a step's save still being made durable while the next model
	// request is out (saveBehind); settle waits for it.
	saving   behind[error]
	stateSeq int64 // the number of the session state's last save (writeState)
	// The other writes still being made while the run goes on: the
	// start's store row and event (recordStart, settleStart) and a
	// checkpoint (checkpointBehind, settleCheckpoint).
	starting      behind[startOutcome]
	checkpointing behind[checkpointOutcome]
	handedOff     sync.Once      // Options.LoopDone called
	first         *firstRequest  // the round's first request, sent early (sendFirst)
	announced     atomic.Bool    // the "start" event is out
	storeDown     bool           // the bus store failed: warned once, until it answers again
	promptSources []PromptSource // the files the system prompt came from
}

func newRunner(opts Options) (*runner, error) {
	if err := opts.Task.Validate(); err != nil {
		return nil, fmt.Errorf("task %s: %w", opts.TaskPath, err)
	}
	if opts.Role == nil {
		return nil, errors.New("run-task: no role contract given")
	}
	r := &runner{opts: opts, task: opts.Task, getenv: getenvOr(opts.Getenv), now: opts.Now}
	if r.now == nil {
		r.now = time.Now
	}
	r.cfg = opts.Config.WithDefaults()
	if b := r.task.Brief; b != "" && opts.TaskPath != "" && !filepath.IsAbs(b) {
		// Beside the task file: the run folder's task.json names the file
		// itself, so that a later round read from there finds it.
		if abs, err := filepath.Abs(filepath.Join(filepath.Dir(opts.TaskPath), b)); err == nil {
			r.task.Brief = abs
		}
	}
	r.lim = resolveLimits(r.task, opts.Role, r.cfg)
	var denied []string
	for _, t := range r.task.Tools() {
		if opts.Role.AllowsTool(t) {
			r.tools = append(r.tools, t)
		} else {
			denied = append(denied, t)
		}
	}
	if len(r.tools) == 0 {
		return nil, refusal.Newf("tools-not-allowed", "ask for tools the role allows, or use another role",
			"role %s allows none of the task's tools (%s)", opts.Role.Name(), strings.Join(r.task.Tools(), ", "))
	}
	r.stopText = strings.Join(denied, ", ")
	// The task picks the runtime, else its role; the run records which.
	if rr, ok := opts.Role.(interface{ Runtime() string }); ok && r.task.Runtime == "" {
		r.task.Runtime = rr.Runtime()
	}
	if r.task.Runtime == RuntimePi {
		// Before anything is created: a run that cannot start leaves nothing.
		install, err := checkRuntime(r.task.Runtime, r.cfg.PiDir)
		if err != nil {
			return nil, refusal.Newf("runtime-unavailable", "install pi (make pi, or npm install --prefix DIR "+piPackage+"@"+PiVersion+" and CONDUCTOR_PI_DIR=DIR), or use the builtin runtime",
				"task %s asks for runtime pi: %v", r.task.ID, err)
		}
		r.pi = install
	}
	if opts.RunID != "" {
		if err := runrec.ValidRunID(opts.RunID); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (r *runner) warnf(format string, args ...any) {
	if r.stderr != nil {
		fmt.Fprintf(r.stderr, "conductor: "+format+"\n", args...)
	}
}

// drainSlots waits until the model slots of the run's requests are back.
func (r *runner) drainSlots() {
	if d, ok := r.model.(interface{ Drain() }); ok {
		d.Drain()
	}
}

// run does the whole run; resumeID is set for an explicit Resume.
func (r *runner) run(ctx context.Context, resumeID string) (res runrec.Result, err error) {
	defer r.drainSlots() // the model slots the run's requests held are back when it returns
	t := r.task
	r.repo, err = ResolveRepo(r.opts.Repo, t.Workspace, r.cfg)
	if err != nil {
		return res, err
	}
	wtBase := cmp.Or(r.opts.WorktreeBase, r.cfg.WorktreeBase)
	// What doctor checks, before anything is made: the sandbox's uid must
	// reach the worktrees and the scratch folder (a data root under a
	// private home would fail only at the first command).
	if rc, ok := r.opts.Sandbox.(interface{ Reachable(string) error }); ok {
		for _, dir := range []string{wtBase, filepath.Join(r.cfg.DataRoot, "scratch")} {
			abs, _ := filepath.Abs(dir)
			if err := rc.Reachable(abs); err != nil {
				return res, refusal.Newf("sandbox-unavailable", "run conductor doctor; use a data root the sandbox user can reach (CONDUCTOR_HOME=/var/lib/conductor, or WORKER_WORKTREE_BASE), or open the folder named above",
					"the sandbox cannot reach %s: %v", dir, err)
			}
		}
	}
	r.pool = NewPool(wtBase, r.repo, r.cfg)
	r.pool.Now = r.now

	// One process per session.
	r.sessDir = sessionDir(r.cfg, t.Workspace, t.Session)
	slock, err := filelock.TryLock(filepath.Join(r.sessDir, "session.lock"))
	if err != nil {
		return res, err
	}
	if slock == nil {
		return res, fmt.Errorf("session %s/%s: %w", t.Workspace, t.Session, ErrSessionBusy)
	}
	defer filelock.Unlock(slock)

	// An already finished run id is answered from its record (idempotent
	// redelivery).
	if r.opts.RunID != "" && !r.reopen {
		if prev, err := runrec.Dir(r.cfg.RunDir(r.opts.RunID)).ReadResult(); err == nil && runrec.Final(prev.Status) {
			return prev, r.claim(ctx)
		}
	}
	r.state, r.stateSeq, err = loadState(r.sessDir)
	if err != nil {
		return res, err
	}
	mode, err := r.chooseMode(ctx, resumeID)
	if err != nil {
		return res, err
	}
	if mode == modeFinished {
		if err := r.claim(ctx); err != nil {
			return res, err
		}
		return runrec.Dir(r.cfg.RunDir(r.state.RunID)).ReadResult()
	}
	return r.execute(ctx, mode)
}

// neverSaved reports whether run resumeID was killed after its start
// record but before its session state's first save (issue 23.2): no state
// of the session, no checkpoint in the store (none there, or no store),
// its record still running at step 0 and an empty transcript. Such a run
// did nothing yet (no tool step; its first model request may have gone out
// early, but no reply was used), so it starts over under the same id from
// its recorded base commit (r.restartBase).
func (r *runner) neverSaved(ctx context.Context, resumeID string, st *sessionState) bool {
	if st != nil {
		return false
	}
	if r.opts.Store != nil {
		if _, err := r.opts.Store.LatestCheckpoint(ctx, resumeID); !errors.Is(err, bus.ErrNotFound) {
			return false // a checkpoint, or a store that cannot say
		}
	}
	dir := runrec.Dir(r.cfg.RunDir(resumeID))
	res, err := dir.ReadResult()
	if err != nil || runrec.Final(res.Status) || res.Steps != 0 || res.BaseCommit == "" ||
		res.Session != r.task.Session || (res.Repo != "" && res.Repo != r.repo.CommonDir()) {
		return false
	}
	if fi, err := os.Stat(dir.Path(runrec.TranscriptFile)); err == nil && fi.Size() > 0 {
		return false
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	r.restartBase = res.BaseCommit
	return true
}

type runMode int

const (
	modeNew      runMode = iota // a new session
	modeFollowUp                // a new run continuing a finished session
	modeContinue                // the same run continues (crash, cancel, drift, resume)
	modeFinished                // nothing to do: the run already finished
)

func (r *runner) chooseMode(ctx context.Context, resumeID string) (runMode, error) {
	st := r.state
	t := r.task
	if resumeID != "" {
		if st != nil && st.RunID == resumeID {
			if runrec.Final(st.Status) && !r.reopen {
				return modeFinished, nil
			}
			return modeContinue, nil
		}
		cp, err := r.checkpointState(ctx, resumeID)
		if err != nil {
			if r.neverSaved(ctx, resumeID, st) {
				return modeNew, nil
			}
			return 0, err
		}
		if st != nil && !runrec.Final(st.Status) {
			return 0, fmt.Errorf("resume %s: session %s has another unfinished run %s", resumeID, t.Session, st.RunID)
		}
		r.state = cp
		return modeContinue, nil
	}
	if st == nil {
		if r.opts.FollowUp != "" {
			return 0, refusal.Newf("session-unknown", "dispatch the task first, then refine it with --follow-up",
				"session %s/%s has no earlier run to follow up", t.Workspace, t.Session)
		}
		return modeNew, nil
	}
	if st.Repo != r.repo.CommonDir() {
		return 0, refusal.Newf("session-repo-mismatch", "use a new session name for another repository",
			"session %s/%s belongs to repository %s, not %s", t.Workspace, t.Session, st.Repo, r.repo.CommonDir())
	}
	if !runrec.Final(st.Status) {
		if r.opts.RunID != "" && r.opts.RunID != st.RunID {
			return 0, refusal.Newf("session-unfinished", "resume it with `conductor run-task resume "+st.RunID+"` or use a new session",
				"session %s/%s has an unfinished run %s", t.Workspace, t.Session, st.RunID)
		}
		return modeContinue, nil
	}
	if r.opts.FollowUp == "" {
		return 0, refusal.Newf("session-finished", "pass --follow-up TEXT for a refinement round, or use a new session name",
			"session %s/%s already finished run %s (%s)", t.Workspace, t.Session, st.RunID, st.Status)
	}
	return modeFollowUp, nil
}

// execute runs one round of the session, in its real steps: the session
// state for the mode, the model, the run folder, the start record, the
// worktree and its toolbox, the conversation, then the runtime's turn.
func (r *runner) execute(ctx context.Context, mode runMode) (runrec.Result, error) {
	r.started = r.now()
	if err := r.startState(ctx, mode); err != nil {
		return runrec.Result{}, err
	}
	// Model: resolved before the run folder exists, so that an unknown
	// alias or a missing key leaves no phantom run behind.
	sess, secretEnv, err := r.resolveModel(mode)
	if err != nil {
		return runrec.Result{}, err
	}
	// A new round's opening needs neither the records nor a worktree: its
	// first request goes out while they are written and the worktree is
	// taken (sendFirst). A continued run checks its worktree for drift
	// first.
	var openErr error // recorded as the run's failure once the run folder exists
	if mode != modeContinue && r.task.Runtime != RuntimePi && !r.notesWaiting(ctx) {
		var msgs []openai.ChatCompletionMessage
		if msgs, openErr = r.opening(ctx, mode); openErr == nil {
			r.sendFirst(ctx, msgs)
		}
	}
	if err := r.claim(ctx); err != nil {
		r.dropFirst()
		return runrec.Result{}, err
	}
	closeFolder, err := r.openRunFolder()
	if err != nil {
		r.dropFirst()
		return runrec.Result{}, err
	}
	defer closeFolder()
	if err := r.recordStart(ctx, mode); err != nil {
		r.dropFirst()
		return runrec.Result{}, err
	}
	faultHook(faultStarted)
	if openErr != nil {
		return r.fail(ctx, openErr)
	}
	closeWorktree, err := r.prepareWorktree(ctx, mode, secretEnv)
	if err != nil {
		return r.fail(ctx, err)
	}
	defer closeWorktree()
	drift, err := r.openConversation(ctx, mode)
	switch {
	case err != nil:
		return r.fail(ctx, err)
	case drift != "":
		return r.finish(ctx, StatusDrift, drift)
	}
	st, t := r.state, r.task
	st.Status = runrec.StatusRunning
	save := r.save
	if r.first != nil {
		// The first request is out: this save overlaps its answer, and
		// the loop settles it before it acts on the answer (saveBehind).
		save = r.saveBehind
	}
	if err := save(); err != nil {
		return r.fail(ctx, err)
	}
	r.settleStart()
	r.ev.emit(Event{Event: "start", Time: r.now(), RunID: st.RunID, Text: fmt.Sprintf("task %s, session %s, model %s, worktree %s", t.ID, t.Session, st.ModelAlias, r.lease.Dir())})
	r.announced.Store(true)
	status, msg := sess.Turn(ctx)
	r.handOff()
	return r.finish(ctx, status, msg)
}

// handOff tells Options.LoopDone, once, that the conversation has ended:
// the queue gives the job's lane to its next job. The next job on this
// lane finds the model slots free, not still on their way back.
func (r *runner) handOff() {
	if r.opts.LoopDone == nil {
		return
	}
	r.handedOff.Do(func() {
		r.drainSlots()
		r.opts.LoopDone()
	})
}

// claim takes the task through Options.Claim (nil: nothing to take).
func (r *runner) claim(ctx context.Context) error {
	if r.opts.Claim == nil {
		return nil
	}
	won, err := r.opts.Claim(ctx)
	if err != nil {
		return err
	}
	if !won {
		return ErrNotClaimed
	}
	return nil
}

// firstRequest is a round's first model request, sent while the worktree
// is taken.
type firstRequest struct {
	msgs   []openai.ChatCompletionMessage // as sent
	done   chan struct{}
	reply  ModelReply
	err    error
	cancel context.CancelFunc
}

// sendFirst sends the conversation's first request in the background,
// under the run's wall-clock limit. The loop uses its reply only when the
// request it would send is the same one (takeFirst); nothing acts on the
// reply before the worktree is taken and the state saved.
func (r *runner) sendFirst(ctx context.Context, msgs []openai.ChatCompletionMessage) {
	fctx, cancel := context.WithDeadlineCause(ctx, r.started.Add(r.lim.Timeout), errTimeout)
	f := &firstRequest{msgs: msgs, done: make(chan struct{}), cancel: cancel}
	progress := r.streamProgress(1)
	fctx = WithStreamProgress(fctx, func(p StreamProgress) {
		if r.announced.Load() { // never a "stream" event before "start"
			progress(p)
		}
	})
	req := ModelRequest{Messages: f.msgs, Tools: toolDefs(r.tools)}
	go func() {
		defer close(f.done)
		f.reply, f.err = r.model.Complete(fctx, req)
	}()
	r.first = f
}

// takeFirst returns the early request's reply when msgs is what it sent.
// Otherwise (a note was delivered, the context trimmed) the early reply is
// dropped and ok is false: the loop asks again.
func (r *runner) takeFirst(msgs []openai.ChatCompletionMessage) (reply ModelReply, err error, ok bool) {
	f := r.first
	if f == nil {
		return ModelReply{}, nil, false
	}
	if !reflect.DeepEqual(f.msgs, msgs) {
		r.dropFirst()
		return ModelReply{}, nil, false
	}
	<-f.done
	f.cancel()
	r.first = nil
	return f.reply, f.err, true
}

// dropFirst cancels an early request the loop did not use and waits for
// it; a reply that came anyway is counted (its tokens were spent).
func (r *runner) dropFirst() {
	f := r.first
	if f == nil {
		return
	}
	r.first = nil
	f.cancel()
	<-f.done
	if f.err == nil {
		r.countTokens(f.reply)
	}
}

// startState sets up the session state for the mode: a new session (from
// its base commit), a follow-up round (a new run id), or a continued run.
func (r *runner) startState(ctx context.Context, mode runMode) error {
	t, st := r.task, r.state
	switch mode {
	case modeNew:
		base := r.restartBase
		if base == "" {
			var err error
			if base, err = ResolveBase(ctx, r.repo, t.Base); err != nil {
				return err
			}
		}
		st = &sessionState{Version: 1, Workspace: t.Workspace, Session: t.Session, Repo: r.repo.CommonDir(),
			PoolDir: r.pool.Dir, BaseCommit: base}
		r.state = st
		fallthrough
	case modeFollowUp:
		st.RunID = r.opts.RunID
		if st.RunID == "" {
			st.RunID = NewRunID(r.started)
		}
		st.TaskID, st.Status, st.Step, st.Started = t.ID, runrec.StatusRunning, 0, r.started
		st.Tokens, st.Repeats, st.History = tokenCount{}, map[string]int{}, nil
	case modeContinue:
		if st.Repeats == nil {
			st.Repeats = map[string]int{}
		}
		st.Status = runrec.StatusRunning
	}
	return nil
}

// resolveModel picks the model alias and the runtime's session: pi (which
// talks to the model through the proxy) or the built-in loop with a model
// client. It returns the environment names commands never get (the
// denied list plus the model's key variable).
func (r *runner) resolveModel(mode runMode) (WorkerSession, []string, error) {
	t, st := r.task, r.state
	alias := cmp.Or(r.opts.ModelAlias, t.Model, st.ModelAlias)
	if alias == "" && r.opts.Model == nil && r.opts.Connect == nil && r.opts.Registry != nil {
		alias = r.opts.Registry.Default()
	}
	secretEnv := r.opts.DeniedEnv
	r.model = r.opts.Model
	modelName := r.opts.ModelName
	var sess WorkerSession = builtinSession{r: r}
	if t.Runtime == RuntimePi {
		ps, err := r.newPiSession(mode, alias)
		if err != nil {
			return nil, nil, fmt.Errorf("model %q: %w", alias, err)
		}
		sess, modelName = ps, ps.spec.Model
		if ps.spec.APIKeyEnv != "" {
			secretEnv = append(append([]string(nil), secretEnv...), ps.spec.APIKeyEnv)
		}
	} else if r.model == nil {
		connect := r.opts.Connect
		if connect == nil && r.opts.Registry != nil {
			connect = r.connectRegistry
		}
		if connect == nil {
			return nil, nil, errors.New("run-task: no model client and no model registry")
		}
		client, name, secrets, err := connect(alias)
		if err != nil {
			return nil, nil, fmt.Errorf("model %q: %w", alias, err)
		}
		r.model, modelName = client, name
		secretEnv = append(append([]string(nil), secretEnv...), secrets...)
	}
	st.ModelAlias, st.Model = alias, cmp.Or(modelName, st.Model, alias)
	return sess, secretEnv, nil
}

// openRunFolder makes the run folder and opens what the run writes there
// as it goes: stderr.txt, the progress events and the transcript. The
// returned func closes them.
func (r *runner) openRunFolder() (func(), error) {
	r.runDir = runrec.Dir(r.cfg.RunDir(r.state.RunID))
	if err := os.MkdirAll(string(r.runDir), 0o755); err != nil {
		return nil, fmt.Errorf("run folder: %w", err)
	}
	errFile, err := os.OpenFile(r.runDir.Path(runrec.StderrFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("run folder: %w", err)
	}
	r.errFile = errFile
	r.stderr = errFile
	if r.opts.Stderr != nil {
		r.stderr = io.MultiWriter(r.opts.Stderr, errFile)
	}
	r.ev = &emitter{w: r.opts.Events, json: r.opts.JSON}
	if r.stopText != "" {
		r.warnf("the role %s does not allow %s: not offered to the model", r.opts.Role.Name(), r.stopText)
		r.stopText = ""
	}
	r.log, err = runrec.OpenLog(r.runDir.Path(runrec.TranscriptFile))
	if err != nil {
		errFile.Close()
		return nil, fmt.Errorf("transcript: %w", err)
	}
	return func() {
		r.log.Close()
		errFile.Close()
	}, nil
}

// recordStart writes the task as dispatched (a new round), the first
// result.json and the store's run row, and emits the started event.
func (r *runner) recordStart(ctx context.Context, mode runMode) error {
	if mode != modeContinue {
		if err := r.writeTask(); err != nil {
			return err
		}
	}
	r.result = r.baseResult()
	if err := r.runDir.WriteResult(r.result); err != nil {
		return fmt.Errorf("run record: %w", err)
	}
	if r.opts.Store == nil {
		return nil
	}
	// The store's row and the started event follow the folder's record
	// while the worktree is taken; settleStart waits for them before the
	// run's conversation and before any later row.
	t, st := r.task, r.state
	store, row := r.opts.Store, bus.RunFromResult(r.result)
	md := map[string]any{"runtime": cmp.Or(t.Runtime, RuntimeBuiltin), "harnessAlias": r.harness(),
		"modelAlias": st.ModelAlias, "session": t.Session, "resumed": mode == modeContinue}
	ctx = context.WithoutCancel(ctx)
	r.starting.start(func() startOutcome {
		out := startOutcome{row: row, rowErr: store.PutRun(ctx, row)}
		out.eventErr = bus.Emit(ctx, store, bus.EventStarted, row.ID, t.ID, "conductor", md)
		return out
	})
	return nil
}

// startOutcome is what the start's store writes returned.
type startOutcome struct {
	row              bus.Run
	rowErr, eventErr error
}

// settleStart waits for the start's store writes and reports them.
func (r *runner) settleStart() {
	out, ok := r.starting.settle()
	if !ok {
		return
	}
	r.rowPut(out.row, out.rowErr)
	r.storeResult(out.eventErr, "event "+bus.EventStarted)
}

// rowPut reports a write of the run's row to the store (storeResult,
// Options.RunRowPut).
func (r *runner) rowPut(row bus.Run, err error) {
	r.storeResult(err, "record run "+row.ID)
	if r.opts.RunRowPut != nil {
		r.opts.RunRowPut(row, err)
	}
}

// prepareWorktree takes the session's worktree, opens it as the tools'
// root and builds the toolbox: the commands' environment (secretEnv never
// in it), their scratch HOME, the read-only submodule folders. The
// returned func removes the scratch folder and closes the root.
func (r *runner) prepareWorktree(ctx context.Context, mode runMode, secretEnv []string) (func(), error) {
	if err := r.takeWorktree(ctx, mode); err != nil {
		return nil, fmt.Errorf("worktree: %w", err)
	}
	root, err := os.OpenRoot(r.lease.Dir())
	if err != nil {
		return nil, fmt.Errorf("worktree: %w", err)
	}
	r.root = root
	if mode == modeContinue {
		// A conductor killed inside an atomic write leaves its temp file.
		if n := sweepWriteTemps(root); n > 0 {
			r.warnf("removed %d temp file(s) left by an interrupted write", n)
		}
	}
	r.touched = touchedSet{}
	for _, f := range r.state.Files {
		r.touched[f.Path] = f.Hash
	}
	// Commands get HOME and TMPDIR in a scratch folder, made at the first
	// command (most steps run none) and removed with the run.
	r.scratch = filepath.Join(r.cfg.DataRoot, "scratch", r.state.RunID)
	env, dropped := commandEnv(r.getenv, r.opts.Role, r.scratch, secretEnv)
	if len(dropped) > 0 {
		r.warnf("never passed to commands (credential-like or reserved): %s", strings.Join(dropped, ", "))
	}
	// The base tree's submodule folders are read-only to commands
	// (defence in depth: the scan after each command is the boundary).
	gitlinks, _ := patch.IndexGitlinks(filepath.Join(r.lease.Meta.GitDir, "index"))
	r.tb = &toolbox{root: root, dir: r.lease.Dir(), git: r.lease.Git, role: r.opts.Role,
		allowed: map[string]bool{}, sb: r.opts.Sandbox, env: env, scratch: r.scratch, lim: r.lim, readOnly: gitlinks, warn: r.stderr,
		groupSync: true}
	for _, name := range r.tools {
		r.tb.allowed[name] = true
	}
	if r.opts.Sandbox == nil && r.tb.allowed[ToolRunCommand] {
		r.warnf("no sandbox configured: run_command calls will fail")
	}
	return func() {
		syncFiles(r.tb.takeUnsynced()) // none: every save and the finish took them
		os.RemoveAll(r.scratch)
		root.Close()
	}, nil
}

// openConversation sets up the built-in loop's messages for the mode (a
// pi round's prompt goes to pi, which keeps its own session). Continuing,
// it checks the worktree against the last checkpoint: drift is the
// message to finish with (StatusDrift) unless the operator accepts it.
func (r *runner) openConversation(ctx context.Context, mode runMode) (drift string, err error) {
	t, st := r.task, r.state
	pi := t.Runtime == RuntimePi
	switch {
	case mode == modeNew && !pi:
		msgs, err := r.opening(ctx, mode)
		if err != nil {
			return "", err
		}
		st.Messages = msgs
		r.transcript(transcriptLine{Type: lineSystem, Text: msgs[0].Content, Sources: r.promptSources})
		r.transcript(transcriptLine{Type: lineUser, Text: t.Prompt})
	case mode == modeFollowUp && !pi:
		msgs, err := r.opening(ctx, mode)
		if err != nil {
			return "", err
		}
		st.Messages = msgs
		r.transcript(transcriptLine{Type: lineUser, Text: r.opts.FollowUp})
	case mode == modeContinue:
		// A reply the transcript holds but the state does not yet (group
		// commit): adopted first, so the drift check knows its calls.
		r.adoptRecordedReply()
		r.transcript(transcriptLine{Type: lineResume, Step: st.Step, Text: "continuing after step " + fmt.Sprint(st.Step)})
		r.ev.emit(Event{Event: "resume", Time: r.now(), RunID: st.RunID, Step: st.Step, Text: "continuing"})
		if drifted := r.checkDrift(); len(drifted) > 0 {
			msg := "files changed since the last checkpoint: " + strings.Join(drifted, ", ")
			if !r.opts.AcceptDrift {
				return msg + " (inspect the worktree; resume with --accept-drift to continue)", nil
			}
			r.warnf("%s (continuing: --accept-drift)", msg)
			note := "Note: since your last step, these files were changed outside this session: " + strings.Join(drifted, ", ") + ". Re-read them before relying on their content."
			st.Messages = append(st.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: note})
			r.transcript(transcriptLine{Type: lineUser, Text: note})
		}
		if r.opts.FollowUp != "" && !pi {
			st.Messages = append(st.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: r.opts.FollowUp})
			r.transcript(transcriptLine{Type: lineUser, Text: r.opts.FollowUp})
		}
	}
	return "", nil
}

// notesWaiting reports whether the run has notes to deliver before its
// first request (or the store cannot say): that request then waits for the
// loop, which delivers them.
func (r *runner) notesWaiting(ctx context.Context) bool {
	if r.opts.Store == nil {
		return false
	}
	notes, err := r.opts.Store.PendingNotes(ctx, r.state.RunID)
	return err != nil || len(notes) > 0
}

// opening is the conversation a new round (modeNew, modeFollowUp) sends
// first: the system prompt and the task for a new session, the session's
// conversation and the follow-up for a refinement. Made once per run: the
// early request's copy when one went out.
func (r *runner) opening(ctx context.Context, mode runMode) ([]openai.ChatCompletionMessage, error) {
	if r.first != nil {
		return slices.Clone(r.first.msgs), nil
	}
	st := r.state
	var msgs []openai.ChatCompletionMessage
	switch mode {
	case modeNew:
		sys, err := r.systemPrompt(ctx, st.BaseCommit)
		if err != nil {
			return nil, err
		}
		msgs = []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: sys},
			{Role: openai.ChatMessageRoleUser, Content: r.task.Prompt},
		}
	case modeFollowUp:
		msgs = append(slices.Clone(st.Messages), openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: r.opts.FollowUp})
	default:
		return nil, fmt.Errorf("no opening for mode %d", mode)
	}
	return msgs, nil
}

// connectRegistry resolves alias in the registry and builds its client.
func (r *runner) connectRegistry(alias string) (ModelClient, string, []string, error) {
	spec, err := r.opts.Registry.Lookup(alias)
	if err != nil {
		return nil, "", nil, err
	}
	client, err := NewClient(spec, r.getenv, WithSlots(r.opts.ModelSlots))
	if err != nil {
		return nil, "", nil, err
	}
	if r.opts.ContextWindow == 0 {
		r.opts.ContextWindow = spec.ContextWindow
	}
	var secrets []string
	if spec.APIKeyEnv != "" {
		secrets = append(secrets, spec.APIKeyEnv)
	}
	return client, spec.Model, secrets, nil
}

// systemPrompt is the role's prompt followed by the task's brief, as of
// the base commit (buildPrompt); the files it came from are kept for the
// transcript's first entry.
func (r *runner) systemPrompt(ctx context.Context, base string) (string, error) {
	sp, err := buildPrompt(ctx, r.repo, base, r.opts.Role, r.task, r.opts.TaskPath)
	if err != nil {
		return "", err
	}
	r.promptSources = sp.Sources
	return sp.Text, nil
}

func (r *runner) writeTask() error {
	b, err := json.MarshalIndent(r.task, "", "  ")
	if err != nil {
		return err
	}
	return runrec.WriteFileAtomic(r.runDir.Path(runrec.TaskFile), append(b, '\n'), 0o644)
}

// takeWorktree adopts the session's worktree or takes one from the pool.
func (r *runner) takeWorktree(ctx context.Context, mode runMode) error {
	st := r.state
	owner := st.Workspace + "/" + st.Session
	if st.Slot != "" && mode != modeNew {
		pool := r.pool
		if st.PoolDir != "" && st.PoolDir != pool.Dir {
			cp := *pool
			cp.Dir = st.PoolDir
			pool = &cp
		}
		l, err := pool.Adopt(ctx, st.Slot, owner)
		if err == nil {
			r.lease = l
			st.Worktree = l.Dir()
			// A kept worktree may hold what an earlier run's commands
			// left: scanned before any host git (the tools' included).
			return r.clearHazards()
		}
		if errors.Is(err, ErrSessionBusy) {
			return err
		}
		r.warnf("the session's worktree %s cannot be reused (%v): re-creating it", st.Slot, err)
	}
	if r.restartBase != "" {
		r.warnf("run %s was stopped before its first step was saved: starting it over", st.RunID)
		// The killed attempt's worktree, if it took one, is named by no
		// session state: it goes back to the pool.
		if n, err := r.pool.ReclaimOrphans(ctx, owner); err != nil {
			r.warnf("the killed attempt's worktree: %v", err)
		} else if n > 0 {
			r.warnf("returned the killed attempt's worktree to the pool")
		}
	}
	l, err := r.pool.Acquire(ctx, st.BaseCommit, owner)
	if err != nil {
		return err
	}
	r.lease = l
	st.Slot, st.Worktree, st.PoolDir = l.Meta.Slot, l.Dir(), r.pool.Dir
	r.knownChanges = st.LastPatch == "" && r.task.Runtime != RuntimePi
	if st.LastPatch != "" {
		if err := applyPatch(ctx, l.Git, st.LastPatch); err != nil {
			return err
		}
	}
	faultHook(faultAcquired)
	return r.save()
}

// save makes the session state durable now (after any save still in
// flight).
func (r *runner) save() error {
	write, err := r.stateWrite()
	if err != nil {
		return err
	}
	return write()
}

// saveBehind starts the same save and returns at once: the next model
// request goes out while the disk works. The loop settles it as soon as the
// reply is back, before it acts on the reply; every later save settles it
// first, so state versions reach the disk in order and never run ahead of
// the transcript. A crash meanwhile is a crash before the save: the
// transcript's lines give the results back (loadRecordedResults) and the
// request is sent again.
func (r *runner) saveBehind() error {
	write, err := r.stateWrite()
	if err != nil {
		return err
	}
	r.saving.start(write)
	return nil
}

// settle waits for the save saveBehind started and returns its error.
func (r *runner) settle() error {
	err, _ := r.saving.settle()
	return err
}

// behind is one write started in the background, to be waited for
// (settled) before anything that must follow it; its result is reported
// by the goroutine that settles it.
type behind[T any] struct{ done chan T }

// start runs write in the background (after the previous one was settled).
func (b *behind[T]) start(write func() T) {
	done := make(chan T, 1)
	go func() { done <- write() }()
	b.done = done
}

// settle waits for the write start began; ok is false when there is none.
func (b *behind[T]) settle() (v T, ok bool) {
	if b.done == nil {
		return v, false
	}
	v = <-b.done
	b.done = nil
	return v, true
}

// stateWrite settles the save in flight, snapshots the state and returns
// the write that makes the snapshot durable. The transcript lines the state
// stands on are made durable before it is: after a crash the state never
// refers to a line the transcript lost.
func (r *runner) stateWrite() (func() error, error) {
	if err := r.settle(); err != nil {
		return nil, err
	}
	r.state.Files = r.touched.list()
	b, err := json.Marshal(r.state)
	if err != nil {
		return nil, err
	}
	log, dir := r.log, r.sessDir
	r.stateSeq++
	seq := r.stateSeq
	var files []*os.File // the step's written files: durable before the lines that record them
	if r.tb != nil {
		files = r.tb.takeUnsynced()
	}
	return func() error {
		if err := syncFiles(files); err != nil {
			return err
		}
		if log != nil {
			if err := log.Sync(); err != nil {
				return fmt.Errorf("transcript: %w", err)
			}
		}
		// The folder is there: the session's lock file in it is held.
		return writeState(dir, seq, b)
	}, nil
}

func (r *runner) transcript(l transcriptLine) {
	if l.Time.IsZero() {
		l.Time = r.now().UTC()
	}
	if err := r.log.Write(l); err != nil { // fsynced by save (group commit)
		r.warnf("transcript: %v", err)
	}
}

func (r *runner) baseResult() runrec.Result {
	st := r.state
	res := runrec.Result{
		RunID: st.RunID, TaskID: r.task.ID, Session: st.Session, Role: r.opts.Role.Name(), Workspace: st.Workspace,
		Status: st.Status, ModelAlias: st.ModelAlias, HarnessAlias: r.harness(), Model: st.Model, Steps: st.Step, StartedAt: st.Started,
		Repo: st.Repo, BaseCommit: st.BaseCommit, Worktree: st.Worktree, FilesChanged: []string{},
	}
	if res.StartedAt.IsZero() {
		res.StartedAt = r.started
	}
	res.PromptTokens, res.CompletionTokens, res.TotalTokens = st.Tokens.known()
	return res
}

// record writes result.json and the store's run row.
func (r *runner) record(ctx context.Context) error {
	if err := r.runDir.WriteResult(r.result); err != nil {
		return fmt.Errorf("run record: %w", err)
	}
	if r.opts.Store != nil {
		row := bus.RunFromResult(r.result)
		r.rowPut(row, r.opts.Store.PutRun(context.WithoutCancel(ctx), row))
	}
	return nil
}

// fail ends a run that could not start its loop.
func (r *runner) fail(ctx context.Context, err error) (runrec.Result, error) {
	return r.finish(ctx, runrec.StatusFailed, err.Error())
}

// FinishTimeout bounds what a run does after its loop ended (extraction,
// the record, the worktree's release), even when the run was cancelled or
// hit its own deadline: host git after the deadline has this fresh, short
// deadline of its own, never none.
const FinishTimeout = 2 * time.Minute

// finish extracts the patch, writes the record, checkpoints and releases or
// keeps the worktree. Work is never lost: the worktree is torn down only
// after the patch and the record are safely written.
func (r *runner) finish(ctx context.Context, status, msg string) (runrec.Result, error) {
	r.dropFirst()        // an early request the run ended without
	r.settleStart()      // the start's row before the final one
	r.settleCheckpoint() // the store has every checkpoint before the run's end
	ctx = context.WithoutCancel(ctx)
	ctx, cancel := context.WithTimeout(ctx, FinishTimeout)
	defer cancel()
	st := r.state
	res := r.baseResult()
	res.Status = status
	res.Error = msg
	res.FinishedAt = r.now()
	res.Resumable = status == runrec.StatusFailed && r.outside
	safe := true
	var changed []string // what the extraction found differs from the base
	if r.lease != nil {
		ex, err := extractPatch(ctx, r.lease, st.BaseCommit, r.runDir.Path(runrec.PatchFile))
		r.addHazards(toHazards(ex.Hazards))
		res.Hazards = r.hazards
		if err != nil {
			safe = false
			r.warnf("%v", err)
			res.Error = strings.TrimPrefix(res.Error+"; "+err.Error(), "; ")
			if res.Status == runrec.StatusSucceeded {
				res.Status = runrec.StatusFailed
			}
		} else {
			res.PatchID, res.FilesChanged = ex.PatchID, ex.Files
			changed = ex.Files
			if res.FilesChanged == nil {
				res.FilesChanged = []string{}
			}
			st.LastPatch = r.runDir.Path(runrec.PatchFile)
		}
		r.touched.update(r.root, r.touchedPaths()...)
	}
	if r.tb != nil {
		if err := syncFiles(r.tb.takeUnsynced()); err != nil {
			r.warnf("worktree: %v", err)
		}
	}
	if r.log != nil {
		r.transcript(transcriptLine{Type: lineStop, Step: st.Step, Status: res.Status, Text: res.Error})
		if err := r.log.Sync(); err != nil {
			r.warnf("transcript: %v", err)
		}
	}
	st.Status = res.Status
	resumable := res.Status == runrec.StatusCancelled || res.Status == StatusDrift || res.Resumable
	release := r.lease != nil && !(resumable || r.opts.KeepWorktree || !safe)
	if release {
		// The worktree goes back to the pool below (or is discarded when
		// it cannot be reset): the record names none, and is written once.
		res.Worktree = ""
	}
	r.result = res
	if err := r.record(ctx); err != nil {
		return res, err
	}
	if resumable && r.lease != nil {
		r.checkpoint(ctx)
	}
	if r.lease != nil {
		switch {
		case !release:
			if err := r.lease.Keep(); err != nil {
				r.warnf("keep worktree: %v", err)
			}
			if !safe {
				r.warnf("worktree kept at %s: the patch could not be saved", r.lease.Dir())
			}
		default:
			if r.root != nil {
				r.root.Close()
			}
			put := r.lease.Release
			if r.knownChanges {
				put = func(ctx context.Context) error {
					return r.lease.ReleaseKnown(ctx, append(r.touchedPaths(), changed...))
				}
			}
			if err := put(ctx); err != nil {
				r.warnf("release worktree: %v", err)
			}
			st.Slot, st.Worktree = "", ""
		}
	}
	if r.sessDir != "" && st.RunID != "" {
		if err := r.save(); err != nil {
			r.warnf("session state: %v", err)
		}
	}
	var tok *int64
	if st.Tokens.Reported > 0 {
		v := st.Tokens.Total
		tok = &v
	}
	r.event(ctx, bus.EventRoleComplete, RoleComplete(res))
	r.ev.emit(Event{Event: "stop", Time: r.now(), RunID: st.RunID, Step: st.Step, Status: res.Status, Tokens: tok, Text: res.Error})
	final := r.result
	r.ev.emit(Event{Event: "result", Time: r.now(), RunID: st.RunID, Status: res.Status, Result: &final})
	return r.result, nil
}

// RoleComplete is the metadata of a run's role_complete event, from its
// record: what a run writes when it ends, and what a worker writes for a
// run whose process was killed after its record and before the event.
func RoleComplete(res runrec.Result) map[string]any {
	return map[string]any{"harnessAlias": res.HarnessAlias, "modelAlias": res.ModelAlias, "outcome": res.Status,
		"error": res.Error, "steps": res.Steps, "totalTokens": res.TotalTokens, "patchId": res.PatchID, "filesChanged": len(res.FilesChanged)}
}

func (r *runner) touchedPaths() []string {
	out := make([]string, 0, len(r.touched))
	for p := range r.touched {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// loop is the tool loop. It returns the final status and a message.
func (r *runner) loop(ctx context.Context) (status, msg string) {
	st := r.state
	defer func() { // a save still in flight when the loop stops
		if err := r.settle(); err != nil {
			r.outside = true // the disk
			if status == runrec.StatusFailed {
				r.warnf("session state: %v", err)
				return
			}
			status, msg = runrec.StatusFailed, "session state: "+err.Error()
		}
	}()
	deadline := r.started.Add(r.lim.Timeout)
	lctx, cancel := context.WithDeadlineCause(ctx, deadline, errTimeout)
	defer cancel()
	stopped := func() (string, string, bool) {
		if lctx.Err() == nil {
			return "", "", false
		}
		if ctx.Err() != nil {
			return runrec.StatusCancelled, "cancelled", true
		}
		return runrec.StatusTimeout, fmt.Sprintf("wall-clock limit of %s reached", r.lim.Timeout), true
	}
	// An interrupted turn's calls are executed first; results the
	// transcript recorded before the crash are adopted, not re-run. A
	// reply the transcript holds but the state does not yet (the state is
	// written with the turn's results) is adopted first.
	r.adoptRecordedReply()
	r.recorded = r.loadRecordedResults()
	err := r.runPendingCalls(lctx)
	r.recorded = nil // later turns run their calls
	if err != nil {
		if s, m, ok := stopped(); ok {
			return s, m
		}
		return runrec.StatusFailed, err.Error()
	}
	defs := toolDefs(r.tools)
	for {
		if s, m, ok := stopped(); ok {
			return s, m
		}
		if r.first == nil { // an early request went out with the notes there were
			r.deliverNotes(lctx)
		}
		// Limits, before every model call.
		if st.Step >= r.lim.MaxSteps {
			return runrec.StatusBudget, fmt.Sprintf("step limit of %d reached", r.lim.MaxSteps)
		}
		if r.lim.TokenBudget > 0 && st.Tokens.used() >= r.lim.TokenBudget {
			return runrec.StatusBudget, fmt.Sprintf("token budget of %d reached (%d used)", r.lim.TokenBudget, st.Tokens.used())
		}
		for key, n := range st.Repeats {
			if n >= stuckRepeats {
				return runrec.StatusStuck, fmt.Sprintf("the same call returned the same result %d times (%s)", n, strings.SplitN(key, "\x00", 2)[0])
			}
		}
		r.fitContext()
		reply, err, ok := r.takeFirst(st.Messages)
		if !ok {
			reply, err = r.model.Complete(WithStreamProgress(lctx, r.streamProgress(st.Step+1)), ModelRequest{Messages: st.Messages, Tools: defs})
		}
		// The last step's save went to disk during the request: durable
		// before anything acts on the reply.
		if serr := r.settle(); serr != nil {
			r.outside = true // the disk
			return runrec.StatusFailed, "session state: " + serr.Error()
		}
		if s, m, ok := stopped(); ok {
			return s, m // a reply after the limit is not used
		}
		if err != nil {
			var me *ModelError
			r.outside = errors.As(err, &me) && me.Outside()
			return runrec.StatusFailed, "model: " + err.Error()
		}
		st.Step++
		r.countTokens(reply)
		msg := reply.Message
		msg.Role = openai.ChatMessageRoleAssistant
		st.Messages = append(st.Messages, msg)
		line := transcriptLine{Type: lineModel, Step: st.Step, Message: &msg, FinishReason: reply.FinishReason, Usage: reply.Usage, UsageUnknown: reply.Usage == nil, Quirks: reply.Quirks}
		r.transcript(line)
		if len(msg.ToolCalls) == 0 && reply.FinishReason != "length" {
			// The last answer: no request follows, so the lane is handed
			// over before this answer's save.
			r.handOff()
		}
		// Group commit: a reply that calls tools is made durable in the
		// transcript alone (one fsync; adoptRecordedReply rebuilds it
		// into the state on resume), and the state is written once, with
		// its results. A final reply is saved with the state at once.
		// A reply whose calls only read needs no fsync of its own: they
		// change nothing, so losing the reply to a power cut is losing a
		// model call, and the results' save makes it durable with them (a
		// killed process loses nothing it wrote).
		save := r.save
		switch {
		case len(msg.ToolCalls) > 0 && readOnlyCalls(msg.ToolCalls):
			save = func() error { return nil }
		case len(msg.ToolCalls) > 0:
			save = r.log.Sync
		}
		if err := save(); err != nil {
			r.outside = true // the disk
			return runrec.StatusFailed, "session state: " + err.Error()
		}
		var tok *int64
		if st.Tokens.Reported > 0 {
			v := st.Tokens.Total
			tok = &v
		}
		r.ev.emit(Event{Event: "step", Time: r.now(), RunID: st.RunID, Step: st.Step, Tokens: tok})
		if len(msg.ToolCalls) == 0 {
			if reply.FinishReason != "length" {
				return runrec.StatusSucceeded, ""
			}
			// Cut off by the server's length limit: not a finished answer.
			st.Messages = append(st.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: cutOffNudge})
			r.transcript(transcriptLine{Type: lineUser, Step: st.Step, Text: cutOffNudge})
			if err := r.save(); err != nil {
				return runrec.StatusFailed, "session state: " + err.Error()
			}
			continue
		}
		if err := r.runPendingCalls(lctx); err != nil {
			if s, m, ok := stopped(); ok {
				return s, m
			}
			return runrec.StatusFailed, err.Error()
		}
		if r.lim.CheckpointEvery > 0 && st.Step%r.lim.CheckpointEvery == 0 {
			r.checkpointBehind(lctx)
		}
	}
}

// cutOffNudge answers a reply the server cut off at its length limit.
const cutOffNudge = "Your last reply was cut off at the length limit. Continue from where it stopped, in shorter steps."

// readOnlyCalls reports whether every call only reads the worktree.
func readOnlyCalls(calls []openai.ToolCall) bool {
	for _, c := range calls {
		switch c.Function.Name {
		case ToolReadFile, ToolGrep, ToolListDir:
		default:
			return false
		}
	}
	return true
}

// pendingCalls returns the tool calls of the last assistant message that
// have no result yet.
func (r *runner) pendingCalls() []openai.ToolCall {
	msgs := r.state.Messages
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == openai.ChatMessageRoleAssistant {
			last = i
			break
		}
	}
	if last < 0 {
		return nil
	}
	done := map[string]bool{}
	for _, m := range msgs[last+1:] {
		if m.Role == openai.ChatMessageRoleTool {
			done[m.ToolCallID] = true
		}
	}
	var out []openai.ToolCall
	for _, c := range msgs[last].ToolCalls {
		if !done[c.ID] {
			out = append(out, c)
		}
	}
	return out
}

func (r *runner) runPendingCalls(ctx context.Context) error {
	st := r.state
	for _, call := range r.pendingCalls() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		name, args := call.Function.Name, call.Function.Arguments
		res, adopted := r.recordedResult(call.ID, name, args)
		if name == ToolRunCommand {
			r.knownChanges = false // a command may leave anything anywhere
		}
		if !adopted {
			r.transcript(transcriptLine{Type: lineToolCall, Step: st.Step, CallID: call.ID, Tool: name, Arguments: args})
			res = r.tb.call(ctx, name, args)
			if ctx.Err() != nil && name == ToolRunCommand {
				// A command interrupted mid-run: no result is recorded; a
				// resumed run executes it again. (File tools finish what they
				// started: their result is recorded.)
				return ctx.Err()
			}
			outFile := ""
			if res.Full != nil {
				outFile = filepath.Join("outputs", fmt.Sprintf("step-%03d-%s.txt", st.Step, safeFileName(call.ID)))
				if err := runrec.WriteFileAtomic(r.runDir.Path(outFile), res.Full, 0o644); err != nil {
					r.warnf("tool output: %v", err)
					outFile = ""
				}
			}
			r.transcript(transcriptLine{Type: lineToolResult, Step: st.Step, CallID: call.ID, Tool: name, Content: res.Content, IsError: res.IsError, OutputFile: outFile})
		}
		st.Messages = append(st.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, Content: res.Content, ToolCallID: call.ID, Name: name})
		if len(res.Touched) > 0 {
			r.touched.update(r.root, res.Touched...)
		}
		if name == ToolRunCommand {
			// The command may have left anything: the worktree is scanned
			// before host git looks at it again. One that cannot be made
			// safe ends the run: no host git (the grep tool's included)
			// may run on it.
			if err := r.clearHazards(); err != nil {
				return err
			}
			if files, err := changedFiles(ctx, r.lease.Git); err == nil {
				r.touched.update(r.root, files...)
			}
		}
		key := name + "\x00" + canonicalArgs(args) + "\x00" + hashString(res.Content)
		st.Repeats[key]++
		st.addHistory(historyItem{Step: st.Step, Tool: name, Args: args, Result: res.Content, IsError: res.IsError})
		if err := r.saveBehind(); err != nil {
			return fmt.Errorf("session state: %w", err)
		}
		status := "ok"
		if res.IsError {
			status = "error"
		}
		r.ev.emit(Event{Event: "tool", Time: r.now(), RunID: st.RunID, Step: st.Step, Tool: name, Text: status})
		if res.Limit != "" {
			// A command stopped by a sandbox limit ends the run: recorded
			// failed, "limit: ..." (result.json and the run row), on every
			// backend alike.
			return fmt.Errorf("limit: %s stopped at the sandbox's %s", commandText(args), res.Limit)
		}
	}
	return nil
}

// commandText is a run_command call's argv for the run's error line.
func commandText(args string) string {
	var a struct {
		Argv []string `json:"argv"`
	}
	if json.Unmarshal([]byte(args), &a) != nil || len(a.Argv) == 0 {
		return "a command"
	}
	s := strings.Join(a.Argv, " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return "`" + s + "`"
}

// elidedMark starts a tool result replaced to fit the context window.
const elidedMark = "[elided to fit the context window:"

// fitContext keeps the conversation under the model's context window. When
// the estimate (about 4 bytes a token) passes 80% of the window, the oldest
// tool results, then the oldest long tool-call arguments, are replaced by
// one-line stubs until it is under 60%. The system prompt, the task, the
// model's text and the last 8 messages are never touched; the full outputs
// stay in the run folder and the transcript. A trim line records it.
func (r *runner) fitContext() {
	win := r.opts.ContextWindow
	msgs := r.state.Messages
	if win <= 0 || len(msgs) <= 10 {
		return
	}
	est := estimateTokens(msgs)
	if est*5 <= win*4 {
		return
	}
	target := win * 3 / 5
	elided, saved := 0, 0
	// First the oldest tool results, then the oldest long tool-call
	// arguments (a file the model wrote is on disk: its content need not
	// stay in the conversation).
	for pass := 0; pass < 2; pass++ {
		for i := 2; i < len(msgs)-8 && est > target; i++ {
			m := &msgs[i]
			if pass == 0 {
				if m.Role != openai.ChatMessageRoleTool || len(m.Content) < 256 || strings.HasPrefix(m.Content, elidedMark) {
					continue
				}
				stub := fmt.Sprintf("%s %d bytes of %s output from an earlier step; call the tool again if you need it]", elidedMark, len(m.Content), m.Name)
				d := (len(m.Content) - len(stub)) / 4
				m.Content = stub
				est, saved, elided = est-d, saved+d, elided+1
				continue
			}
			for j := range m.ToolCalls {
				fn := &m.ToolCalls[j].Function
				if len(fn.Arguments) < 256 || strings.Contains(fn.Arguments, elidedMark) {
					continue
				}
				stub, _ := json.Marshal(map[string]string{"elided": fmt.Sprintf("%s %d bytes of arguments]", elidedMark, len(fn.Arguments))})
				d := (len(fn.Arguments) - len(stub)) / 4
				fn.Arguments = string(stub)
				est, saved, elided = est-d, saved+d, elided+1
			}
		}
	}
	if elided > 0 {
		text := fmt.Sprintf("elided %d old tool results and arguments (~%d tokens) to fit the %d-token context window", elided, saved, win)
		r.transcript(transcriptLine{Type: lineTrim, Step: r.state.Step, Text: text})
		r.ev.emit(Event{Event: "trim", Time: r.now(), RunID: r.state.RunID, Step: r.state.Step, Text: text})
	}
}

// estimateTokens is a cheap upper-bound estimate of a conversation's size:
// about 4 bytes a token plus a few tokens of framing per message.
func estimateTokens(msgs []openai.ChatCompletionMessage) int {
	n := 0
	for _, m := range msgs {
		n += 4 + len(m.Content)/4
		for _, c := range m.ToolCalls {
			n += 4 + (len(c.Function.Name)+len(c.Function.Arguments))/4
		}
	}
	return n
}

// adoptRecordedReply adds to the state the model reply of the next step
// when the transcript holds it and the state does not: the loop makes a
// reply that calls tools durable in the transcript and writes the state
// only with the turn's results, so a run killed in between resumes with
// that reply (and its calls pending), never asking the model again.
func (r *runner) adoptRecordedReply() {
	st := r.state
	if len(r.pendingCalls()) > 0 {
		return // the state already holds the turn
	}
	f, err := os.Open(r.runDir.Path(runrec.TranscriptFile))
	if err != nil {
		return
	}
	defer f.Close()
	var found *transcriptLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4<<10), 64<<20) // grown for longer lines
	for sc.Scan() {
		var l transcriptLine
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue // a torn last line
		}
		if l.Type == lineModel && l.Step == st.Step+1 && l.Message != nil && len(l.Message.ToolCalls) > 0 {
			found = &l // the last one: a run killed twice asked twice
		}
	}
	if found == nil {
		return
	}
	msg := *found.Message
	msg.Role = openai.ChatMessageRoleAssistant
	st.Step++
	r.countTokens(ModelReply{Message: msg, Usage: found.Usage})
	st.Messages = append(st.Messages, msg)
}

// loadRecordedResults reads the tool results the transcript holds for the
// pending calls of the session's current step, keyed by call id. Only an
// interrupted turn has any (a call that ran and was recorded before the
// process died, with the session state not yet saved), so the transcript is
// read only when calls are pending at the start of a run.
func (r *runner) loadRecordedResults() map[string]transcriptLine {
	if len(r.pendingCalls()) == 0 {
		return nil
	}
	f, err := os.Open(r.runDir.Path(runrec.TranscriptFile))
	if err != nil {
		return nil
	}
	defer f.Close()
	out := map[string]transcriptLine{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4<<10), 64<<20) // grown for longer lines
	for sc.Scan() {
		var l transcriptLine
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue // a torn last line
		}
		if l.Type == lineToolResult && l.Step == r.state.Step && l.CallID != "" {
			out[l.CallID] = l
		}
	}
	return out
}

// recordedResult is the recorded result of a pending call, if any: running
// it again would apply an edit twice, so it is adopted instead. File tools
// report the path they touched.
func (r *runner) recordedResult(callID, name, args string) (toolResult, bool) {
	found, ok := r.recorded[callID]
	if !ok || callID == "" || found.Tool != name {
		return toolResult{}, false
	}
	res := toolResult{Content: found.Content, IsError: found.IsError}
	if !found.IsError && (name == ToolWriteFile || name == ToolEditFile) {
		var a struct {
			Path string `json:"path"`
		}
		if json.Unmarshal([]byte(args), &a) == nil {
			if p, err := r.tb.cleanPath(a.Path, false); err == nil {
				res.Touched = []string{p}
			}
		}
	}
	return res, true
}

func canonicalArgs(args string) string {
	var v any
	if json.Unmarshal([]byte(args), &v) != nil {
		return args
	}
	b, _ := json.Marshal(v) // map keys sorted
	return string(b)
}

func hashString(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

func safeFileName(s string) string {
	s = unsafeKey.ReplaceAllString(s, "_")
	if len(s) > 60 {
		s = s[:60]
	}
	if s == "" {
		s = "call"
	}
	return s
}

// countTokens adds a turn's usage; a turn without usage is estimated for the
// budget only and makes the recorded totals unknown.
func (r *runner) countTokens(reply ModelReply) {
	t := &r.state.Tokens
	if u := reply.Usage; u != nil {
		t.Prompt += u.PromptTokens
		t.Completion += u.CompletionTokens
		total := u.TotalTokens
		if total == 0 {
			total = u.PromptTokens + u.CompletionTokens
		}
		t.Total += total
		t.Reported++
		return
	}
	t.Unreported++
	n := 0
	for _, m := range r.state.Messages {
		n += len(m.Content)
		for _, c := range m.ToolCalls {
			n += len(c.Function.Arguments)
		}
	}
	n += len(reply.Message.Content)
	t.Estimated += int64(n/4 + 1)
}
