package runrec

import (
	"os"
	"path/filepath"
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
	next := NextPath(path)
	if _, err := os.Lstat(path); err != nil {
		return WriteFileAtomic(path, data, perm)
	}
	// Overwritten in place, then cut to length: truncating first would
	// free the blocks the write allocates again (twice the CPU per write
	// here). A torn next is never read: path still holds the last version.
	f, err := os.OpenFile(next, os.O_WRONLY|os.O_CREATE, perm)
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
	if err := exchange(next, path); err != nil {
		return WriteFileAtomic(path, data, perm)
	}
	return syncDir(filepath.Dir(path))
}

// NextPath is the sibling ReplaceFile keeps beside path (remove it with
// path).
func NextPath(path string) string {
	dir, name := filepath.Split(path)
	return filepath.Join(dir, "."+name+".next")
}
