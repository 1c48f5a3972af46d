package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// bench holds the scratch folder, the generated repository and the rows.
type bench struct {
	ctx  context.Context
	tmp  string
	bin  string // the conductor binary
	sz   sizes
	log  io.Writer
	env  []string // isolated environment for every subprocess
	rows []row

	// The generated repository (operator repository with a git dir; its
	// main branch is never checked out).
	repo, gitDir   string
	files, folders int
	base           string // C0: the generated tree
	near           string // C0 + a few edited files: a nearby commit for pool resets

	realModCache string // the host's module cache, before isolate (the gate row's dependencies)
}

// row is one line of the table. Either ours/floor pairs (ratio = ours/floor
// per run) or a custom cell text.
type row struct {
	name, goal            string
	oursLabel, floorLabel string
	ours, floor           []time.Duration
	// custom cells, used instead of the timings when set
	oursCell, floorCell, ratioCell string
	note                           string
	failed                         string
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "bench: "+format+"\n", args...)
}

// isolate gives the driver and every git it starts an isolated HOME, no
// system or global git config, and fixed identities and dates.
func (b *bench) isolate() error {
	home := filepath.Join(b.tmp, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	vars := map[string]string{
		"HOME": home, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
		"GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.test",
		"GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@example.test",
		"GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
		"LANG": "C", "LC_ALL": "C", "CONDUCTOR_HOME": filepath.Join(b.tmp, "data"),
	}
	for k, v := range vars {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	for _, k := range []string{"REDIS_URL", "DATABASE_URL", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "CONDUCTOR_CONFIG"} {
		os.Unsetenv(k)
	}
	b.env = os.Environ()
	return nil
}

// git runs git in dir and returns its trimmed stdout; an error holds stderr.
func (b *bench) git(dir string, args ...string) (string, error) {
	return b.gitIn(dir, nil, args...)
}

func (b *bench) gitIn(dir string, stdin io.Reader, args ...string) (string, error) {
	cmd := exec.CommandContext(b.ctx, "git", args...)
	cmd.Dir, cmd.Env, cmd.Stdin = dir, b.env, stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s (in %s): %v: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// timed runs fn and returns how long it took.
func timed(fn func() error) (time.Duration, error) {
	t0 := time.Now()
	err := fn()
	return time.Since(t0), err
}

// proc is one measured subprocess run.
type proc struct {
	dur    time.Duration
	ownHWM int64 // bytes: peak RSS of the process itself (sampled runs only)
	tree   int64 // bytes: peak RSS of the largest process of its tree, children included (sampled runs only)
}

// runProc runs a command with stdin from a file ("" for none) and stdout to
// out (nil discards), and measures its wall time. Nothing else runs
// meanwhile, so timings are not disturbed.
func (b *bench) runProc(dir string, stdinFile string, out io.Writer, name string, args ...string) (proc, error) {
	return b.runProcOpt(false, dir, stdinFile, out, name, args...)
}

// runSampled is runProc that also samples the peak memory of the process
// and of every process it starts, from /proc every few milliseconds.
// (rusage's ru_maxrss is useless here: a child exec'ed after a vfork from
// this large driver inherits the driver's high-water mark.)
func (b *bench) runSampled(dir string, stdinFile string, out io.Writer, name string, args ...string) (proc, error) {
	return b.runProcOpt(true, dir, stdinFile, out, name, args...)
}

func (b *bench) runProcOpt(sample bool, dir string, stdinFile string, out io.Writer, name string, args ...string) (proc, error) {
	cmd := exec.CommandContext(b.ctx, name, args...)
	cmd.Dir, cmd.Env = dir, b.env
	if stdinFile != "" {
		f, err := os.Open(stdinFile)
		if err != nil {
			return proc{}, err
		}
		defer f.Close()
		cmd.Stdin = f
	}
	if out == nil {
		out = io.Discard
	}
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &errb
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return proc{}, err
	}
	type peaks struct{ own, tree int64 }
	result := make(chan peaks, 1)
	done := make(chan struct{})
	if sample {
		go func() {
			// VmHWM only grows, so the last sample of a process is its
			// peak up to the sampling interval.
			seen := map[int]int64{}
			root := cmd.Process.Pid
			tick := time.NewTicker(3 * time.Millisecond)
			defer tick.Stop()
			for {
				for _, pid := range append(descendants(root), root) {
					if v := readHWM(fmt.Sprintf("/proc/%d/status", pid)); v > seen[pid] {
						seen[pid] = v
					}
				}
				select {
				case <-done:
					var p peaks
					for pid, v := range seen {
						if pid == root {
							p.own = v
						}
						p.tree = max(p.tree, v)
					}
					result <- p
					return
				case <-tick.C:
				}
			}
		}()
	}
	err := cmd.Wait()
	d := time.Since(t0)
	close(done)
	p := proc{dur: d}
	if sample {
		pk := <-result
		p.ownHWM, p.tree = pk.own, pk.tree
	}
	if err != nil {
		return p, fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, tail(errb.String(), 600))
	}
	return p, nil
}

// descendants lists the processes below root, from the parent ids in
// /proc/*/stat.
func descendants(root int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	kids := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			kids[ppid] = append(kids[ppid], pid)
		}
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range kids[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func readHWM(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:")), "%d", &kb)
			return kb * 1024
		}
	}
	return 0
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// stats returns the median, min and max.
func stats(xs []float64) (med, lo, hi float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}

// percentile is the nearest-rank p-th value (0 < p ≤ 1) of sorted, which
// must not be empty.
func percentile(sorted []float64, p float64) float64 {
	return sorted[max(0, min(len(sorted)-1, int(math.Ceil(p*float64(len(sorted))))-1))]
}

func secs(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

// fmtDur prints seconds with a unit that keeps three significant digits.
func fmtDur(s float64) string {
	switch {
	case s < 0.01:
		return fmt.Sprintf("%.2f ms", s*1000)
	case s < 1:
		return fmt.Sprintf("%.1f ms", s*1000)
	default:
		return fmt.Sprintf("%.2f s", s)
	}
}

func timeCell(label string, ds []time.Duration) string {
	med, lo, hi := stats(secs(ds))
	return fmt.Sprintf("%s %s (%s–%s)", label, fmtDur(med), fmtDur(lo), fmtDur(hi))
}

func (r row) cells() (ours, floor, ratio string) {
	if r.oursCell != "" {
		return r.oursCell, r.floorCell, r.ratioCell
	}
	ratios := make([]float64, len(r.ours))
	for i := range r.ours {
		ratios[i] = r.ours[i].Seconds() / r.floor[i].Seconds()
	}
	med, lo, hi := stats(ratios)
	return timeCell(r.oursLabel, r.ours), timeCell(r.floorLabel, r.floor), fmt.Sprintf("**%s** (%s–%s)", fmtRatio(med), fmtRatio(lo), fmtRatio(hi))
}

func fmtRatio(x float64) string {
	if x < 0.1 {
		return fmt.Sprintf("%.3f×", x)
	}
	return fmt.Sprintf("%.2f×", x)
}

func printTable(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| row | conductor median (min–max) | git floor median (min–max) | ratio | goal |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	var notes []string
	for _, r := range rows {
		if r.failed != "" {
			fmt.Fprintf(w, "| %s | FAILED: %s | | | |\n", r.name, strings.ReplaceAll(tail(r.failed, 300), "\n", " "))
			continue
		}
		o, f, ra := r.cells()
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.name, o, f, ra, r.goal)
		if r.note != "" {
			notes = append(notes, fmt.Sprintf("- %s: %s", r.name, r.note))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
}

// count is n with its noun, plural unless n is 1: "1 burst", "3 bursts".
func count(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
