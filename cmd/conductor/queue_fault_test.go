package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/testenv"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// faultRig is a data root, a repository, a scripted model and N task files
// for the queue fault tests; workers run as conductor subprocesses.
type faultRig struct {
	t     *testing.T
	home  string
	repo  string
	env   []string
	tasks []string // task file paths
	llm   *fakellm.Server

	mu      sync.Mutex
	workers []*faultWorker
}

type faultWorker struct {
	cmd *exec.Cmd
	out *syncBuffer
}

// syncBuffer is a bytes.Buffer safe for a subprocess writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newFaultRig(t *testing.T, jobs int, extraEnv ...string) *faultRig {
	t.Helper()
	home := t.TempDir()
	script, err := fakellm.Parse([]byte(workerScript))
	if err != nil {
		t.Fatal(err)
	}
	llm := fakellm.Start(*script)
	t.Cleanup(llm.Close)
	r := &faultRig{t: t, home: home, llm: llm, repo: filepath.Join(home, "repo")}
	r.env = workerEnv(t, home, append([]string{
		"CONDUCTOR_MODEL_OLLAMA_QWEN_URL=" + llm.URL(), "CONDUCTOR_MODEL_OLLAMA_QWEN_MODEL=fake",
		"WORKER_CHECKPOINT_EVERY_N_STEPS=1"}, extraEnv...)...)
	os.MkdirAll(r.repo, 0o755)
	os.WriteFile(filepath.Join(r.repo, "README.md"), []byte("# repo\n"), 0o644)
	gitT(t, r.repo, r.env, "init", "-q", "-b", "main")
	gitT(t, r.repo, r.env, "add", "-A")
	gitT(t, r.repo, r.env, "commit", "-qm", "init")
	dir := filepath.Join(home, "tasks")
	os.MkdirAll(dir, 0o755)
	for i := 0; i < jobs; i++ {
		p := filepath.Join(dir, fmt.Sprintf("t%02d.json", i))
		os.WriteFile(p, []byte(fmt.Sprintf(`{"taskVersion":1,"id":"t-%02d","prompt":"write the note","workspace":"repo",
 "capabilities":{"tools":["read","write","edit"]},"session":"s-%02d","timeoutSeconds":300,"role":"implementer"}`, i, i)), 0o644)
		r.tasks = append(r.tasks, p)
	}
	return r
}

