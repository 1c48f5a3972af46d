package git

import (
	"compress/zlib"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
)

// The one writer of objects in process: git's loose format (zlib of
// "<type> <size>\0<content>"), a temporary file in the fan-out folder,
// fsync, then a rename. go-git's writer does not fsync (a crash could leave
// a ref pointing at an object that never reached the disk), so conductor
// keeps this one. Nothing here, or anywhere in conductor, deletes an
// object: an object nothing references is git gc's to prune.

// Loose is an object built in memory, its id computed, not yet written.
type Loose struct {
	Type, ID string
	Content  []byte
}

// NewLoose builds the object of type typ ("blob", "tree", "commit") with
// content and computes its id.
func NewLoose(typ string, content []byte) Loose {
	t, _ := plumbing.ParseObjectType(typ)
	return Loose{Type: typ, ID: plumbing.ComputeHash(t, content).String(), Content: content}
}

// zlibWriters keeps compressors (each allocates some hundred KB) for reuse.
var zlibWriters = sync.Pool{New: func() any { return zlib.NewWriter(nil) }}

// WriteLoose writes objects into gitDir's object store side by side (file
// creation, not CPU, is what they cost) and returns once all are there
// (objects already present are left alone). A ref may point at them only
// afterwards.
func WriteLoose(gitDir string, objs ...Loose) error {
	ch := make(chan error, len(objs))
	for _, o := range objs {
		go func() { ch <- o.write(gitDir) }()
	}
	var first error
	for range objs {
		if err := <-ch; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// write stores the object the way git does (zlib, a temporary file in the
// fan-out folder, fsync, then a rename).
func (o Loose) write(gitDir string) error {
	if !IsObjectID(o.ID) {
		return fmt.Errorf("write object: bad id %q", o.ID)
	}
	dir := filepath.Join(objectsDir(gitDir), o.ID[:2])
	final := filepath.Join(dir, o.ID[2:])
	if _, err := os.Lstat(final); err == nil {
		return nil
	}
	if err := os.Mkdir(dir, 0o755); err == nil {
		// A fan-out folder gets the object store's own permissions (a
		// shared repository's group-writable, setgid ones included), as
		// git makes them.
		if fi, err := os.Stat(filepath.Dir(dir)); err == nil {
			os.Chmod(dir, fi.Mode()&(fs.ModePerm|fs.ModeSetgid))
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return err
	}
	f, err := os.CreateTemp(dir, "tmp_obj_")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // our own temporary file; a no-op once renamed
	zw := zlibWriters.Get().(*zlib.Writer)
	defer zlibWriters.Put(zw)
	zw.Reset(f)
	fmt.Fprintf(zw, "%s %d\x00", o.Type, len(o.Content))
	_, err = zw.Write(o.Content)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o444)
	}
	if err == nil {
		err = os.Rename(f.Name(), final)
	}
	if err != nil {
		return fmt.Errorf("write %s object %s: %w", o.Type, o.ID, err)
	}
	return nil
}
