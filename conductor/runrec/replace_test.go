//go:build linux

package runrec

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// TestVersionedSurvivesEveryCrashState: what a power cut can leave of
// WriteVersioned's two names — the exchange on disk or not, the newer or
// the older file torn mid-overwrite, the sibling never made — always reads
// back as the newest whole version, never an older one when the newer is
// whole, and never a torn one.
func TestVersionedSurvivesEveryCrashState(t *testing.T) {
	v := func(seq int64) []byte { return encodeVersioned(seq, fmt.Appendf(nil, `{"step":%d}`, seq)) }
	torn := func(seq int64) []byte { b := v(seq); return b[:len(b)/2] }
	// A torn overwrite that kept the old tail: whole JSON, wrong checksum.
	spliced := func(seq int64) []byte {
		b := v(seq)
		return append(b[:0:0], bytes.Replace(b, fmt.Appendf(nil, `"step":%d`, seq), []byte(`"step":0`), 1)...)
	}
	for _, tc := range []struct {
		name       string
		path, next []byte // nil: absent
		want       int64  // -1: an error; -2: not found
	}{
		{"exchange on disk", v(7), v(6), 7},
		{"exchange not on disk", v(6), v(7), 7},
		{"newer torn, names exchanged", torn(8), v(7), 7},
		{"newer torn, names not exchanged", v(7), torn(8), 7},
		{"newer spliced", v(7), spliced(8), 7},
		{"only the first write", v(1), nil, 1},
		{"the first write torn before its rename", nil, nil, -2},
		{"legacy state, legacy sibling", []byte(`{"version":1,"step":3}`), []byte(`{"version":1,"step":2}`), 0},
		{"legacy state, the first versioned write in the sibling", []byte(`{"version":1,"step":3}`), v(1), 1},
		{"both torn", torn(3), torn(4), -1},
		{"sibling alone", nil, v(4), 4},
		{"not an object", []byte("null"), nil, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			if tc.path != nil {
				os.WriteFile(path, tc.path, 0o600)
			}
			if tc.next != nil {
				os.WriteFile(NextPath(path), tc.next, 0o600)
			}
			data, seq, err := ReadVersioned(path)
			switch {
			case tc.want == -2:
				if !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("got %s (%d), %v; want not found", data, seq, err)
				}
			case tc.want == -1:
				if err == nil || !strings.Contains(err.Error(), "state.json") {
					t.Fatalf("got %s (%d), %v; want an error naming the file", data, seq, err)
				}
			case err != nil || seq != tc.want:
				t.Fatalf("got %s (%d), %v; want version %d", data, seq, err, tc.want)
			case seq > 0 && string(data) != fmt.Sprintf(`{"step":%d}`, seq):
				t.Fatalf("version %d reads %s", seq, data)
			case seq == 0 && string(data) != string(tc.path):
				t.Fatalf("legacy content reads %s", data)
			}
		})
	}
}

// TestWriteVersioned: every write reads back as the newest, and two
// inodes serve every version.
func TestWriteVersioned(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	inodes := map[uint64]bool{}
	for i := int64(1); i <= 12; i++ {
		want := fmt.Sprintf(`{"step":%d,"pad":"%s"}`, i, strings.Repeat("x", int(i*37)%300))
		if err := WriteVersioned(path, i, []byte(want), 0o600); err != nil {
			t.Fatal(err)
		}
		got, seq, err := ReadVersioned(path)
		if err != nil || seq != i || string(got) != want {
			t.Fatalf("write %d: read back %q (%d), %v", i, got, seq, err)
		}
		for _, p := range []string{path, NextPath(path)} {
			if fi, err := os.Stat(p); err == nil {
				inodes[fi.Sys().(*syscall.Stat_t).Ino] = true
				if fi.Mode().Perm() != 0o600 {
					t.Fatalf("%s: mode %v", p, fi.Mode())
				}
			}
		}
	}
	if len(inodes) > 2 {
		t.Fatalf("%d inodes for 12 versions, want 2", len(inodes))
	}
}

// TestReplaceFollowsNoLink: a sibling that is a link (planted, or left by
// anything) is never written through: the file it points at stays as it
// was, and the write still lands.
func TestReplaceFollowsNoLink(t *testing.T) {
	for name, write := range map[string]func(path string, i int64) error{
		"ReplaceFile": func(path string, i int64) error { return ReplaceFile(path, fmt.Appendf(nil, `{"i":%d}`, i), 0o600) },
		"WriteVersioned": func(path string, i int64) error {
			return WriteVersioned(path, i, fmt.Appendf(nil, `{"i":%d}`, i), 0o600)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state.json")
			victim := filepath.Join(t.TempDir(), "victim")
			os.WriteFile(victim, []byte("untouched"), 0o600)
			if err := write(path, 1); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, NextPath(path)); err != nil {
				t.Fatal(err)
			}
			if err := write(path, 2); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(victim); string(b) != "untouched" {
				t.Fatalf("written through the link: the victim holds %q", b)
			}
			got, err := os.ReadFile(path)
			if err != nil || !strings.Contains(string(got), `{"i":2}`) {
				t.Fatalf("the write did not land: %q, %v", got, err)
			}
		})
	}
}
