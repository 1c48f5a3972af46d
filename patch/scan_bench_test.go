package patch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkScanWorktree scans GOROOT/src (about 10k files), a tree the
// size of a large repository's worktree.
func BenchmarkScanWorktree(b *testing.B) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Skip(err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "src")
	if _, err := os.Stat(dir); err != nil {
		b.Skip(err)
	}
	for b.Loop() {
		if _, err := ScanWorktree(dir, ScanOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
