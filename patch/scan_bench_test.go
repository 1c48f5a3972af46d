package patch

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// BenchmarkScanWorktree scans GOROOT/src (about 10k files), a tree the
// size of a large repository's worktree.
func BenchmarkScanWorktree(b *testing.B) {
	dir := filepath.Join(runtime.GOROOT(), "src")
	if _, err := os.Stat(dir); err != nil {
		b.Skip(err)
	}
	for b.Loop() {
		if _, err := ScanWorktree(dir, ScanOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