// conductor runs a conductor command to its end and returns its stdout.
func (r *faultRig) conductor(args ...string) (string, error) {
	cmd := exec.Command("conductor", args...)
	cmd.Env = r.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("conductor %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), err
}

// enqueueAll enqueues every task and returns the run ids.
func (r *faultRig) enqueueAll() []string {
	r.t.Helper()
	var ids []string
	for _, p := range r.tasks {
		out, err := r.conductor("enqueue", p)
		if err != nil {
			r.t.Fatal(err)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	return ids
}

// startWorker starts `conductor worker` with short leases and backoffs.
func (r *faultRig) startWorker(extra ...string) *faultWorker {
	r.t.Helper()
	args := []string{"worker", "--wait", "1", "--heartbeat-ttl", "2s",
		"--model", "ollama-qwen", "--repo", r.repo, "--sandbox", "none", "--grace", "5s"}
	if !slices.Contains(extra, "--concurrency") { // two lanes unless the test says
		args = append(args, "--concurrency", "2")
	}
	args = append(args, extra...)
	cmd := exec.Command("conductor", args...)
	w := &faultWorker{cmd: cmd, out: &syncBuffer{}}
	cmd.Env, cmd.Stdout, cmd.Stderr = r.env, w.out, w.out
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.mu.Lock()
	r.workers = append(r.workers, w)
	r.mu.Unlock()
	r.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return w
}

// stopWorkers sends SIGTERM to every live worker and waits for them.
func (r *faultRig) stopWorkers() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.workers {
		if w.cmd.ProcessState == nil {
			w.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, w := range r.workers {
		if w.cmd.ProcessState == nil {
			w.cmd.Wait()
		}
	}
}

// logs is every worker's output, for failure messages.
func (r *faultRig) logs() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for i, w := range r.workers {
		fmt.Fprintf(&b, "--- worker %d:\n%s\n", i, w.out.String())
	}
	return b.String()
}

// finishedRunLines counts, per run id, the completion lines the workers
// printed on stdout (one JSON object per completed run).
//
// A run whose worker was killed after recording its completion and before
// reporting it is reported by the worker that gets the job again, marked
// "redelivered": it counts once when no first report exists, so a run is
// reported 1 time unless it was completed twice.
func (r *faultRig) finishedRunLines() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, again := map[string]int{}, map[string]bool{}
	for _, w := range r.workers {
		sc := bufio.NewScanner(strings.NewReader(w.out.String()))
		for sc.Scan() {
			var line struct {
				RunID       string `json:"runId"`
				Status      string `json:"status"`
				Redelivered bool   `json:"redelivered"`
			}
			switch {
			case json.Unmarshal(sc.Bytes(), &line) != nil || line.RunID == "" || line.Status == "":
			case line.Redelivered:
				again[line.RunID] = true
			default:
				n[line.RunID]++
			}
		}
	}
	for id := range again {
		n[id] = max(n[id], 1)
	}
	return n
}

// waitFor polls cond until it holds or the test's own deadline is near.
func waitCond(t *testing.T, what string, cond func() bool, diag func() string) {
	t.Helper()
	deadline, ok := t.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Minute)
	} else {
		deadline = deadline.Add(-30 * time.Second)
	}
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s\n%s", what, diag())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkStoreClosed asserts every run is final in the store and every task's
// claim is completed by its run.
func checkStoreClosed(t *testing.T, dbURL string, tasks, runIDs []string, dataRoot string) {
	t.Helper()
	ctx := context.Background()
	st, err := bus.Open(ctx, bus.Options{DatabaseURL: dbURL, DataRoot: dataRoot})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i, id := range runIDs {
		run, err := st.GetRun(ctx, id)
		if err != nil {
			t.Errorf("run %s: %v", id, err)
		} else if run.Status != runrec.StatusSucceeded {
			t.Errorf("run %s: store status %q, want succeeded", id, run.Status)
		}
		task := fmt.Sprintf("t-%02d", i)
		cl, err := st.GetClaim(ctx, task)
		if err != nil {
			t.Errorf("claim of %s: %v", task, err)
		} else if cl.Completion == nil || cl.Claimant != id || cl.Completion.Outcome != runrec.StatusSucceeded {
			t.Errorf("claim of %s: %+v, want completed succeeded by %s", task, cl, id)
		}
	}
}

// TestWorkersSurvivePostgresOutage: 3 workers on PostgreSQL, N jobs, the
// queue on Redis or in PostgreSQL itself (the embedded queue); PostgreSQL
// is stopped mid-run (fast, then immediate) and started again, at random
// moments. Every job is done exactly once, nothing is dead-lettered or
// lost, and the store ends with every run final and every claim completed.
func TestWorkersSurvivePostgresOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process fault test")
	}
	t.Run("redis queue", func(t *testing.T) { pgOutageTrial(t, true) })
	t.Run("queue in postgres", func(t *testing.T) { pgOutageTrial(t, false) })
}

