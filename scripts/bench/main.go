// Command bench is the `make bench` driver: it generates one repository of
// at least 10,000 files in 2,000+ folders, measures every row of the bench
// table against the git CLI floor in the same run, and prints ONE table of
// ratios (median and min–max over several runs) with the machine above it.
//
//	go run ./scripts/bench -bin bin/conductor            # full size (minutes)
//	CONDUCTOR_BENCH_SHORT=1 go run ./scripts/bench ...   # small sizes, proves it still runs
//
// Numbers are printed, never asserted. The rows reuse the package APIs
// (runtask.Pool, runtask.Run, land.Run) in process and time the conductor
// binary as a subprocess where a subprocess is the honest comparison with
// the git CLI (extract, patch-id, peak memory, the queue worker).
// docs/bench.md explains every row.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
)

// sizes are the knobs that differ between the full and the short mode.
type sizes struct {
	folders, perFolder int   // the generated repository
	runs               int   // repetitions per row that checks out the whole tree
	fastRuns           int   // repetitions of the rows that take milliseconds
	patchIDBytes       int64 // the patch-id row's diff
	memoryBytes        int64 // the peak-memory row's diff
	queueJobs          int   // jobs per throughput burst
	queueBursts        int
	latencyJobs        int // jobs pushed one by one into idle workers
	queueSteps         int // tool steps per queue job (each model call waits 50 ms)
}

var (
	full  = sizes{folders: 2000, perFolder: 5, runs: 5, fastRuns: 11, patchIDBytes: 48 << 20, memoryBytes: 100 << 20, queueJobs: 64, queueBursts: 3, latencyJobs: 40, queueSteps: 9}
	short = sizes{folders: 100, perFolder: 5, runs: 2, fastRuns: 2, patchIDBytes: 2 << 20, memoryBytes: 4 << 20, queueJobs: 16, queueBursts: 1, latencyJobs: 8, queueSteps: 4}
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("bin", "", "the conductor binary to time (default: build one into the scratch folder)")
	shortMode := fs.Bool("short", os.Getenv("CONDUCTOR_BENCH_SHORT") != "", "small sizes, 1–2 runs per row (also CONDUCTOR_BENCH_SHORT=1)")
	only := fs.String("only", os.Getenv("CONDUCTOR_BENCH_ONLY"), "comma-separated rows to run: prep,extract,patchid,land,overhead,pi,memory,sandbox,gate,queue (default all)")
	keep := fs.Bool("keep", false, "keep the scratch folder")
	runs := fs.Int("runs", 0, "runs per row (default 5, short 2)")
	cpuProfile := fs.String("cpuprofile", "", "write the bench process's own CPU profile (the scripted model, the poller) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	sz := full
	if *shortMode {
		sz = short
	}
	if *runs > 0 {
		sz.runs, sz.fastRuns = *runs, *runs
	}
	want := func(row string) bool {
		if *only == "" {
			return true
		}
		for _, r := range strings.Split(*only, ",") {
			if strings.TrimSpace(r) == row {
				return true
			}
		}
		return false
	}

	tmp, err := os.MkdirTemp("", "conductor-bench-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Fprintln(stderr, "bench: scratch folder", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	b := &bench{tmp: tmp, sz: sz, log: stderr, ctx: context.Background()}
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		b.realModCache = strings.TrimSpace(string(out))
	}
	if err := b.isolate(); err != nil {
		return err
	}
	if *bin == "" {
		*bin = filepath.Join(tmp, "conductor")
		b.logf("building %s", *bin)
		cmd := exec.Command("go", "build", "-o", *bin, "./cmd/conductor")
		cmd.Stdout, cmd.Stderr = stderr, stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/conductor (run from the module root): %w", err)
		}
	}
	if b.bin, err = filepath.Abs(*bin); err != nil {
		return err
	}
	if _, err := os.Stat(b.bin); err != nil {
		return fmt.Errorf("conductor binary: %w", err)
	}

	mode := "full"
	if *shortMode {
		mode = "short (CONDUCTOR_BENCH_SHORT=1: small sizes, only proves the bench runs)"
	}
	fmt.Fprintf(stdout, "conductor bench, %s\n\n%s\n", mode, machine())

	start := time.Now()
	if err := b.generate(); err != nil {
		return fmt.Errorf("generate the repository: %w", err)
	}
	b.logf("repository: %d files in %d folders (%s)", b.files, b.folders, time.Since(start).Round(time.Millisecond))

	steps := []struct {
		name string
		fn   func() error
	}{
		{"prep", b.rowPrep},
		{"extract", b.rowExtract},
		{"patchid", b.rowPatchID},
		{"land", b.rowLand},
		{"overhead", b.rowOverhead},
		{"pi", b.rowPi},
		{"memory", b.rowMemory},
		{"sandbox", b.rowSandbox},
		{"gate", b.rowGate},
		{"queue", b.rowQueue},
	}
	var failed []string
	for _, s := range steps {
		if !want(s.name) {
			continue
		}
		t0 := time.Now()
		b.logf("row %s ...", s.name)
		if err := s.fn(); err != nil {
			// One broken row must not hide the others: report it in the
			// table and exit non-zero at the end.
			failed = append(failed, s.name)
			b.rows = append(b.rows, row{name: s.name, failed: err.Error()})
			b.logf("row %s FAILED: %v", s.name, err)
			continue
		}
		b.logf("row %s done in %s", s.name, time.Since(t0).Round(time.Millisecond))
	}
	fmt.Fprintf(stdout, "Generated repository: %d files in %d folders; %d runs per row (rows that check out the whole tree: %d).\n\n", b.files, b.folders, sz.fastRuns, sz.runs)
	printTable(stdout, b.rows)
	fmt.Fprintf(stdout, "\nratio = conductor / git floor per run (median, min–max); for the queue row, measured / ideal throughput.\n")
	fmt.Fprintf(stdout, "Numbers are measured, not asserted. Total bench time %s.\n", time.Since(start).Round(time.Second))
	if len(failed) > 0 {
		return fmt.Errorf("rows failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// machine describes where the numbers were measured.
func machine() string {
	cpu := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "MemTotal:")), "%d", &kb)
			}
		}
		if kb > 0 {
			mem = fmt.Sprintf(", %.1f GB RAM", float64(kb)/(1<<20))
		}
	}
	gitv := "git: not found"
	if out, err := exec.Command("git", "--version").Output(); err == nil {
		gitv = strings.TrimSpace(string(out))
	}
	kernel := ""
	if out, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(out))
	}
	return fmt.Sprintf("machine: %s, %d cores%s%s, %s/%s\n%s, %s\n", cpu, runtime.NumCPU(), mem, kernel, runtime.GOOS, runtime.GOARCH, gitv, runtime.Version())
}
