package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDataRootReport: doctor says when the data root's file system loses
// records at a reboot (tmpfs) or slows a busy worker (ext4 without a
// journal), reading ext4's journal state from sysfs by the data root's
// device.
func TestDataRootReport(t *testing.T) {
	sys := t.TempDir()
	dev := unix.Mkdev(254, 1)
	mk := func(name, journal string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(sys, "dev", "block"), 0o755); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(sys, "dev", "block", "254:1")
		os.Remove(link)
		if err := os.Symlink("../../devices/virtual/block/"+name, link); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(sys, "fs", "ext4", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "journal_task"), []byte(journal+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, journal string
		fsType        int64
		state, fs     string
		detail        string
	}{
		{"vdz", "<none>", magicExt4, "slow", "ext4", "without a journal"},
		{"vdy1", "jbd2/vdy1-8", magicExt4, "ok", "ext4", "survive a power cut"},
		{"", "", magicXFS, "ok", "xfs", "survive a power cut"},
		{"", "", magicTmpfs, "volatile", "tmpfs", "lost at a reboot"},
		{"", "", 0x12345678, "ok", "0x12345678", "survive a power cut"},
	} {
		if tc.name != "" {
			mk(tc.name, tc.journal)
		}
		r := dataRootFor("/data", tc.fsType, uint64(dev), sys)
		if r.State != tc.state || r.FS != tc.fs || !strings.Contains(r.Detail, tc.detail) || (tc.name != "" && r.Device != tc.name) {
			t.Errorf("%s %q: %+v, want state %s, fs %s, device %q, detail with %q", tc.fs, tc.journal, r, tc.state, tc.fs, tc.name, tc.detail)
		}
	}
	// ext4 whose device sysfs does not list: unknown, with the reason.
	if r := dataRootFor("/data", magicExt4, uint64(unix.Mkdev(7, 7)), sys); r.State != "unknown" || !strings.Contains(r.Detail, "7:7") {
		t.Errorf("unlisted device: %+v", r)
	}

	// The real probe: a data root not made yet is judged by its nearest
	// existing folder; a tmpfs one is volatile.
	r := probeDataRoot(filepath.Join(t.TempDir(), "not", "yet"), "/sys")
	if r.State == "" || r.FS == "" || r.Path == "" {
		t.Errorf("probe of a data root not made yet: %+v", r)
	}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		var st unix.Statfs_t
		if unix.Statfs("/dev/shm", &st) == nil && int64(st.Type) == magicTmpfs {
			if r := probeDataRoot("/dev/shm/conductor-data", "/sys"); r.State != "volatile" {
				t.Errorf("a data root on tmpfs: %+v, want volatile", r)
			}
		}
	}
}