func pgOutageTrial(t *testing.T, onRedis bool) {
	pg := testenv.PrivatePostgres(t)
	const jobs = 12
	env := []string{"DATABASE_URL=" + pg.URL()}
	var rc *redis.Client
	if onRedis {
		redisURL := testenv.Redis(t)
		env = append(env, "REDIS_URL="+redisURL)
		rc = redisClient(t, redisURL)
	}
	r := newFaultRig(t, jobs, env...)
	runIDs := r.enqueueAll()
	for i := 0; i < 3; i++ {
		r.startWorker()
	}
	ctx := context.Background()
	for i, mode := range []string{"fast", "immediate"} {
		// Stop at a random moment once runs are in flight, before all
		// are done (make soak-queue repeats this with other moments).
		after := i*jobs + rand.IntN(jobs*2)
		waitCond(t, "runs in flight", func() bool {
			return len(r.llm.Requests()) > after || len(finishedRuns(t, r.home)) >= jobs-2
		}, r.logs)
		pg.Stop(mode)
		time.Sleep(time.Duration(1000+rand.IntN(3000)) * time.Millisecond) // the outage
		pg.Start()
	}
	deadLetters := func() string {
		if rc != nil {
			dl, _ := rc.LRange(ctx, "echodo:orchestrator:jobs:dead", 0, -1).Result()
			return strings.Join(dl, "\n")
		}
		st, err := bus.Open(ctx, bus.Options{DatabaseURL: pg.URL()})
		if err != nil {
			return ""
		}
		defer st.Close()
		dead, _ := st.DeadJobs(ctx, "echodo:orchestrator:jobs")
		var b strings.Builder
		for _, d := range dead {
			fmt.Fprintf(&b, "%s: %s\n", d.Payload, d.LastError)
		}
		return b.String()
	}
	// settled: nothing queued and nothing held (a job handed back after
	// its run ended is acknowledged by the next take: wait for that too).
	settled := func() bool {
		if rc != nil {
			return redisSettled(rc, "echodo:orchestrator:jobs")
		}
		st, err := bus.Open(ctx, bus.Options{DatabaseURL: pg.URL()})
		if err != nil {
			return false
		}
		defer st.Close()
		list, err := st.(bus.Views).ListJobs(ctx)
		if err != nil {
			return false
		}
		for _, j := range list {
			if j.State() != "dead" {
				return false
			}
		}
		return true
	}
	waitCond(t, "every job done", func() bool {
		// Done and settled, or settled with something missing (a dead
		// letter).
		if len(r.finishedRunLines()) == jobs || deadLetters() != "" {
			return settled()
		}
		return rc != nil && redisSettled(rc, "echodo:orchestrator:jobs")
	}, func() string {
		return fmt.Sprintf("done %v\ndead letters %s\n%s", r.finishedRunLines(), deadLetters(), r.logs())
	})
	r.stopWorkers()
	for id, n := range r.finishedRunLines() {
		if n != 1 {
			t.Errorf("run %s completed %d times", id, n)
		}
	}
	if len(r.finishedRunLines()) != jobs {
		t.Errorf("%d of %d jobs done", len(r.finishedRunLines()), jobs)
	}
	if dl := deadLetters(); dl != "" {
		t.Errorf("jobs dead-lettered:\n%s", dl)
	}
	if rc != nil {
		if !redisSettled(rc, "echodo:orchestrator:jobs") {
			t.Errorf("jobs left queued or held")
		}
	} else {
		st, err := bus.Open(ctx, bus.Options{DatabaseURL: pg.URL()})
		if err != nil {
			t.Fatal(err)
		}
		if j, ok, err := st.TakeJob(ctx, "echodo:orchestrator:jobs", "probe", time.Nanosecond); err != nil || ok {
			t.Errorf("a job is left in the queue: %+v %v", j, err)
		}
		st.Close()
	}
	for id, status := range finishedRuns(t, r.home) {
		if status != runrec.StatusSucceeded {
			t.Errorf("run %s: %s", id, status)
		}
	}
	checkStoreClosed(t, pg.URL(), nil, runIDs, filepath.Join(r.home, "data"))
	t.Logf("%d jobs across 3 workers; the workers logged %d store and %d queue outages", jobs,
		strings.Count(r.logs(), "store unavailable; retrying"), strings.Count(r.logs(), "queue unavailable; retrying"))
	if t.Failed() {
	}
}

// redisSettled reports a queue with a dead letter, or with nothing queued
// and nothing held by any consumer.
func redisSettled(rc *redis.Client, key string) bool {
	ctx := context.Background()
	if n, _ := rc.LLen(ctx, key+":dead").Result(); n > 0 {
		return true
	}
	if n, err := rc.LLen(ctx, key).Result(); err != nil || n > 0 {
		return false
	}
	keys, err := rc.Keys(ctx, key+":processing:*").Result()
	if err != nil {
		return false
	}
	for _, k := range keys {
		if n, err := rc.LLen(ctx, k).Result(); err != nil || n > 0 {
			return false
		}
	}
	return true
}

