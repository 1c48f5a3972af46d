package runtask

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor"
)

// benchRepo generates a repository of files spread over folders with git
// fast-import (10,000 files in 2,000 folders; 1,000 in 200 with
// CONDUCTOR_BENCH_SHORT=1) and returns its path.
func benchRepo(b *testing.B) (string, int, int) {
	b.Helper()
	files, dirs := 10000, 2000
	if os.Getenv("CONDUCTOR_BENCH_SHORT") != "" {
		files, dirs = 1000, 200
	}
	dir := filepath.Join(b.TempDir(), "big")
	if out, err := gitErr(b.TempDir(), "init", "-q", dir); err != nil {
		b.Fatalf("git init: %v\n%s", err, out)
	}
	var fi bytes.Buffer
	fi.WriteString("commit refs/heads/main\ncommitter Bench <bench@example.test> 1767225600 +0000\ndata 5\nbench\n")
	for i := 0; i < files; i++ {
		body := fmt.Sprintf("package p%d\n\n// File %d of the generated repository.\nfunc F%d() int { return %d }\n", i%dirs, i, i, i)
		fmt.Fprintf(&fi, "M 644 inline d%04d/sub/f%05d.go\ndata %d\n%s\n", i%dirs, i, len(body), body)
	}
	cmd := exec.Command("git", "fast-import", "--quiet")
	cmd.Dir = dir
	cmd.Env = gitEnv(b.TempDir())
	cmd.Stdin = &fi
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("fast-import: %v\n%s", err, out)
	}
	git(b, dir, "checkout", "-q", "-f", "main")
	return dir, files, dirs
}

// benchModel plays 20 tool steps (list, read, edit, write ×5) with no latency.
func benchModel(dirs int) *scriptModel {
	m := &scriptModel{}
	for i := 0; i < 5; i++ {
		d := fmt.Sprintf("d%04d/sub", (i*37)%dirs)
		f := fmt.Sprintf("%s/f%05d.go", d, (i*37)%dirs)
		m.turns = append(m.turns,
			call(ToolListDir, map[string]any{"path": d}),
			call(ToolReadFile, map[string]any{"path": f}),
			call(ToolEditFile, map[string]any{"path": f, "old_string": "return", "new_string": "return 1 +"}),
			call(ToolWriteFile, map[string]any{"path": fmt.Sprintf("new/n%d.go", i), "content": fmt.Sprintf("package n\n\nconst N%d = %d\n", i, i)}),
		)
	}
	m.turns = append(m.turns, finalTurn("done"))
	return m
}

// gitFloor is the bare pipeline: worktree add, the same edits, diff, patch-id.
func gitFloor(b *testing.B, repo string, dirs, n int) {
	wt := filepath.Join(filepath.Dir(repo), fmt.Sprintf("floor-%d", n))
	git(b, repo, "worktree", "add", "-q", "--detach", wt, "HEAD")
	for i := 0; i < 5; i++ {
		f := filepath.Join(wt, fmt.Sprintf("d%04d/sub/f%05d.go", (i*37)%dirs, (i*37)%dirs))
		body, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(f, bytes.Replace(body, []byte("return"), []byte("return 1 +"), 1), 0o644); err != nil {
			b.Fatal(err)
		}
		write(b, filepath.Join(wt, fmt.Sprintf("new/n%d.go", i)), fmt.Sprintf("package n\n\nconst N%d = %d\n", i, i))
	}
	git(b, wt, "add", "-A", "-N", ".")
	cmd := exec.Command("sh", "-c", "git diff --binary HEAD | git patch-id --stable")
	cmd.Dir = wt
	cmd.Env = gitEnv(b.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil || len(out) < 40 {
		b.Fatalf("diff | patch-id: %v\n%s", err, out)
	}
	git(b, repo, "worktree", "remove", "--force", wt)
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// BenchmarkTaskOverhead measures the conductor's whole per-task cost (task,
// worktree, 20 tool steps against a zero-latency model, session state and
// transcript fsyncs, extraction, patch-id, record, teardown) against the
// bare git pipeline on the same repository: `git worktree add` + the same
// edits + `git diff` + `git patch-id`. Pool cold (every task checks out a
// new worktree) and warm (a pooled worktree is reset) are both reported.
//
//	go test -run '^$' -bench TaskOverhead -benchtime 5x ./runtask
//	CONDUCTOR_BENCH_SHORT=1 go test -run '^$' -bench TaskOverhead -benchtime 1x ./runtask
func BenchmarkTaskOverhead(b *testing.B) {
	repo, files, dirs := benchRepo(b)
	data := filepath.Join(b.TempDir(), "data")
	// Separate pools: cold never keeps a worktree, warm keeps one.
	bases := map[string]string{"0": filepath.Join(data, "cold"), "1": filepath.Join(data, "warm")}
	run := func(n int, pool string) time.Duration {
		size := map[string]int{"0": 0, "1": 1}[pool]
		task := testTask(fmt.Sprintf("bench-%s-%d", pool, n))
		task.MaxSteps = 30
		start := time.Now()
		res, err := Run(context.Background(), Options{
			Task: task, Config: conductor.Config{DataRoot: data, PoolSize: &size}, Repo: repo, WorktreeBase: bases[pool], Model: benchModel(dirs), ModelName: "bench",
			ModelAlias: "bench", Role: &testRole{}, Sandbox: &execSandbox{}, Getenv: testEnv(nil),
		})
		d := time.Since(start)
		if err != nil || res.Status != "succeeded" || len(res.FilesChanged) != 10 || res.Steps != 21 {
			b.Fatalf("run: %v %+v", err, res)
		}
		return d
	}
	var floor, cold, warm []time.Duration
	run(-1, "1") // fill the pool
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		gitFloor(b, repo, dirs, i)
		floor = append(floor, time.Since(t0))
		cold = append(cold, run(i, "0"))
		warm = append(warm, run(i, "1"))
	}
	b.StopTimer()
	f, c, w := median(floor), median(cold), median(warm)
	b.ReportMetric(float64(f.Microseconds())/1000, "floor-ms")
	b.ReportMetric(float64(c.Microseconds())/1000, "cold-ms")
	b.ReportMetric(float64(w.Microseconds())/1000, "warm-ms")
	b.ReportMetric(float64(c)/float64(f), "cold-x")
	b.ReportMetric(float64(w)/float64(f), "warm-x")
	b.Logf("%d files in %d folders: git floor %v, conductor cold %v (%.2fx), warm %v (%.2fx)", files, dirs, f, c,
		float64(c)/float64(f), w, float64(w)/float64(f))
}
