package main

import (
	"context"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// The driver's own measuring code: a bench that mismeasures is worse than
// none. (The bench itself runs in `make bench-short`.)

func TestStats(t *testing.T) {
	for _, tc := range []struct {
		in          []float64
		med, lo, hi float64
	}{
		{[]float64{3}, 3, 3, 3},
		{[]float64{5, 1, 3}, 3, 1, 5},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
		{nil, 0, 0, 0},
	} {
		med, lo, hi := stats(tc.in)
		if med != tc.med || lo != tc.lo || hi != tc.hi {
			t.Errorf("stats(%v) = %v, %v, %v; want %v, %v, %v", tc.in, med, lo, hi, tc.med, tc.lo, tc.hi)
		}
	}
}

func TestRatioCells(t *testing.T) {
	r := row{oursLabel: "a", floorLabel: "b", ours: []time.Duration{10 * time.Millisecond, 30 * time.Millisecond, 20 * time.Millisecond},
		floor: []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}}
	o, f, ratio := r.cells()
	if o != "a 20.0 ms (10.0 ms–30.0 ms)" || f != "b 20.0 ms (20.0 ms–20.0 ms)" || ratio != "**1.00×** (0.50×–1.50×)" {
		t.Fatalf("cells = %q, %q, %q", o, f, ratio)
	}
}

// TestRunSampledSeesChildren: the sampled peak covers the process and the
// processes it starts, and is not the driver's own size.
func TestRunSampledSeesChildren(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 allocates the memory this test looks for")
	}
	b := &bench{ctx: context.Background(), env: os.Environ()}
	// sh starts python, which holds 150 MB for a while.
	p, err := b.runSampled("", "", nil, "sh", "-c", "python3 -c 'import time; x = bytearray(150_000_000); time.sleep(0.3)'; true")
	if err != nil {
		t.Fatal(err)
	}
	if p.tree < 150e6 {
		t.Errorf("tree peak %d bytes, want ≥ 150 MB (the child's)", p.tree)
	}
	if p.ownHWM <= 0 || p.ownHWM > 50e6 {
		t.Errorf("sh's own peak %d bytes, want small and non-zero", p.ownHWM)
	}
	if p.dur < 300*time.Millisecond {
		t.Errorf("duration %v, want ≥ 300ms", p.dur)
	}
	// A failing command is an error naming it, with its stderr.
	_, err = b.runProc("", "", nil, "sh", "-c", "echo broken >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("failing command: %v", err)
	}
}

// TestGenerate: the generated repository has the files and folders the
// table claims, and the branches the rows use.
func TestGenerate(t *testing.T) {
	b := &bench{ctx: context.Background(), tmp: t.TempDir(), sz: short, log: os.Stderr}
	t.Setenv("HOME", t.TempDir()) // isolate sets the rest
	if err := b.isolate(); err != nil {
		t.Fatal(err)
	}
	if err := b.generate(); err != nil {
		t.Fatal(err)
	}
	files, err := b.git(b.repo, "--git-dir="+b.gitDir, "ls-tree", "-r", "--name-only", b.base)
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Split(files, "\n")
	dirs := map[string]bool{}
	for _, n := range names {
		for d := n; strings.Contains(d, "/"); {
			d = d[:strings.LastIndex(d, "/")]
			dirs[d] = true
		}
	}
	if len(names) != short.folders*short.perFolder || len(dirs) < short.folders {
		t.Fatalf("%d files in %d folders, want %d in ≥ %d", len(names), len(dirs), short.folders*short.perFolder, short.folders)
	}
	for _, rev := range []string{"near", "big", "work/bench", "main"} {
		if _, err := b.git(b.repo, "--git-dir="+b.gitDir, "rev-parse", "--verify", rev); err != nil {
			t.Errorf("branch %s: %v", rev, err)
		}
	}
	diff, err := b.git(b.repo, "--git-dir="+b.gitDir, "diff", "--stat", b.base, "big")
	if err != nil || !strings.Contains(diff, "500 files changed") {
		t.Fatalf("big edits every file: %q %v", tail(diff, 80), err)
	}
}

// The queue row's model time counts answered chat completions only, from
// arrival to the end of the answer.
func TestModelOwnTime(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	got := modelOwnTime([]fakellm.RecordedRequest{
		{Path: "/v1/chat/completions", Status: 200, Start: ms(0), End: ms(50)},
		{Path: "/v1/chat/completions/", Status: 200, Start: ms(10), End: ms(62)},
		{Path: "/v1/chat/completions", Status: 200, Start: ms(20), End: ms(74)},
		{Path: "/v1/chat/completions", Status: 429, Start: ms(0), End: ms(1)}, // not answered
		{Path: "/v1/models", Status: 200, Start: ms(0), End: ms(500)},         // not a call
		{Path: "/v1/chat/completions", Status: 200, Start: ms(0)},             // still answering
	})
	if got.n != 3 || math.Abs(got.mean-0.052) > 1e-9 || got.p50 != 0.052 || got.p99 != 0.054 {
		t.Fatalf("modelOwnTime = %+v; want 3 calls, mean and p50 52 ms, p99 54 ms", got)
	}
	if (modelOwnTime(nil) != ownTime{}) {
		t.Fatal("no calls: want the zero ownTime")
	}
}

func TestPercentile(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct{ p, want float64 }{{0.5, 5}, {0.9, 9}, {0.99, 10}, {1, 10}, {0.01, 1}} {
		if got := percentile(s, c.p); got != c.want {
			t.Errorf("percentile(1..10, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile([]float64{7}, 0.5); got != 7 {
		t.Errorf("percentile([7], 0.5) = %v", got)
	}
}