// TestEmbeddedQueueReclaimsKilledWorkersJobs: three workers on one
// embedded store (no Redis); one is killed with SIGKILL while it holds
// jobs. Once its leases run out the others take the jobs back and resume
// them: every job is done exactly once, no job is left taken, every claim
// is completed.
func TestEmbeddedQueueReclaimsKilledWorkersJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process fault test")
	}
	const jobs = 10
	r := newFaultRig(t, jobs)
	runIDs := r.enqueueAll()
	victim := r.startWorker()
	steps := 2 + rand.IntN(3) // a random moment (make soak-queue repeats it)
	waitCond(t, "the victim mid-job", func() bool {
		n := 0
		for _, id := range runIDs {
			if hasCheckpoint(r.home, id) && !runrec.Final(finishedRuns(t, r.home)[id]) {
				n++
			}
		}
		return n > 0 && strings.Count(victim.out.String(), "starting run") >= steps
	}, r.logs)
	victim.cmd.Process.Signal(syscall.SIGKILL)
	victim.cmd.Wait()
	r.startWorker()
	r.startWorker()
	waitCond(t, "every job done", func() bool { return len(r.finishedRunLines()) == jobs }, r.logs)
	r.stopWorkers()
	for id, n := range r.finishedRunLines() {
		if n != 1 {
			t.Errorf("run %s completed %d times", id, n)
		}
	}
	for id, status := range finishedRuns(t, r.home) {
		if status != runrec.StatusSucceeded {
			t.Errorf("run %s: %s", id, status)
		}
	}
	dataRoot := filepath.Join(r.home, "data")
	checkStoreClosed(t, "", nil, runIDs, dataRoot)
	st, err := bus.Open(context.Background(), bus.Options{DataRoot: dataRoot})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if j, ok, err := st.TakeJob(context.Background(), "echodo:orchestrator:jobs", "probe", time.Nanosecond); err != nil || ok {
		t.Errorf("a job is left in the queue: %+v %v", j, err)
	}
	if dead, err := st.DeadJobs(context.Background(), "echodo:orchestrator:jobs"); err != nil || len(dead) != 0 {
		t.Errorf("dead letters %+v %v", dead, err)
	}
	if t.Failed() {
		t.Log(r.logs())
	}
}

// TestWorkerKilledAsItsRunEnds: the victim is killed as soon as its first
// run's record is final, somewhere between the record and the report (its
// worktree's release, its session state, its role_complete event, the
// claim's completion, its line on stdout). The job comes back to another
// worker, which finds the run ended: every run is still reported (a line
// marked "redelivered" when the victim had completed the claim but not
// reported it), has exactly one role_complete event, and every claim is
// completed by its own run. Before, such a run was acknowledged without a
// report, or without its role_complete event.
func TestWorkerKilledAsItsRunEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process fault test")
	}
	const jobs = 6
	r := newFaultRig(t, jobs)
	runIDs := r.enqueueAll()
	victim := r.startWorker()
	for len(finishedRuns(t, r.home)) == 0 {
		if victim.cmd.ProcessState != nil {
			t.Fatalf("the victim exited\n%s", r.logs())
		}
		time.Sleep(time.Millisecond)
	}
	victim.cmd.Process.Signal(syscall.SIGKILL)
	victim.cmd.Wait()
	r.startWorker()
	r.startWorker()
	waitCond(t, "every run reported", func() bool { return len(r.finishedRunLines()) == jobs }, r.logs)
	r.stopWorkers()
	for id, n := range r.finishedRunLines() {
		if n != 1 {
			t.Errorf("run %s completed %d times", id, n)
		}
	}
	dataRoot := filepath.Join(r.home, "data")
	checkStoreClosed(t, "", nil, runIDs, dataRoot)
	st, err := bus.Open(context.Background(), bus.Options{DataRoot: dataRoot})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range runIDs {
		evs, err := st.(bus.AgentStore).ListEvents(context.Background(), bus.EventFilter{RunID: id})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range evs {
			if e.Kind == bus.EventRoleComplete {
				n++
			}
		}
		if n != 1 {
			t.Errorf("run %s: %d role_complete events, want 1", id, n)
		}
	}
	if dead, err := st.DeadJobs(context.Background(), "echodo:orchestrator:jobs"); err != nil || len(dead) != 0 {
		t.Errorf("dead letters %+v %v", dead, err)
	}
	if t.Failed() {
		t.Log(r.logs())
	}
}

