package runrec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ReplaceFile is WriteFileAtomic for a file rewritten again and again (a
// session's state after every model turn and tool result). Creating a file
// per write costs the filesystem an inode each time — on ext4 the allocator
// then scans the inodes it freed a moment ago, and that dominated a worker's
// CPU time. ReplaceFile keeps a sibling ".<name>.next", rewrites it in place
// (write over, cut to length, fsync) and atomically exchanges the two names
// (renameat2 RENAME_EXCHANGE): no inode is created or freed, and at every
// moment path holds one complete version, the old or the new. Where the
// exchange is not supported it falls back to WriteFileAtomic.
func ReplaceFile(path string, data []byte, perm os.FileMode) error {
	return swapIn(path, data, perm, true)
}

// swapIn writes data over path's sibling in place and exchanges the two
// names (ReplaceFile, WriteVersioned). syncEach fsyncs the folder after
// every exchange, so that path names the new version on disk; without it
// the folder is fsynced only when the sibling is made. The first write of
// path, a sibling that cannot be opened (a link is never followed) and a
// system without the exchange fall back to WriteFileAtomic.
func swapIn(path string, data []byte, perm os.FileMode, syncEach bool) error {
	if _, err := os.Lstat(path); err != nil {
		return WriteFileAtomic(path, data, perm)
	}
	next := NextPath(path)
	_, statErr := os.Lstat(next)
	// Overwritten in place, then cut to length: truncating first would
	// free the blocks the write allocates again (twice the CPU per write
	// here).
	f, err := os.OpenFile(next, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, perm)
	if err != nil {
		return WriteFileAtomic(path, data, perm)
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Truncate(int64(len(data)))
	}
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if statErr != nil && !syncEach {
		// A new name: durable before the exchange can move a version to it.
		if err := syncDir(filepath.Dir(path)); err != nil {
			return err
		}
	}
	if err := exchange(next, path); err != nil {
		return WriteFileAtomic(path, data, perm)
	}
	if syncEach {
		return syncDir(filepath.Dir(path))
	}
	return nil
}

// NextPath is the sibling ReplaceFile keeps beside path (remove it with
// path).
func NextPath(path string) string {
	dir, name := filepath.Split(path)
	return filepath.Join(dir, "."+name+".next")
}

// WriteVersioned is ReplaceFile for a file read back only with
// ReadVersioned: data is written in an envelope with version (a counter the
// caller raises with every write) and data's checksum, and a write is made
// durable with one fsync, the file's, and no fsync of the folder.
//
// The two names hold the two latest versions: each write overwrites the
// older one in place (".<name>.next"), fsyncs it and exchanges the names.
// Whether the exchange reached the disk does not matter: ReadVersioned
// reads both names and takes the highest version whose checksum holds, so
// a crash after the fsync keeps this version, and a crash during the
// overwrite (a torn file) keeps the one before. The folder is fsynced only
// when a name is made (the first write of path, the first of its sibling).
func WriteVersioned(path string, version int64, data []byte, perm os.FileMode) error {
	return swapIn(path, encodeVersioned(version, data), perm, false)
}

// ReadVersioned returns the newest whole version WriteVersioned left at
// path and its sibling, and its version. Content of path written before
// versions existed (no envelope) is version 0; such content in the sibling
// is an older copy and is ignored. fs.ErrNotExist when there is neither; an
// error naming path when nothing there checks out.
func ReadVersioned(path string) (data []byte, version int64, err error) {
	found := false
	var bad error
	for i, p := range []string{path, NextPath(path)} {
		raw, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		d, v, legacy, err := decodeVersioned(raw)
		switch {
		case err != nil:
			bad = fmt.Errorf("%s: %w", p, err)
			continue
		case legacy && i > 0:
			continue
		}
		if !found || v > version {
			data, version, found = d, v, true
		}
	}
	switch {
	case found:
		return data, version, nil
	case bad != nil:
		return nil, 0, bad
	}
	return nil, 0, fs.ErrNotExist
}

// The envelope: {"seq":N,"sha256":"<hex of data>","data":<data>}.
type versioned struct {
	Seq    *int64          `json:"seq"`
	SHA256 string          `json:"sha256"`
	Data   json.RawMessage `json:"data"`
}

func encodeVersioned(version int64, data []byte) []byte {
	data = bytes.TrimSpace(data) // as the decoder sees it
	sum := sha256.Sum256(data)
	out := make([]byte, 0, len(data)+120)
	out = fmt.Appendf(out, `{"seq":%d,"sha256":"%s","data":`, version, hex.EncodeToString(sum[:]))
	out = append(out, data...)
	return append(out, "}\n"...)
}

// decodeVersioned opens an envelope; legacy is content without one (a
// JSON object with neither its checksum nor its data).
func decodeVersioned(raw []byte) (data []byte, version int64, legacy bool, err error) {
	var v versioned
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, 0, false, fmt.Errorf("not whole JSON (a torn write?): %w", err)
	}
	if v.SHA256 == "" && v.Data == nil {
		if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
			return nil, 0, false, errors.New("not a JSON object")
		}
		return raw, 0, true, nil
	}
	sum := sha256.Sum256(v.Data)
	if v.Seq == nil || v.SHA256 != hex.EncodeToString(sum[:]) {
		return nil, 0, false, errors.New("checksum does not match (a torn write?)")
	}
	return v.Data, *v.Seq, false, nil
}
