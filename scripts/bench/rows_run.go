package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	openai "github.com/sashabaranov/go-openai"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/queue"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
	"github.com/conductor-dev/conductor/runtask"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// toolStep is one scripted tool call.
type toolStep struct {
	tool string
	args map[string]any
}

// overheadSteps are the 20 tool steps of the overhead row: five times
// list, read, edit an existing file, write a new one.
func (b *bench) overheadSteps() ([]toolStep, error) {
	var steps []toolStep
	for i := 0; i < 5; i++ {
		d := (i * 37) % b.folders
		dir := fmt.Sprintf("pkg%02d/d%04d", d%50, d)
		file := b.path(d, 3)
		body, err := b.git(b.repo, "--git-dir="+b.gitDir, "show", b.base+":"+file)
		if err != nil {
			return nil, err
		}
		// edit_file needs a unique string: the file's longest line.
		var old string
		for _, l := range strings.Split(body, "\n") {
			if len(l) > len(old) {
				old = l
			}
		}
		if strings.Count(body, old) != 1 {
			return nil, fmt.Errorf("%s: no unique line to edit", file)
		}
		steps = append(steps,
			toolStep{runtask.ToolListDir, map[string]any{"path": dir}},
			toolStep{runtask.ToolReadFile, map[string]any{"path": file}},
			toolStep{runtask.ToolEditFile, map[string]any{"path": file, "old_string": old, "new_string": old + " // edited"}},
			toolStep{runtask.ToolWriteFile, map[string]any{"path": fmt.Sprintf("new/n%d.go", i), "content": fmt.Sprintf("package n\n\nconst N%d = %d\n", i, i)}},
		)
	}
	return steps, nil
}

// zeroModel answers from the conversation state with no latency: the reply
// index is the number of assistant messages already sent, so it needs no
// state of its own.
type zeroModel struct{ steps []toolStep }

func (m *zeroModel) Complete(_ context.Context, req runtask.ModelRequest) (runtask.ModelReply, error) {
	n := 0
	for _, msg := range req.Messages {
		if msg.Role == openai.ChatMessageRoleAssistant {
			n++
		}
	}
	usage := &runtask.Usage{PromptTokens: 100, CompletionTokens: 10, TotalTokens: 110}
	if n >= len(m.steps) {
		return runtask.ModelReply{Message: openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: "done"},
			FinishReason: "stop", Usage: usage, Model: "bench"}, nil
	}
	s := m.steps[n]
	args, err := json.Marshal(s.args)
	if err != nil {
		return runtask.ModelReply{}, err
	}
	return runtask.ModelReply{Message: openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{
		ID: fmt.Sprintf("call_%d", n), Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: s.tool, Arguments: string(args)},
	}}}, FinishReason: "tool_calls", Usage: usage, Model: "bench"}, nil
}