// TestWorkerSurvivesRedisRestart: redis-server (with an append-only file)
// is killed and restarted under two running workers. They do not exit;
// every job is done exactly once and the queue ends empty.
func TestWorkerSurvivesRedisRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process fault test")
	}
	srv := testenv.PrivateRedis(t)
	const jobs = 10
	r := newFaultRig(t, jobs, "REDIS_URL="+srv.URL())
	r.enqueueAll()
	w1, w2 := r.startWorker(), r.startWorker()
	for i := 0; i < 2; i++ {
		after := i*jobs + rand.IntN(jobs*2) // a random moment (make soak-queue repeats it)
		waitCond(t, "runs in flight", func() bool {
			return len(r.llm.Requests()) > after || len(r.finishedRunLines()) >= jobs-2
		}, r.logs)
		srv.Kill()
		time.Sleep(time.Duration(500+rand.IntN(2500)) * time.Millisecond) // the outage
		srv.Start()
	}
	rc := redisClient(t, srv.URL())
	waitCond(t, "every job done", func() bool { return len(r.finishedRunLines()) == jobs }, r.logs)
	for _, w := range []*faultWorker{w1, w2} {
		if w.cmd.ProcessState != nil {
			t.Errorf("a worker exited: %v", w.cmd.ProcessState)
		}
	}
	r.stopWorkers()
	for id, n := range r.finishedRunLines() {
		if n != 1 {
			t.Errorf("run %s completed %d times", id, n)
		}
	}
	ctx := context.Background()
	if n, _ := rc.LLen(ctx, "echodo:orchestrator:jobs:dead").Result(); n != 0 {
		t.Errorf("%d dead letters", n)
	}
	if !redisSettled(rc, "echodo:orchestrator:jobs") {
		t.Errorf("jobs left queued or held")
	}
	if raw := regexp.MustCompile(`(?m)^redis: \d{4}/\d\d/\d\d `).FindString(r.logs()); raw != "" {
		t.Errorf("go-redis printed to stderr past slog: %q", raw)
	}
	// One line per worker per outage at most, never one per attempt. (A
	// worker that was inside runs for the whole outage never saw it, so
	// zero is possible: the queue package's tests check that an outage a
	// consumer meets is logged.)
	if got := strings.Count(r.logs(), "queue unavailable; retrying"); got > 2*2*2 {
		t.Errorf("workers logged %d queue outage lines, want one per worker per outage", got)
	}
	if t.Failed() {
		t.Log(r.logs())
	}
}

