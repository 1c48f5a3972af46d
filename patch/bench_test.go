package patch

// The patch rows of `make bench`: conductor against the git CLI floor,
// measured in one run on data the bench generates itself.
//
//	CONDUCTOR_BENCH=1 go test ./patch -run TestBenchTable -count=1 -v -timeout 60m
//	CONDUCTOR_BENCH=1 CONDUCTOR_BENCH_SHORT=1 go test ./patch -run TestBenchTable -count=1 -v
//
// The short mode uses small sizes so CI can prove the bench still runs.
// Numbers are printed, never asserted. Go benchmarks (BenchmarkPatchID…)
// are there for `go test -bench` and profiling.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary act as a measured child process for the
// bench (peak memory is read from the child's rusage).
func TestMain(m *testing.M) {
	switch os.Getenv("CONDUCTOR_BENCH_CHILD") {
	case "":
		os.Exit(m.Run())
	case "patch-id":
		mode := map[string]Mode{"stable": Stable, "unstable": Unstable, "verbatim": Verbatim}[os.Getenv("CONDUCTOR_BENCH_MODE")]
		if err := WritePatchIDTo(os.Stdout, os.Stdin, mode); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "own-peak %d\n", ownPeak())
		os.Exit(0)
	case "extract":
		ex, err := Extract(context.Background(), ExtractOptions{
			Repo:     Git{GitDir: os.Getenv("CONDUCTOR_BENCH_GITDIR")},
			WorkTree: os.Getenv("CONDUCTOR_BENCH_WORKTREE"),
			Base:     os.Getenv("CONDUCTOR_BENCH_BASE"),
			Out:      os.Stdout,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, ex.PatchID)
		fmt.Fprintf(os.Stderr, "own-peak %d\n", ownPeak())
		os.Exit(0)
	}
	fmt.Fprintln(os.Stderr, "unknown CONDUCTOR_BENCH_CHILD")
	os.Exit(2)
}

// ownPeak is this process's peak RSS in bytes (VmHWM), without children.
func ownPeak() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:")), "%d", &kb)
			return kb * 1024
		}
	}
	return 0
}

type measure struct {
	dur    time.Duration
	maxRSS int64   // bytes: the largest process of the tree (rusage)
	own    int64   // bytes: the measured process alone, when it reports it
	cpu    float64 // seconds of user+system CPU of the process tree
}

// runMeasured runs cmd with stdin from file (may be empty) and stdout
// discarded, and returns wall time and peak memory. The peak of the process
// tree comes from /usr/bin/time when it is installed: the rusage Go sees
// itself would include the bench process's own size (the child's memory is
// the parent's until exec).
func runMeasured(t testing.TB, cmd *exec.Cmd, stdinFile string) measure {
	t.Helper()
	peakFile := ""
	if tp, err := exec.LookPath("/usr/bin/time"); err == nil {
		peakFile = filepath.Join(t.TempDir(), "peak")
		wrapped := exec.Command(tp, append([]string{"-f", "%M %U %S", "-o", peakFile, cmd.Path}, cmd.Args[1:]...)...)
		wrapped.Env, wrapped.Dir = cmd.Env, cmd.Dir
		cmd = wrapped
	}
	if stdinFile != "" {
		f, err := os.Open(stdinFile)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.Stdin = f
	}
	cmd.Stdout = io.Discard
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, stderr.String())
	}
	d := time.Since(start)
	var m measure
	m.dur = d
	if peakFile != "" {
		if b, err := os.ReadFile(peakFile); err == nil {
			var kb int64
			var user, sys float64
			fmt.Sscanf(strings.TrimSpace(string(b)), "%d %f %f", &kb, &user, &sys)
			m.maxRSS = kb * 1024
			m.cpu = user + sys
		}
	}
	if i := strings.Index(stderr.String(), "own-peak "); i >= 0 {
		fmt.Sscanf(stderr.String()[i+len("own-peak "):], "%d", &m.own)
	}
	return m
}

