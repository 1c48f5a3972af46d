package patch

// Go micro-benchmarks of the patch-id scanner (for profiling). The table
// against git's own commands is `make bench` (scripts/bench).

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

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