// rowOverhead: runtask.Run (20 tool steps, zero-latency model) against the
// bare git pipeline doing the same edits: worktree add + edits + add -N +
// diff | patch-id + worktree remove.
func (b *bench) rowOverhead() error {
	pol, err := policy.Load(roles.FS, "")
	if err != nil {
		return err
	}
	role, err := pol.Role("implementer")
	if err != nil {
		return err
	}
	dataRoot := filepath.Join(b.tmp, "run-data")
	steps, err := b.overheadSteps()
	if err != nil {
		return err
	}
	task := func(session string) runtask.Task {
		return runtask.Task{TaskVersion: 1, ID: "t-bench", Prompt: "Edit five files and add five.", Workspace: "bench",
			Capabilities: runtask.Capabilities{Tools: []string{"read_file", "write_file", "edit_file", "list_dir"}},
			Session:      session, TimeoutSeconds: 600, Base: b.base, MaxSteps: 30}
	}
	conductorRun := func(session, poolSize string) (time.Duration, error) {
		var res runrec.Result
		d, err := timed(func() (err error) {
			res, err = runtask.Run(b.ctx, runtask.Options{Task: task(session), Config: conductor.Config{DataRoot: dataRoot, PoolSize: poolOf(map[string]int{"0": 0, "1": 1}[poolSize]).PoolSize}, Repo: b.repo,
				WorktreeBase: filepath.Join(dataRoot, "worktrees-pool-"+poolSize), // the cold runs must not take the warm runs' slot
				Model:        &zeroModel{steps: steps}, ModelName: "bench", ModelAlias: "bench", Role: role,
				Getenv: envWith(nil), Stderr: io.Discard})
			return err
		})
		if err != nil {
			return 0, err
		}
		if res.Status != runrec.StatusSucceeded || res.Steps < 20 || len(res.FilesChanged) != 10 {
			return 0, fmt.Errorf("run %s: status %s, %d steps, %d files changed (%s)", res.RunID, res.Status, res.Steps, len(res.FilesChanged), res.Error)
		}
		return d, nil
	}
	floorRun := func(i int) error {
		wt, err := b.worktree(fmt.Sprintf("floor-%d", i), b.base)
		if err != nil {
			return err
		}
		for _, s := range steps {
			p := filepath.Join(wt, s.args["path"].(string))
			switch s.tool {
			case runtask.ToolListDir:
				if _, err := os.ReadDir(p); err != nil {
					return err
				}
			case runtask.ToolReadFile:
				if _, err := os.ReadFile(p); err != nil {
					return err
				}
			case runtask.ToolEditFile:
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				old, nw := s.args["old_string"].(string), s.args["new_string"].(string)
				if err := os.WriteFile(p, bytes.Replace(data, []byte(old), []byte(nw), 1), 0o644); err != nil {
					return err
				}
			case runtask.ToolWriteFile:
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(p, []byte(s.args["content"].(string)), 0o644); err != nil {
					return err
				}
			}
		}
		if _, err := b.git(wt, "add", "-A", "-N", "."); err != nil {
			return err
		}
		var out bytes.Buffer
		if _, err := b.runProc(wt, "", &out, "sh", "-c", "git diff --binary HEAD | git patch-id --stable"); err != nil {
			return err
		}
		if out.Len() < 40 {
			return fmt.Errorf("floor: no patch-id")
		}
		return b.removeWorktree(wt)
	}
	if _, err := conductorRun("bench-fill", "1"); err != nil { // fills the pool, warms everything
		return err
	}
	if err := floorRun(-1); err != nil {
		return err
	}
	warm := row{name: "conductor overhead per task, 20 tool steps, warm pool vs bare git pipeline", goal: "≤ 1.10×", oursLabel: "run-task", floorLabel: "git"}
	cold := row{name: "conductor overhead per task, 20 tool steps, no pool (fresh checkout) vs bare git pipeline", goal: "≤ 1.10×", oursLabel: "run-task", floorLabel: "git"}
	for i := 0; i < b.sz.runs; i++ {
		f, err := timed(func() error { return floorRun(i) })
		if err != nil {
			return err
		}
		w, err := conductorRun(fmt.Sprintf("bench-warm-%d", i), "1")
		if err != nil {
			return err
		}
		c, err := conductorRun(fmt.Sprintf("bench-cold-%d", i), "0")
		if err != nil {
			return err
		}
		warm.floor, warm.ours = append(warm.floor, f), append(warm.ours, w)
		cold.floor, cold.ours = append(cold.floor, f), append(cold.ours, c)
	}
	warm.note = "runtask.Run in process with a zero-latency scripted model: task, worktree from the pool, 20 tool steps with fsynced transcript and session state, extraction, patch-id, run record, release; floor = `worktree add --detach` + the same edits + `add -A -N` + `diff --binary | patch-id --stable` + `worktree remove`"
	cold.note = "the same with WORKER_POOL_SIZE=0: every task checks out a new worktree and removes it"
	b.rows = append(b.rows, warm, cold)
	return nil
}

