package policy

import (
	"io/fs"
	"sort"
	"time"
)

// LoadRepoFiles is LoadRepoFS over contract files given by name
// ("implementer.json" → its bytes), such as a commit's roles/ folder read
// from git objects.
func LoadRepoFiles(defaults fs.FS, files map[string][]byte, repoLabel string) (*Policy, error) {
	return LoadRepoFS(defaults, filesFS(files), repoLabel)
}

// filesFS is a flat, read-only file system of named files: only what the
// loader asks (ReadDir of ".", ReadFile of a name).
type filesFS map[string][]byte

func (f filesFS) Open(name string) (fs.File, error) {
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
}

func (f filesFS) ReadFile(name string) ([]byte, error) {
	b, ok := f[name]
	if !ok {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	return append([]byte(nil), b...), nil
}

func (f filesFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if name != "." {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	out := make([]fs.DirEntry, 0, len(f))
	for n, b := range f {
		out = append(out, fs.FileInfoToDirEntry(fileInfo{name: n, size: int64(len(b))}))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

type fileInfo struct {
	name string
	size int64
}

func (i fileInfo) Name() string       { return i.name }
func (i fileInfo) Size() int64        { return i.size }
func (i fileInfo) Mode() fs.FileMode  { return 0o444 }
func (i fileInfo) ModTime() time.Time { return time.Time{} }
func (i fileInfo) IsDir() bool        { return false }
func (i fileInfo) Sys() any           { return nil }
