package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/queue"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/testenv"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// slotScript is workerScript with answers slow enough that requests of
// several sessions overlap.
const slotScript = `{"mode": "history", "turns": [
 {"latencyMs": 400, "toolCalls": [{"name": "list_dir", "arguments": {"path": "."}}]},
 {"latencyMs": 400, "toolCalls": [{"name": "read_file", "arguments": {"path": "README.md"}}]},
 {"latencyMs": 400, "toolCalls": [{"name": "write_file", "arguments": {"path": "docs/note.md", "content": "worker was here\n"}}]},
 {"latencyMs": 400, "toolCalls": [{"name": "read_file", "arguments": {"path": "docs/note.md"}}]}
], "final": {"latencyMs": 400, "content": "done"}}`

// TestModelConcurrencyAcrossWorkers: two `conductor worker` processes with
// concurrency 4 each share one alias with maxConcurrent 2. The scripted
// server never answers more than 2 requests at once, also after one worker
// is killed with SIGKILL while it holds a slot; the slots that worker held
// are taken back once it is seen gone (the survivor reaches 2 at once
// again), long before their lease would expire, and every job completes.
// On the store's semaphore and on Redis's. The lease is long (15s): a short
// one expires under a loaded machine while its live holder's renewal waits
// for the CPU or the store, and another request rightly takes the slot.
// Lease expiry itself is checked on both stores: conductor/bus
// TestModelSlots (a fake clock) and conductor/queue TestRedisSlots.
func TestModelConcurrencyAcrossWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	t.Run("store", func(t *testing.T) { slotTrial(t, "") })
	t.Run("redis", func(t *testing.T) { slotTrial(t, testenv.PrivateRedis(t).URL()) })
}