// startRedis starts a private redis-server on a unix socket.
func (b *bench) startRedis() (url string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("redis-server not found: install redis-server for the queue row")
	}
	dir := filepath.Join(b.tmp, "redis")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() { cmd.Process.Kill(); cmd.Wait() }
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			return "unix://" + sock, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("redis-server did not create %s within 10s", sock)
		}
	}
}

// rowQueue: one `conductor worker --concurrency 8` process on a real
// redis-server against a scripted model that waits 50 ms per call. Bursts
// of jobs measure throughput against the ideal (8 jobs at a time, each
// costing only its model calls); jobs pushed one at a time into idle
// workers measure enqueue-to-start latency.
func (b *bench) rowQueue() error {
	const workers, latency = 8, 50 * time.Millisecond
	redisURL, stopRedis, err := b.startRedis()
	if err != nil {
		return err
	}
	defer stopRedis()
	// Each call takes 50 ms from the request's arrival to the end of its
	// answer, as a server generating tokens: the first event at 40 ms, the
	// rest streamed over the last 10.
	const modelTime = `"latencyMs": 40, "streamMs": 10`
	var turns []string
	for i := 0; i < b.sz.queueSteps; i++ { // every call differs (the stuck-loop stop ends repeats)
		if i%2 == 0 {
			turns = append(turns, fmt.Sprintf(`{%s, "toolCalls": [{"name": "write_file", "arguments": {"path": "notes/n%d.md", "content": "step %d\n"}}]}`, modelTime, i, i))
		} else {
			turns = append(turns, fmt.Sprintf(`{%s, "toolCalls": [{"name": "read_file", "arguments": {"path": "notes/n%d.md"}}]}`, modelTime, i-1))
		}
	}
	// The model keeps no request bodies: thousands of conversations in
	// memory would cost the machine the row measures.
	script, err := fakellm.Parse([]byte(`{"mode": "history", "forgetBodies": true, "turns": [` + strings.Join(turns, ",") + `], "final": {` + modelTime + `, "content": "done"}}`))
	if err != nil {
		return err
	}
	llm := fakellm.Start(*script)
	defer llm.Close()

	// A small workspace repository: the row measures the queue and the
	// concurrency, not checkouts (those are the rows above).
	home := filepath.Join(b.tmp, "queue")
	repo := filepath.Join(home, "repo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(repo, "README.md"), []byte("# queue bench\n"), 0o644); err != nil {
		return err
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-qm", "init"}} {
		if _, err := b.git(repo, args...); err != nil {
			return err
		}
	}
	data := filepath.Join(home, "data")
	env := append(append([]string(nil), b.env...),
		"CONDUCTOR_HOME="+data, "REDIS_URL="+redisURL,
		"CONDUCTOR_MODEL_OLLAMA_QWEN_URL="+llm.URL(), "CONDUCTOR_MODEL_OLLAMA_QWEN_MODEL=fake",
		fmt.Sprintf("CONDUCTOR_MODEL_OLLAMA_QWEN_MAX_CONCURRENT=%d", workers), fmt.Sprintf("WORKER_POOL_SIZE=%d", 2*workers))
	// Fill the worker's pool first, one at a time, with a worktree for each
	// job that may run at once (each lane's job in its conversation, and
	// the one finishing beside it): the bench measures warm workers.
	wtBase := filepath.Join(data, "worktrees")
	env = append(env, "WORKER_WORKTREE_BASE="+wtBase)
	pool := runtask.NewPool(wtBase, patch.Git{GitDir: filepath.Join(repo, ".git")}, poolOf(2*workers))
	head, err := b.git(repo, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	var leases []*runtask.Lease
	for i := 0; i < 2*workers; i++ {
		l, err := pool.Acquire(b.ctx, head, "bench-fill")
		if err != nil {
			return fmt.Errorf("fill the pool: %w", err)
		}
		leases = append(leases, l)
	}
	for _, l := range leases {
		if err := l.Release(b.ctx); err != nil {
			return fmt.Errorf("fill the pool: %w", err)
		}
	}
	var werr bytes.Buffer
	worker := exec.Command(b.bin, "worker", "--concurrency", fmt.Sprint(workers), "--wait", "1", "--model", "ollama-qwen",
		"--repo", repo, "--sandbox", "none", "--grace", "5s")
	// The worker's log is kept in the scratch folder too (-keep keeps it).
	wlog, err := os.Create(filepath.Join(home, "worker.log"))
	if err != nil {
		return err
	}
	defer wlog.Close()
	worker.Env, worker.Stdout, worker.Stderr = env, io.Discard, io.MultiWriter(&werr, wlog)
	if err := worker.Start(); err != nil {
		return err
	}
	defer func() {
		worker.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { worker.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			worker.Process.Kill()
			<-done
		}
	}()
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()

	calls := b.sz.queueSteps + 1
	perJob := time.Duration(calls) * latency
	seq := 0
	push := func() (string, time.Time, error) {
		seq++
		id := fmt.Sprintf("r-bench-%04d", seq)
		task := fmt.Sprintf(`{"taskVersion":1,"id":"t-q%04d","prompt":"take notes","workspace":"repo","capabilities":{"tools":["read","write","edit"]},"session":"q-%04d","timeoutSeconds":120,"role":"implementer"}`, seq, seq)
		payload := fmt.Sprintf(`{"runId":%q,"task":%s}`, id, task)
		t0 := time.Now()
		return id, t0, rdb.RPush(b.ctx, queue.DefaultKey, payload).Err()
	}
	// wait polls the run records until every id has finished and returns
	// their records. notBefore (nil: none) is when the id at an index can
	// have finished at the earliest; it is not looked at before then.
	//
	// The poller must not eat the CPU the row measures: a record is read
	// again only when its file changed (records are replaced by rename, so
	// a new inode or size), and a job is not polled before it can have
	// finished.
	type seenFile struct {
		ino  uint64
		size int64
	}
	seen := map[string]seenFile{}
	wait := func(ids []string, notBefore func(i int) time.Time, limit time.Duration) (map[string]runrec.Result, error) {
		got := map[string]runrec.Result{}
		deadline := time.Now().Add(limit)
		for len(got) < len(ids) {
			if worker.ProcessState != nil {
				return nil, fmt.Errorf("worker exited: %s", tail(werr.String(), 600))
			}
			now := time.Now()
			for i, id := range ids {
				if _, ok := got[id]; ok {
					continue
				}
				if notBefore != nil && now.Before(notBefore(i)) {
					continue
				}
				path := filepath.Join(data, "runs", id, runrec.ResultFile)
				fi, err := os.Stat(path)
				if err != nil {
					continue
				}
				sf := seenFile{size: fi.Size()}
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					sf.ino = st.Ino
				}
				if seen[id] == sf {
					continue
				}
				raw, err := os.ReadFile(path)
				if err != nil {
					continue
				}
				seen[id] = sf
				var res runrec.Result
				if json.Unmarshal(raw, &res) != nil || res.FinishedAt.IsZero() {
					continue
				}
				if res.Status != runrec.StatusSucceeded {
					return nil, fmt.Errorf("run %s: %s: %s", id, res.Status, res.Error)
				}
				got[id] = res
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("%d of %d jobs finished within %s; worker log: %s", len(got), len(ids), limit, tail(werr.String(), 600))
			}
			time.Sleep(5 * time.Millisecond)
		}
		return got, nil
	}
	burst := func(n int) (time.Duration, error) {
		ids := make([]string, n)
		var t0 time.Time
		for i := range ids {
			id, at, err := push()
			if err != nil {
				return 0, err
			}
			ids[i] = id
			if i == 0 {
				t0 = at
			}
		}
		// The burst ends when the poller (every 5 ms) has seen every final
		// record: conservative, and unlike the records' finishedAt it
		// includes writing the patch and the record. The jobs are taken in
		// order by `workers` lanes, each job's calls one after another, so
		// the i-th cannot end before (i/workers + 1) jobs' model time.
		notBefore := func(i int) time.Time { return t0.Add(time.Duration(i/workers+1) * perJob) }
		if _, err := wait(ids, notBefore, 5*time.Minute); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	}
	// Warm up: fill the pool with one worktree per slot.
	if _, err := burst(workers); err != nil {
		return err
	}
	ideal := time.Duration(int(math.Ceil(float64(b.sz.queueJobs)/workers))) * perJob
	var ratios []float64
	var took []time.Duration
	before, err := b.machineProbe(home)
	if err != nil {
		return err
	}
	// CPU over the bursts: the worker with the git processes it ran, and
	// the whole machine (the worker, git, redis-server, the scripted model
	// and the poller here). Steadier than the ratio from run to run.
	// Each of conductor's bursts is followed by one of the measured floor:
	// the same conversations on the same lanes from a bare client, its
	// first request the size of conductor's; the two are compared burst by
	// burst, so a slower moment of the machine hits both.
	var (
		cpu        = cpuTimes{ok: true}
		conductors []fakellm.RecordedRequest // conductor's calls in the bursts
		plain      *plainClient
		floorTook  []time.Duration
		vsFloor    []float64
	)
	for i := 0; i < b.sz.queueBursts; i++ {
		cpu0, asked := readCPU(worker.Process.Pid), len(llm.Requests())
		d, err := burst(b.sz.queueJobs)
		if err != nil {
			return err
		}
		cpu = cpu.add(readCPU(worker.Process.Pid).sub(cpu0))
		conductors = append(conductors, llm.Requests()[asked:]...)
		took = append(took, d)
		ratios = append(ratios, ideal.Seconds()/d.Seconds())
		if plain == nil {
			plain = newPlainClient(llm.URL(), b.sz.queueSteps, workers, firstRequestSize(conductors))
		}
		f, err := plain.burst(b.ctx, b.sz.queueJobs)
		if err != nil {
			return err
		}
		floorTook = append(floorTook, f)
		vsFloor = append(vsFloor, f.Seconds()/d.Seconds())
	}
	// The model's own time per call in the bursts, as the fake saw it:
	// arrival to the end of its answer. The ideal counts 50 ms; what the
	// fake takes beyond that (its timer waking late, the streamed chunks)
	// is the model's, and the note shows the ratio at this time too.
	own := modelOwnTime(conductors)
	after, err := b.machineProbe(home)
	if err != nil {
		return err
	}
	// After the bursts, so that doctor's own probes (bwrap, docker) take
	// nothing from them.
	fsCell := b.dataRootFS(env)
	if fsCell != "" {
		fsCell = ", " + fsCell
	}
	cpuCell := ""
	if jobs := float64(b.sz.queueJobs * b.sz.queueBursts); cpu.ok && cpu.all > 0 {
		cpuCell = fmt.Sprintf("; CPU per job: worker and its git %s, whole machine %s (%.0f%% of %d cores busy)",
			fmtDur(cpu.proc/jobs), fmtDur(cpu.busy/jobs), 100*cpu.busy/cpu.all, runtime.NumCPU())
	}
	// Latency: jobs pushed one at a time into idle workers.
	var lat, alone []float64
	for i := 0; i < b.sz.latencyJobs; i++ {
		id, at, err := push()
		if err != nil {
			return err
		}
		got, err := wait([]string{id}, nil, time.Minute)
		if err != nil {
			return err
		}
		alone = append(alone, time.Since(at).Seconds())
		lat = append(lat, got[id].StartedAt.Sub(at).Seconds())
		time.Sleep(time.Duration(20+(i*37)%80) * time.Millisecond)
	}
	sort.Float64s(lat)
	am, _, _ := stats(alone)
	med, lo, hi := stats(ratios)
	tm, tlo, thi := stats(secs(took))
	jobsPerSec := float64(b.sz.queueJobs) / tm
	fm, flo, fhi := stats(secs(floorTook))
	vm, vlo, vhi := stats(vsFloor)
	floorCell := fmt.Sprintf("; the measured floor, the same conversations from a bare go-openai client on %d lanes after each burst (no tools, records, store, queue or git; its first request %d bytes like conductor's): %s (%s–%s) per burst, %.2f× ideal, and conductor runs at **%.2f× that floor** (%.2f–%.2f, burst by burst)",
		workers, plain.firstSize, fmtDur(fm), fmtDur(flo), fmtDur(fhi), ideal.Seconds()/fm, vm, vlo, vhi)
	ownCell := "the fake's own time per call could not be read"
	if own.n > 0 {
		atOwn := ideal.Seconds() * own.mean / latency.Seconds() / tm // the ideal at the fake's own time
		ownCell = fmt.Sprintf("the fake model's own time per call in the bursts, arrival to the end of its answer: mean %s, p50 %s, p99 %s over %d calls (the ideal counts 50 ms); at that time the ratio is %.2f×",
			fmtDur(own.mean), fmtDur(own.p50), fmtDur(own.p99), own.n, atOwn)
	}
	b.rows = append(b.rows, row{
		name: fmt.Sprintf("queue: %d concurrent workers, model 50 ms per call, %d jobs × %d calls", workers, b.sz.queueJobs, calls),
		oursCell: fmt.Sprintf("%s (%s–%s) per burst, %.1f jobs/s; enqueue→start p50 %s, p99 %s%s", fmtDur(tm), fmtDur(tlo), fmtDur(thi), jobsPerSec,
			fmtDur(percentile(lat, 0.50)), fmtDur(percentile(lat, 0.99)), cpuCell),
		floorCell: fmt.Sprintf("ideal %s per burst, %.1f jobs/s", fmtDur(ideal.Seconds()), float64(b.sz.queueJobs)/ideal.Seconds()),
		ratioCell: fmt.Sprintf("**%.2f×** ideal (%.2f–%.2f)", med, lo, hi),
		goal:      "≥ 0.90× ideal",
		note: fmt.Sprintf("one `conductor worker --concurrency %d` process on a private redis-server (unix socket), fakellm over HTTP in history mode; ideal = ⌈jobs/%d⌉ × calls × 50 ms (model time only); %s; latency over %d jobs pushed one at a time into idle workers (push → the run's startedAt); such a job alone, push to its record, takes %s against %s of model time; the machine before → after the bursts: a git process %s → %s, a 4 KiB write and fsync %s → %s%s; %s",
			workers, workers, count(b.sz.queueBursts, "burst"), len(lat), fmtDur(am), fmtDur(perJob.Seconds()),
			fmtDur(before.exec.Seconds()), fmtDur(after.exec.Seconds()), fmtDur(before.fsync.Seconds()), fmtDur(after.fsync.Seconds()),
			fsCell, ownCell) + floorCell,
	})
	return nil
}