// TestWorkerDeadLettersBadInputOnFirstAttempt: payloads that can never run
// (not JSON, an unknown role, an unknown model alias, a missing repository)
// pushed by another tool are dead-lettered on their first attempt with the
// reason, never retried, and leave no run folder behind.
func TestWorkerDeadLettersBadInputOnFirstAttempt(t *testing.T) {
	r := newFaultRig(t, 0)
	dataRoot := filepath.Join(r.home, "data")
	ctx := context.Background()
	st, err := bus.Open(ctx, bus.Options{DataRoot: dataRoot})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	task := func(id, extra string) string {
		return fmt.Sprintf(`{"taskVersion":1,"id":%q,"prompt":"p","workspace":"repo","capabilities":{"tools":["read"]},"session":%q,"timeoutSeconds":60%s}`, id, id, extra)
	}
	bad := map[string]string{
		"not json":      "{this is not json",
		"unknown role":  task("t-role", `,"role":"no-such-role"`),
		"unknown model": task("t-model", `,"model":"no-such-model"`),
		"no repository": task("t-repo", `,"workspace":"nowhere"`),
	}
	bad["no repository"] = strings.Replace(bad["no repository"], `"workspace":"repo",`, "", 1)
	for _, p := range bad {
		if _, err := st.Enqueue(ctx, "echodo:orchestrator:jobs", []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("conductor", "worker", "--once", "--concurrency", "4", "--sandbox", "none")
	cmd.Env = r.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("worker: %v\n%s", err, out)
	}
	dead, err := st.DeadJobs(ctx, "echodo:orchestrator:jobs")
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != len(bad) {
		t.Fatalf("%d dead letters, want %d\n%s", len(dead), len(bad), out)
	}
	want := map[string]string{
		"not json": "not a JSON object", "unknown role": `unknown role "no-such-role"`,
		"unknown model": `"no-such-model"`, "no repository": `workspace "nowhere": no repository found`,
	}
	for _, d := range dead {
		if d.Attempts != 1 {
			t.Errorf("%s: %d attempts, want 1", d.Payload, d.Attempts)
		}
		found := false
		for _, w := range want {
			found = found || strings.Contains(d.LastError, w)
		}
		if !found {
			t.Errorf("%s: reason %q names none of the causes", d.Payload, d.LastError)
		}
	}
	if dirs, _ := filepath.Glob(filepath.Join(dataRoot, "runs", "*")); len(dirs) != 0 {
		t.Errorf("bad input left run folders: %v", dirs)
	}
}

// TestWorkerWaitsForStoreAtStart: a long-running worker started while
// PostgreSQL is down says so once and waits; when the server comes up it
// runs the queued jobs. (--once fails instead: cron tries again.)
func TestWorkerWaitsForStoreAtStart(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process fault test")
	}
	pg := testenv.PrivatePostgres(t)
	const jobs = 2
	r := newFaultRig(t, jobs, "REDIS_URL="+testenv.Redis(t), "DATABASE_URL="+pg.URL())
	r.enqueueAll()
	pg.Stop("fast")
	if _, err := r.conductor("worker", "--once", "--sandbox", "none"); err == nil {
		t.Fatal("worker --once with the store down exited 0")
	}
	w := r.startWorker()
	waitCond(t, "the worker to report the store down", func() bool {
		return strings.Contains(w.out.String(), "bus store unreachable; retrying")
	}, r.logs)
	pg.Start()
	waitCond(t, "every job done", func() bool { return len(r.finishedRunLines()) == jobs }, r.logs)
	if w.cmd.ProcessState != nil {
		t.Fatalf("the worker exited: %v", w.cmd.ProcessState)
	}
	r.stopWorkers()
	if n := strings.Count(w.out.String(), "bus store unreachable; retrying"); n != 1 {
		t.Errorf("%d outage lines, want 1\n%s", n, r.logs())
	}
}

