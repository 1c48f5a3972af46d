package patch

import (
	"errors"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// SymbolicRef returns the ref that name points to when name is a symbolic
// ref in gitDir ("ref: refs/heads/other"), "" when it is a plain ref or
// does not exist. It reads in process, without following the link.
func SymbolicRef(gitDir, name string) (string, error) {
	st := filesystem.NewStorageWithOptions(osfs.New(gitDir), cache.NewObjectLRU(0), filesystem.Options{})
	r, err := st.Reference(plumbing.ReferenceName(name))
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if r.Type() == plumbing.SymbolicReference {
		return r.Target().String(), nil
	}
	return "", nil
}