// ownTime is the model's own time per answered call (seconds).
type ownTime struct {
	n              int
	mean, p50, p99 float64
}

// modelOwnTime measures the fake's answered chat completions: from each
// request's arrival to the end of its answer.
func modelOwnTime(reqs []fakellm.RecordedRequest) ownTime {
	var d []float64
	for _, r := range reqs {
		if strings.TrimSuffix(r.Path, "/") != "/v1/chat/completions" || r.Status != 200 || r.End.IsZero() {
			continue
		}
		d = append(d, r.End.Sub(r.Start).Seconds())
	}
	if len(d) == 0 {
		return ownTime{}
	}
	sort.Float64s(d)
	sum := 0.0
	for _, v := range d {
		sum += v
	}
	return ownTime{n: len(d), mean: sum / float64(len(d)), p50: percentile(d, 0.50), p99: percentile(d, 0.99)}
}

// plainClient is the queue row's measured floor: the same conversations
// against the same scripted model on the same lanes, sent by a bare
// go-openai client that does nothing between calls (no tools, records,
// store, queue or git). What it loses against the ideal is the machine's
// and the model's (HTTP on loopback, the fake's timers and its serving);
// what conductor loses beyond it is conductor's.
type plainClient struct {
	client    *openai.Client
	steps     int    // tool calls per conversation; one final answer follows
	workers   int    // lanes
	system    string // the system prompt, padded to conductor's first request's size
	firstSize int    // the first request's size in bytes
}

