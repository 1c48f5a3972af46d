package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/testenv"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// workerEnv is an isolated environment for conductor subprocesses.
func workerEnv(t *testing.T, home string, extra ...string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "CONDUCTOR_HOME=" + filepath.Join(home, "data"),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=T", "GIT_AUTHOR_EMAIL=t@example.test", "GIT_COMMITTER_NAME=T", "GIT_COMMITTER_EMAIL=t@example.test",
		"GOCACHE=" + filepath.Join(home, "gocache"), "TMPDIR=" + os.TempDir(),
	}
	return append(env, extra...)
}

func gitT(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// workerScript is a session of four steps with a little latency per turn,
// answered by conversation state so that concurrent and resumed sessions
// each get the right turn.
const workerScript = `{"mode": "history", "turns": [
 {"latencyMs": 150, "toolCalls": [{"name": "list_dir", "arguments": {"path": "."}}]},
 {"latencyMs": 150, "toolCalls": [{"name": "read_file", "arguments": {"path": "README.md"}}]},
 {"latencyMs": 150, "toolCalls": [{"name": "write_file", "arguments": {"path": "docs/note.md", "content": "worker was here\n"}}]},
 {"latencyMs": 150, "toolCalls": [{"name": "read_file", "arguments": {"path": "docs/note.md"}}]}
], "final": {"latencyMs": 50, "content": "done"}}`

// TestWorkersRedisKillAndResume: 30 jobs, 3 worker processes, one killed
// with SIGKILL mid-job; every job completes exactly once, the killed run
// resumes from its checkpoint, the processing lists end empty and a poison
// job is dead-lettered.
func TestWorkersRedisKillAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process queue test")
	}
	redisURL := testenv.Redis(t)
	home := t.TempDir()
	script, err := fakellm.Parse([]byte(workerScript))
	if err != nil {
		t.Fatal(err)
	}
	llm := fakellm.Start(*script)
	defer llm.Close()
	env := workerEnv(t, home,
		"REDIS_URL="+redisURL,
		"CONDUCTOR_MODEL_OLLAMA_QWEN_URL="+llm.URL(), "CONDUCTOR_MODEL_OLLAMA_QWEN_MODEL=fake",
		"WORKER_CHECKPOINT_EVERY_N_STEPS=1")
	repo := filepath.Join(home, "repo")
	os.MkdirAll(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# repo\n"), 0o644)
	gitT(t, repo, env, "init", "-q", "-b", "main")
	gitT(t, repo, env, "add", "-A")
	gitT(t, repo, env, "commit", "-qm", "init")

	const jobs = 30
	tasks := filepath.Join(home, "tasks")
	os.MkdirAll(tasks, 0o755)
	for i := 0; i < jobs; i++ {
		p := filepath.Join(tasks, fmt.Sprintf("t%02d.json", i))
		os.WriteFile(p, []byte(fmt.Sprintf(`{"taskVersion":1,"id":"t-%02d","prompt":"write the note","workspace":"repo",
 "capabilities":{"tools":["read","write","edit"]},"session":"s-%02d","timeoutSeconds":120,"role":"implementer"}`, i, i)), 0o644)
		cmd := exec.Command("conductor", "enqueue", p)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("enqueue: %v\n%s", err, out)
		}
	}
	rc := redisClient(t, redisURL)
	ctx := context.Background()
	rc.RPush(ctx, "echodo:orchestrator:jobs", `{"roleId":"implementer","harness":"gui tool"}`) // poison

	start := func(name string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command("conductor", "worker", "--concurrency", "2", "--wait", "1", "--heartbeat-ttl", "2s",
			"--model", "ollama-qwen", "--repo", repo, "--sandbox", "none", "--grace", "5s")
		var out bytes.Buffer
		cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, &out
	}
	victim, victimOut := start("w1")
	// Kill the victim once it holds a job that has checkpointed at least once.
	var killedRuns []string
	deadline := time.Now().Add(60 * time.Second)
	for killedRuns == nil {
		if time.Now().After(deadline) {
			t.Fatalf("victim never got mid-job:\n%s", victimOut)
		}
		keys, _ := rc.Keys(ctx, fmt.Sprintf("echodo:orchestrator:jobs:processing:*:%d:*", victim.Process.Pid)).Result()
		for _, k := range keys {
			items, _ := rc.LRange(ctx, k, 0, -1).Result()
			for _, it := range items {
				var env struct{ RunID string }
				json.Unmarshal([]byte(it), &env)
				if env.RunID != "" && hasCheckpoint(home, env.RunID) {
					killedRuns = append(killedRuns, env.RunID)
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	victim.Process.Signal(syscall.SIGKILL)
	victim.Wait()
	w2, out2 := start("w2")
	w3, out3 := start("w3")

	// Wait for all 30 runs to succeed and the poison job to be buried.
	deadline = time.Now().Add(150 * time.Second)
	for {
		done := finishedRuns(t, home)
		dead, _ := rc.LLen(ctx, "echodo:orchestrator:jobs:dead").Result()
		if len(done) == jobs && dead == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d/%d runs finished, %d dead letters\nw2:\n%s\nw3:\n%s", len(done), jobs, dead, out2, out3)
		}
		time.Sleep(200 * time.Millisecond)
	}
	w2.Process.Signal(syscall.SIGTERM)
	w3.Process.Signal(syscall.SIGTERM)
	w2.Wait()
	w3.Wait()

	done := finishedRuns(t, home)
	for id, status := range done {
		if status != runrec.StatusSucceeded {
			t.Errorf("run %s: status %s", id, status)
		}
	}
	// The killed run resumed: its transcript shows a resume, and the job
	// ran through to one result.
	for _, id := range killedRuns {
		tr, err := os.ReadFile(filepath.Join(home, "data", "runs", id, runrec.TranscriptFile))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(tr, []byte("resume")) && !bytes.Contains(tr, []byte("continu")) {
			t.Errorf("run %s was killed mid-job but its transcript shows no resume", id)
		}
	}
	keys, _ := rc.Keys(ctx, "echodo:orchestrator:jobs:processing:*").Result()
	for _, k := range keys {
		if n, _ := rc.LLen(ctx, k).Result(); n != 0 {
			t.Errorf("%s still holds %d jobs", k, n)
		}
	}
	if n, _ := rc.LLen(ctx, "echodo:orchestrator:jobs").Result(); n != 0 {
		t.Errorf("queue still holds %d jobs", n)
	}
	dl, _ := rc.LRange(ctx, "echodo:orchestrator:jobs:dead", 0, -1).Result()
	if len(dl) != 1 || !strings.Contains(dl[0], "harness") {
		t.Errorf("dead letters = %q, want the poison job with its error", dl)
	}
	t.Logf("30 jobs on 3 workers, %d killed mid-job and resumed; queue and processing lists empty", len(killedRuns))
}

func redisClient(t *testing.T, url string) *redis.Client {
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// hasCheckpoint reports whether the run's transcript shows a step was done.
func hasCheckpoint(home, runID string) bool {
	b, err := os.ReadFile(filepath.Join(home, "data", "runs", runID, runrec.TranscriptFile))
	return err == nil && bytes.Count(b, []byte(`"tool_result"`)) >= 2
}

// finishedRuns maps run ids to final statuses from the run folders.
func finishedRuns(t *testing.T, home string) map[string]string {
	out := map[string]string{}
	dirs, _ := filepath.Glob(filepath.Join(home, "data", "runs", "*"))
	for _, d := range dirs {
		res, err := runrec.Dir(d).ReadResult()
		if err != nil || !runrec.Final(res.Status) {
			continue
		}
		out[res.RunID] = res.Status
	}
	return out
}

// TestWorkerBannerLanes: the banner names the lanes, the finishing slots
// (by default as many as the lanes, or --finishing) and the jobs taken
// ahead (--prefetch, default 1, none with --once), and says when
// the pool keeps fewer worktrees than the jobs that may run at once.
func TestWorkerBannerLanes(t *testing.T) {
	t.Setenv("CONDUCTOR_HOME", t.TempDir())
	t.Setenv("REDIS_URL", "")
	for _, tc := range []struct {
		args       []string
		pool       string
		want, warn string
	}{
		{[]string{"--concurrency", "3"}, "", "concurrency: 3, finishing 3, prefetch 1", "fewer than the 6 jobs"},
		{[]string{"--concurrency", "3", "--finishing", "0"}, "", "concurrency: 3, finishing 0, prefetch 1", ""},
		{[]string{"--concurrency", "2", "--finishing", "1", "--prefetch", "0"}, "", "concurrency: 2, finishing 1, prefetch 0", ""},
		{[]string{"--concurrency", "4", "--prefetch", "3"}, "8", "concurrency: 4, finishing 4, prefetch 3", ""},
		{[]string{"--concurrency", "1", "--once"}, "", "concurrency: 1, finishing 1, prefetch 0 (once)", ""},
	} {
		t.Setenv("WORKER_POOL_SIZE", tc.pool)
		var out, errb bytes.Buffer
		args := append([]string{"conductor", "worker", "--dry-run"}, tc.args...)
		if code := run(args, strings.NewReader(""), &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errb.String())
		}
		banner := errb.String()
		if !strings.Contains(banner, tc.want) {
			t.Errorf("%v: banner lacks %q:\n%s", tc.args, tc.want, banner)
		}
		if warned := strings.Contains(banner, "pool:"); warned != (tc.warn != "") || !strings.Contains(banner, tc.warn) {
			t.Errorf("%v (pool %q): want the pool warning %q:\n%s", tc.args, tc.pool, tc.warn, banner)
		}
	}
}