// TestWorkerPreparesPrefetchedJobAheadOfItsLane: with one lane and
// --prefetch 1, the job taken ahead does its lookups and takes its run lock
// while the first job is in its conversation, and neither sends a model
// request nor starts its run (no run folder) until the lane frees.
func TestWorkerPreparesPrefetchedJobAheadOfItsLane(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process queue test")
	}
	redisURL := testenv.Redis(t)
	// The model's requests wait at a gate until the test opens it.
	var upstream atomic.Pointer[httputil.ReverseProxy]
	var requests atomic.Int32
	open := make(chan struct{})
	var opened sync.Once
	openGate := func() { opened.Do(func() { close(open) }) }
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		requests.Add(1)
		<-open
		upstream.Load().ServeHTTP(w, req)
	}))
	t.Cleanup(gate.Close)
	t.Cleanup(openGate) // runs before gate.Close: no handler stays blocked
	r := newFaultRig(t, 2, "REDIS_URL="+redisURL, "CONDUCTOR_MODEL_OLLAMA_QWEN_URL="+gate.URL+"/v1")
	u, err := url.Parse(strings.TrimSuffix(r.llm.URL(), "/v1"))
	if err != nil {
		t.Fatal(err)
	}
	upstream.Store(httputil.NewSingleHostReverseProxy(u))
	ids := r.enqueueAll()
	r.startWorker("--concurrency", "1", "--prefetch", "1")
	rc := redisClient(t, redisURL)
	locked := func(id string) bool {
		keys, err := rc.Keys(context.Background(), "*lock*run:"+id).Result()
		return err == nil && len(keys) > 0
	}
	waitCond(t, "the first job's model request at the gate and the second job's run lock taken", func() bool {
		return requests.Load() >= 1 && locked(ids[1])
	}, r.logs)
	if n := requests.Load(); n != 1 {
		t.Fatalf("%d model requests with one lane, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(r.home, "data", "runs", ids[1])); !errors.Is(err, fs.ErrNotExist) {
		t.Log(r.logs())
		t.Fatalf("the prefetched job's run started before a lane freed (stat: %v)", err)
	}
	// Two jobs are in the worker, one of them on its lane: the heartbeat
	// (mission control's "in flight / concurrency") counts the lane.
	since := time.Now()
	var beat bus.Heartbeat
	waitCond(t, "a heartbeat written while both jobs are in the worker", func() bool {
		hs, err := heartbeatStore(t, r.home).ListHeartbeats(context.Background(), time.Time{})
		for _, h := range hs {
			if err == nil && h.SeenAt.After(since) {
				beat = h
				return true
			}
		}
		return false
	}, r.logs)
	if beat.InFlight != 1 || beat.Concurrency != 1 || beat.Waiting != 1 || beat.Finishing != 0 {
		t.Errorf("heartbeat: %d in flight of %d, %d waiting, %d finishing; want 1 of 1 and the prefetched job waiting", beat.InFlight, beat.Concurrency, beat.Waiting, beat.Finishing)
	}
	openGate()
	waitCond(t, "both jobs done", func() bool { return len(r.finishedRunLines()) == 2 }, r.logs)
	r.stopWorkers()
	for id, n := range r.finishedRunLines() {
		if n != 1 {
			t.Errorf("run %s completed %d times", id, n)
		}
	}
	if !redisSettled(rc, "echodo:orchestrator:jobs") {
		t.Errorf("jobs left queued or held")
	}
}

// TestWorkerStartNotHeldByDockerReap: a worker whose backend is not docker
// still reaps the containers a killed docker worker left, but a docker
// CLI that does not answer must not hold its start: the reap runs beside
// the jobs. The fake docker hangs until the worker is gone (or 300 s, when
// it notes that it gave up): the job must be done while it still hangs.
func TestWorkerStartNotHeldByDockerReap(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process queue test")
	}
	r := newFaultRig(t, 1)
	r.enqueueAll()
	bin := t.TempDir()
	called, gaveUp := filepath.Join(bin, "called"), filepath.Join(bin, "gave-up")
	script := fmt.Sprintf("#!/bin/sh\ntouch %q\ni=0\nwhile [ $i -lt 3000 ]; do sleep 0.1; i=$((i+1)); done\ntouch %q\nexit 1\n", called, gaveUp)
	if err := os.WriteFile(filepath.Join(bin, "docker"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	env := append([]string(nil), r.env...)
	for i, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			env[i] = "PATH=" + bin + string(os.PathListSeparator) + strings.TrimPrefix(kv, "PATH=")
		}
	}
	cmd := exec.Command("conductor", "worker", "--once", "--model", "ollama-qwen", "--repo", r.repo, "--sandbox", "none")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("worker: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `"status":"succeeded"`) {
		t.Fatalf("the job did not succeed:\n%s", out)
	}
	if _, err := os.Stat(gaveUp); err == nil {
		t.Fatalf("the worker waited for the docker CLI before its job:\n%s", out)
	}
	if _, err := os.Stat(called); err != nil {
		t.Fatalf("the worker never ran the docker CLI: no reap of orphan containers\n%s", out)
	}
}