func selfCmd(t testing.TB, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// bigDiff writes a synthetic multi-file text diff of at least size bytes.
func bigDiff(t testing.TB, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g := newGen(1)
	bw := bufio.NewWriterSize(f, 1<<20)
	defer func() {
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
	}()
	w := &countingWriter{w: bw}
	for i := 0; w.n < size; i++ {
		fmt.Fprintf(w, "diff --git a/dir%d/file%d.go b/dir%d/file%d.go\nindex %040x..%040x 100644\n--- a/dir%d/file%d.go\n+++ b/dir%d/file%d.go\n",
			i%97, i, i%97, i, i, i+1, i%97, i, i%97, i)
		for h := 0; h < 4; h++ {
			old := g.textLines(8, false)
			nw := g.textLines(9, false)
			fmt.Fprintf(w, "@@ -%d,11 +%d,12 @@ func f%d() {\n", 10+h*40, 10+h*40, h)
			ctx := bytes.SplitAfter(g.textLines(3, false), []byte("\n"))
			for _, l := range ctx[:3] {
				w.Write([]byte(" "))
				w.Write(l)
			}
			for _, l := range bytes.SplitAfter(old, []byte("\n"))[:8] {
				w.Write([]byte("-"))
				w.Write(l)
			}
			for _, l := range bytes.SplitAfter(nw, []byte("\n"))[:9] {
				w.Write([]byte("+"))
				w.Write(l)
			}
		}
	}
	if w.err != nil {
		t.Fatal(w.err)
	}
}

// bigRepo makes a repository of files spread over folders with a linked
// worktree at its first commit, then changes the worktree: edits, new
// files, deletions, a mode change and a binary file.
func bigRepo(t testing.TB, folders, perFolder int) (repo, wt, base string) {
	t.Helper()
	repo = newRepo(t)
	g := newGen(2)
	var stream bytes.Buffer
	stream.WriteString("commit refs/heads/main\ncommitter Bench <b@example.test> 1767225600 +0000\ndata 5\nbase\n")
	for d := 0; d < folders; d++ {
		for f := 0; f < perFolder; f++ {
			data := g.textLines(20+g.rng.Intn(40), false)
			fmt.Fprintf(&stream, "M 100644 inline pkg%02d/sub%04d/file%d.txt\ndata %d\n", d%50, d, f, len(data))
			stream.Write(data)
			stream.WriteByte('\n')
		}
	}
	testGit(t, repo, stream.Bytes(), "fast-import", "--quiet")
	base = strings.TrimSpace(string(testGit(t, repo, nil, "rev-parse", "main")))
	wt = filepath.Join(t.TempDir(), "wt")
	testGit(t, repo, nil, "worktree", "add", "-q", "--detach", wt, base)
	for i := 0; i < 200; i++ {
		d := g.rng.Intn(folders)
		p := filepath.Join(wt, fmt.Sprintf("pkg%02d/sub%04d/file%d.txt", d%50, d, g.rng.Intn(perFolder)))
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if err := os.WriteFile(p, append(b, g.textLines(3, false)...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 50; i++ {
		p := filepath.Join(wt, fmt.Sprintf("new/n%d/file.txt", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, g.textLines(30, false), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		d := g.rng.Intn(folders)
		os.Remove(filepath.Join(wt, fmt.Sprintf("pkg%02d/sub%04d/file0.txt", d%50, d)))
	}
	os.Chmod(filepath.Join(wt, "pkg01/sub0001/file1.txt"), 0o755)
	if err := os.WriteFile(filepath.Join(wt, "blob.bin"), g.binary(200000), 0o644); err != nil {
		t.Fatal(err)
	}
	return repo, wt, base
}

type row struct {
	name, goal            string
	ours, floor           []measure
	size                  int64
	oursLabel, floorLabel string
}

func mb(n int64) string {
	if n == 0 {
		return "n/a (no /usr/bin/time)"
	}
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}

func median(ds []float64) (med, lo, hi float64) {
	s := append([]float64(nil), ds...)
	sort.Float64s(s)
	return s[len(s)/2], s[0], s[len(s)-1]
}

func (r row) print(w io.Writer) {
	var ratios, ot, ft, oc, fc []float64
	var orss, frss int64
	for i := range r.ours {
		ratios = append(ratios, r.ours[i].dur.Seconds()/r.floor[i].dur.Seconds())
		ot = append(ot, r.ours[i].dur.Seconds())
		ft = append(ft, r.floor[i].dur.Seconds())
		oc = append(oc, r.ours[i].cpu)
		fc = append(fc, r.floor[i].cpu)
		orss = max(orss, r.ours[i].maxRSS)
		frss = max(frss, r.floor[i].maxRSS)
	}
	med, lo, hi := median(ratios)
	om, _, _ := median(ot)
	fm, _, _ := median(ft)
	speed := func(sec float64) string {
		if r.size == 0 {
			return ""
		}
		return fmt.Sprintf(", %.0f MB/s", float64(r.size)/1e6/sec)
	}
	ocm, _, _ := median(oc)
	fcm, _, _ := median(fc)
	fmt.Fprintf(w, "| %s | %s %.3f s%s, cpu %.2f s, peak %s | %s %.3f s%s, cpu %.2f s, peak %s | %.2f× (%.2f–%.2f) | %s |\n",
		r.name, r.oursLabel, om, speed(om), ocm, mb(orss), r.floorLabel, fm, speed(fm), fcm, mb(frss), med, lo, hi, r.goal)
}

// TestBenchTable prints the patch rows of the bench table.
func TestBenchTable(t *testing.T) {
	if os.Getenv("CONDUCTOR_BENCH") == "" {
		t.Skip("set CONDUCTOR_BENCH=1 (and CONDUCTOR_BENCH_SHORT=1 for small sizes) to run the bench")
	}
	short := os.Getenv("CONDUCTOR_BENCH_SHORT") != ""
	runs, diffSize, bigSize, folders, perFolder := 5, int64(50<<20), int64(100<<20), 2000, 5
	if short {
		runs, diffSize, bigSize, folders, perFolder = 3, 2<<20, 4<<20, 100, 5
	}
	only := os.Getenv("CONDUCTOR_BENCH_ONLY") // "patch-id", "extract" or "memory"
	want := func(name string) bool { return only == "" || only == name }
	tmp := t.TempDir()
	var out strings.Builder
	fmt.Fprintf(&out, "\n| row | conductor | git floor | ratio median (min–max) | goal |\n|---|---|---|---|---|\n")

	if want("patch-id") {
		// Go patch-id against git patch-id --stable, both as processes.
		diff := filepath.Join(tmp, "big.diff")
		bigDiff(t, diff, diffSize)
		fi, _ := os.Stat(diff)
		r := row{name: fmt.Sprintf("patch-id --stable, %.0f MB diff", float64(fi.Size())/1e6), goal: "≤ 0.80×", size: fi.Size(), oursLabel: "Go", floorLabel: "git"}
		for i := 0; i < runs; i++ {
			r.floor = append(r.floor, runMeasured(t, exec.Command("git", "patch-id", "--stable"), diff))
			r.ours = append(r.ours, runMeasured(t, selfCmd(t, "CONDUCTOR_BENCH_CHILD=patch-id", "CONDUCTOR_BENCH_MODE=stable"), diff))
		}
		r.print(&out)
	}

	if want("extract") {
		// Extract against the bare pipeline on a big worktree.
		repo, wt, base := bigRepo(t, folders, perFolder)
		private := privateGitDir(t, repo)
		r := row{name: fmt.Sprintf("extract, %d files in %d folders", folders*perFolder, folders), goal: "≤ 1.10×", oursLabel: "extract", floorLabel: "add -A -N + diff --binary"}
		bare := func() measure {
			cmd := exec.Command("sh", "-c", "git add -A -N . && git diff --binary HEAD")
			cmd.Dir = wt
			cmd.Env = testEnv(tmp)
			return runMeasured(t, cmd, "")
		}
		ours := func() measure {
			return runMeasured(t, selfCmd(t, "CONDUCTOR_BENCH_CHILD=extract", "CONDUCTOR_BENCH_GITDIR="+private,
				"CONDUCTOR_BENCH_WORKTREE="+wt, "CONDUCTOR_BENCH_BASE="+base), "")
		}
		bare() // warm the index, the object store and the page cache for both
		ours()
		for i := 0; i < runs; i++ {
			r.floor = append(r.floor, bare())
			r.ours = append(r.ours, ours())
		}
		r.print(&out)
	}

	if want("memory") {
		// Peak memory of extract + patch-id on a big diff: new text files
		// adding up to bigSize.
		repo, wt, base := bigRepo(t, 2, 1)
		g := newGen(3)
		for i, total := 0, int64(0); total < bigSize; i++ {
			data := g.textLines(4000, false)
			p := filepath.Join(wt, "big", fmt.Sprintf("d%d", i%40), fmt.Sprintf("f%d.txt", i))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			total += int64(len(data))
		}
		private := privateGitDir(t, repo)
		cw := &countingWriter{w: io.Discard}
		if _, err := Extract(context.Background(), ExtractOptions{Repo: Git{GitDir: private}, WorkTree: wt, Base: base, Out: cw}); err != nil {
			t.Fatal(err)
		}
		m := runMeasured(t, selfCmd(t, "CONDUCTOR_BENCH_CHILD=extract", "CONDUCTOR_BENCH_GITDIR="+private,
			"CONDUCTOR_BENCH_WORKTREE="+wt, "CONDUCTOR_BENCH_BASE="+base), "")
		fmt.Fprintf(&out, "| peak memory, extract + patch-id, %.0f MB diff | conductor process %s (largest process incl. git %s), %.2f s | — | %.2f× the diff (%.2f× incl. git) | ≤ 2× |\n",
			float64(cw.n)/1e6, mb(m.own), mb(m.maxRSS), m.dur.Seconds(), float64(m.own)/float64(cw.n), float64(m.maxRSS)/float64(cw.n))
	}
	fmt.Fprintf(&out, "\n%d runs per row; ratio = conductor wall time / git wall time, per run; cpu = user+system seconds (median), useful when the machine is loaded. Peaks are max RSS from /usr/bin/time (largest process of the tree; conductor alone from VmHWM).\n", runs)
	fmt.Print(out.String())
}

// Go benchmarks for profiling.

func BenchmarkPatchIDStable(b *testing.B)   { benchmarkPatchID(b, Stable) }
func BenchmarkPatchIDVerbatim(b *testing.B) { benchmarkPatchID(b, Verbatim) }

func benchmarkPatchID(b *testing.B, mode Mode) {
	path := filepath.Join(b.TempDir(), "d.diff")
	bigDiff(b, path, 8<<20)
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := WritePatchIDTo(io.Discard, bytes.NewReader(data), mode); err != nil {
			b.Fatal(err)
		}
	}
}