func newPlainClient(url string, steps, workers, firstSize int) *plainClient {
	cfg := openai.DefaultConfig("")
	cfg.BaseURL = url
	p := &plainClient{client: openai.NewClientWithConfig(cfg), steps: steps, workers: workers}
	if pad := firstSize - p.openingSize(); pad > 0 {
		p.system = strings.Repeat("x", pad)
	}
	p.firstSize = p.openingSize()
	return p
}

var plainTools = []openai.Tool{
	{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "read_file", Description: "Read a file of the worktree.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}},
	{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "write_file", Description: "Write a file of the worktree.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}`)}},
}

func (p *plainClient) request(msgs []openai.ChatCompletionMessage) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{Model: "fake", Messages: msgs, Tools: plainTools, Stream: true,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true}}
}

// openingSize is the size of the first request's JSON.
func (p *plainClient) openingSize() int {
	b, _ := json.Marshal(p.request(p.opening()))
	return len(b)
}

func (p *plainClient) opening() []openai.ChatCompletionMessage {
	return []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "You are a worker." + p.system},
		{Role: openai.ChatMessageRoleUser, Content: "take notes"},
	}
}

// conversation makes one job's calls, one after another, each answer read
// to its end before the next request.
func (p *plainClient) conversation(ctx context.Context) error {
	msgs := p.opening()
	for call := 0; call <= p.steps; call++ {
		stream, err := p.client.CreateChatCompletionStream(ctx, p.request(msgs))
		if err != nil {
			return fmt.Errorf("plain client, call %d: %w", call+1, err)
		}
		reply := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant}
		var calls []openai.ToolCall
		for {
			chunk, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				stream.Close()
				return fmt.Errorf("plain client, call %d: %w", call+1, err)
			}
			for _, c := range chunk.Choices {
				reply.Content += c.Delta.Content
				for _, tc := range c.Delta.ToolCalls {
					i := 0
					if tc.Index != nil {
						i = *tc.Index
					}
					for len(calls) <= i {
						calls = append(calls, openai.ToolCall{Type: openai.ToolTypeFunction})
					}
					if tc.ID != "" {
						calls[i].ID = tc.ID
					}
					calls[i].Function.Name += tc.Function.Name
					calls[i].Function.Arguments += tc.Function.Arguments
				}
			}
		}
		stream.Close()
		reply.ToolCalls = calls
		msgs = append(msgs, reply)
		for _, c := range calls {
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: c.ID, Name: c.Function.Name, Content: "ok"})
		}
		if call < p.steps && len(calls) == 0 {
			return fmt.Errorf("plain client, call %d: the model answered without a tool call", call+1)
		}
	}
	return nil
}

// burst runs jobs conversations on the lanes and returns how long they
// took together.
func (p *plainClient) burst(ctx context.Context, jobs int) (time.Duration, error) {
	var next atomic.Int64
	errs := make(chan error, p.workers)
	t0 := time.Now()
	for range p.workers {
		go func() {
			for next.Add(1) <= int64(jobs) {
				if err := p.conversation(ctx); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range p.workers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return time.Since(t0), first
}

// firstRequestSize is the mean size of the conversations' first requests
// (the first turn answered) among reqs.
func firstRequestSize(reqs []fakellm.RecordedRequest) int {
	n, sum := 0, 0
	for _, r := range reqs {
		if r.Turn == 0 && r.Status == 200 {
			n, sum = n+1, sum+r.Size
		}
	}
	if n == 0 {
		return 0
	}
	return sum / n
}