func slotTrial(t *testing.T, redisURL string) {
	const jobs = 12
	extra := []string{"CONDUCTOR_MODEL_OLLAMA_QWEN_MAX_CONCURRENT=2", "CONDUCTOR_MODEL_SLOT_TTL=15s"}
	if redisURL != "" {
		extra = append(extra, "REDIS_URL="+redisURL)
	}
	r := newFaultRig(t, jobs, extra...)
	// A slower script than the rig's own, on a server of this test.
	script, err := fakellm.Parse([]byte(slotScript))
	if err != nil {
		t.Fatal(err)
	}
	r.llm = fakellm.Start(*script)
	t.Cleanup(r.llm.Close)
	for i, kv := range r.env {
		if strings.HasPrefix(kv, "CONDUCTOR_MODEL_OLLAMA_QWEN_URL=") {
			r.env[i] = "CONDUCTOR_MODEL_OLLAMA_QWEN_URL=" + r.llm.URL()
		}
	}
	runIDs := r.enqueueAll()

	slots := openTestSlots(t, r.home, redisURL)
	holds := func(pid int) bool {
		use, err := slots.SlotsInUse(context.Background())
		if err != nil {
			t.Logf("slots in use: %v", err)
			return false
		}
		for _, u := range use {
			for _, h := range u.Holders {
				if strings.Contains(h, ":"+strconv.Itoa(pid)+":") {
					return true
				}
			}
		}
		return false
	}
	victim := r.startWorker("--concurrency", "4")
	survivor := r.startWorker("--concurrency", "4")
	overload := func() {
		if p := r.llm.Peak(); p > 2 {
			t.Fatalf("the model server answered %d requests at once; the alias allows 2:\n%s\n%s", p, atPeak(r.llm), r.logs())
		}
	}
	waitCond(t, "both workers running jobs and the victim holding a model slot", func() bool {
		overload()
		return strings.Contains(survivor.out.String(), "starting run") &&
			strings.Contains(victim.out.String(), "starting run") && holds(victim.cmd.Process.Pid) && r.llm.InFlight() > 0 && everyRunSaved(r.home)
	}, r.logs)
	victim.cmd.Process.Signal(syscall.SIGKILL)
	victim.cmd.Wait()
	before := r.llm.Peak()
	r.llm.ResetPeak()
	// The victim's slots are held by a dead process until the survivor
	// sees it gone; then the survivor (4 jobs at once) uses both again.
	waitCond(t, "the survivor using both slots after freeing the victim's", func() bool {
		return r.llm.Peak() >= 2
	}, r.logs)
	waitCond(t, "every job done", func() bool { overload(); return len(r.finishedRunLines()) == jobs }, r.logs)
	// The workers' heartbeats: the killed one falls silent (gone once its
	// TTL passes), the survivor beats, then records its clean stop.
	beats := func() map[int]bus.Heartbeat {
		out := map[int]bus.Heartbeat{}
		hs, err := heartbeatStore(t, r.home).ListHeartbeats(context.Background(), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			out[h.PID] = h
		}
		return out
	}
	waitCond(t, "the killed worker's heartbeat gone stale", func() bool {
		h, ok := beats()[victim.cmd.Process.Pid]
		return ok && h.Gone(time.Now()) && h.StoppedAt.IsZero()
	}, r.logs)
	if h := beats()[survivor.cmd.Process.Pid]; h.Gone(time.Now()) || h.Concurrency != 4 || !strings.Contains(h.Queue, "echodo:orchestrator:jobs") {
		t.Errorf("survivor's heartbeat: %+v", h)
	}
	r.stopWorkers()
	if h := beats()[survivor.cmd.Process.Pid]; h.StoppedAt.IsZero() || h.InFlight != 0 {
		t.Errorf("stopped survivor's heartbeat: %+v", h)
	}
	if before > 2 || r.llm.Peak() > 2 {
		t.Errorf("the model server answered %d requests at once before the kill and %d after; the alias allows 2", before, r.llm.Peak())
	}
	for id, status := range finishedRuns(t, r.home) {
		if status != "succeeded" {
			t.Errorf("run %s: %s", id, status)
		}
	}
	if got := len(finishedRuns(t, r.home)); got != len(runIDs) {
		t.Errorf("%d runs finished, want %d", got, len(runIDs))
	}
	// Nothing is left held once every worker is gone: the victim's slots
	// were freed (the survivor used both), so the semaphore is empty.
	use, err := slots.SlotsInUse(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range use {
		if u.InUse != 0 {
			t.Errorf("alias %s: %d slots still held after every worker stopped: %v", u.Name, u.InUse, u.Holders)
		}
	}
	if t.Failed() {
		t.Log(r.logs())
	}
}

// everyRunSaved reports whether every run folder's run has its session
// state saved (a run killed before that cannot be resumed: a separate,
// known gap of the worker, not what this test is about).
func everyRunSaved(home string) bool {
	saved := map[string]bool{}
	states, _ := filepath.Glob(filepath.Join(home, "data", "sessions", "*", "*", "state.json"))
	for _, p := range states {
		b, _, err := runrec.ReadVersioned(p)
		var st struct {
			RunID string `json:"runId"`
		}
		if err == nil && json.Unmarshal(b, &st) == nil {
			saved[st.RunID] = true
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(home, "data", "runs", "*"))
	for _, d := range dirs {
		if !saved[filepath.Base(d)] {
			return false
		}
	}
	return len(dirs) > 0
}

// heartbeatStore opens the rig's store (where workers beat, whatever the queue).
func heartbeatStore(t *testing.T, home string) bus.Workers {
	t.Helper()
	st, err := bus.Open(context.Background(), bus.Options{DataRoot: filepath.Join(home, "data")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st.(bus.Workers)
}

// openTestSlots opens the semaphore the workers share, to read its holders.
func openTestSlots(t *testing.T, home, redisURL string) queue.SlotStore {
	t.Helper()
	ctx := context.Background()
	if redisURL != "" {
		s, err := queue.DialRedisSlots(ctx, redisURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	dataRoot := filepath.Join(home, "data")
	if err := os.MkdirAll(dataRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := bus.Open(ctx, bus.Options{DataRoot: dataRoot})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ss, ok := st.(queue.SlotStore)
	if !ok {
		t.Fatalf("store %T keeps no model slots", st)
	}
	return ss
}

// atPeak describes the requests the server was answering at its peak: the
// client's address, the task its prompt names, when it began and ended,
// and its status (499: the client went away).
func atPeak(llm *fakellm.Server) string {
	var b strings.Builder
	task := regexp.MustCompile(`t-[0-9]+`)
	for _, q := range llm.AtPeak() {
		end := "still open"
		if !q.End.IsZero() {
			end = q.End.Format("15:04:05.000")
		}
		fmt.Fprintf(&b, "  %s task %s: %s to %s, status %d\n", q.Remote, task.FindString(q.RawText), q.Start.Format("15:04:05.000"), end, q.Status)
	}
	return b.String()
}
