//go:build linux

package runrec

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestReplaceFile: every version is read back whole, and after the first
// two writes no inode is created or freed: the file and its sibling trade
// places.
func TestReplaceFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	inodes := map[uint64]bool{}
	for i := 0; i < 20; i++ {
		want := fmt.Sprintf(`{"step": %d, "pad": %q}`, i, make([]byte, (i*37)%300))
		if err := ReplaceFile(path, []byte(want), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Fatalf("write %d: read back %q, %v", i, got, err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v", fi.Mode())
		}
		inodes[fi.Sys().(*syscall.Stat_t).Ino] = true
	}
	if len(inodes) > 2 {
		t.Fatalf("%d inodes used for 20 versions, want 2", len(inodes))
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 2 {
		t.Fatalf("folder holds %d entries, want the file and its sibling", len(entries))
	}
}
