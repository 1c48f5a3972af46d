package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dataRootReport says what the data root's file system means for the
// worker: its records must survive a power cut (never tmpfs), and on ext4
// without a journal every file created pays for the files deleted in the
// last minutes (docs/queue.md, "The data root's file system").
type dataRootReport struct {
	Path   string `json:"path"`
	FS     string `json:"fs"`               // ext4, xfs, tmpfs, … or the magic number
	Device string `json:"device,omitempty"` // the block device, for ext4
	State  string `json:"state"`            // ok, slow, volatile, unknown
	Detail string `json:"detail"`
}

// File system magic numbers (statfs f_type) the report names.
const (
	magicExt4  = 0xEF53
	magicXFS   = 0x58465342
	magicBtrfs = 0x9123683E
	magicTmpfs = 0x01021994
	magicRamfs = 0x858458F6
	magicOver  = 0x794C7630
	magicZFS   = 0x2FC12FC1
)

// probeDataRoot reports on the file system holding path (or its nearest
// existing parent: the data root is made on first use). sysRoot is /sys.
func probeDataRoot(path, sysRoot string) dataRootReport {
	p := path
	for {
		if _, err := os.Stat(p); err == nil || !errors.Is(err, fs.ErrNotExist) || filepath.Dir(p) == p {
			break
		}
		p = filepath.Dir(p)
	}
	var st unix.Statfs_t
	var fi unix.Stat_t
	if err := unix.Statfs(p, &st); err != nil {
		return dataRootReport{Path: path, FS: "?", State: "unknown", Detail: err.Error()}
	}
	if err := unix.Stat(p, &fi); err != nil {
		return dataRootReport{Path: path, FS: "?", State: "unknown", Detail: err.Error()}
	}
	return dataRootFor(path, int64(st.Type), uint64(fi.Dev), sysRoot)
}

// dataRootFor is probeDataRoot's verdict for a file system of type fsType
// on device dev, reading ext4's journal state under sysRoot.
func dataRootFor(path string, fsType int64, dev uint64, sysRoot string) dataRootReport {
	r := dataRootReport{Path: path, State: "ok", Detail: "records are fsynced and survive a power cut"}
	names := map[int64]string{magicExt4: "ext4", magicXFS: "xfs", magicBtrfs: "btrfs", magicTmpfs: "tmpfs",
		magicRamfs: "ramfs", magicOver: "overlay", magicZFS: "zfs"}
	r.FS = names[fsType]
	if r.FS == "" {
		r.FS = "0x" + strings.ToUpper(strconv.FormatInt(fsType, 16))
	}
	switch fsType {
	case magicTmpfs, magicRamfs:
		r.State, r.Detail = "volatile", "in memory: runs, sessions and the embedded store are lost at a reboot; set CONDUCTOR_HOME to a disk"
	case magicExt4:
		link, err := os.Readlink(filepath.Join(sysRoot, "dev", "block", majorMinor(dev)))
		if err != nil {
			r.State, r.Detail = "unknown", "ext4; its journal could not be read: "+err.Error()
			return r
		}
		r.Device = filepath.Base(link)
		b, err := os.ReadFile(filepath.Join(sysRoot, "fs", "ext4", r.Device, "journal_task"))
		switch {
		case err != nil:
			r.State, r.Detail = "unknown", "ext4; its journal could not be read: "+err.Error()
		case strings.TrimSpace(string(b)) == "<none>":
			r.State, r.Detail = "slow", "ext4 without a journal: each file created skips the inodes deleted in the last minutes, so a busy worker's jobs slow down after deletions (docs/queue.md)"
		}
	}
	return r
}

func majorMinor(dev uint64) string {
	return strconv.FormatUint(uint64(unix.Major(dev)), 10) + ":" + strconv.FormatUint(uint64(unix.Minor(dev)), 10)
}
