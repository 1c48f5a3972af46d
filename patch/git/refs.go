package git

import (
	"errors"
	"fmt"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// ReadRefs reads refs of the git dir gitDir in process (loose or packed,
// symbolic ones followed, go-git's reader): no git process where only a
// ref's value is needed. "" for a ref that does not exist; an error for one
// that does not hold an id (the caller then asks git, which says what is
// wrong).
func ReadRefs(gitDir string, names ...string) ([]string, error) {
	st := filesystem.NewStorageWithOptions(osfs.New(gitDir), cache.NewObjectLRU(0), filesystem.Options{})
	ids := make([]string, len(names))
	for i, n := range names {
		r, err := storer.ResolveReference(st, plumbing.ReferenceName(n))
		if errors.Is(err, plumbing.ErrReferenceNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", n, err)
		}
		if r.Hash().IsZero() { // go-git reads a broken ref as zero
			return nil, fmt.Errorf("read %s: not an object id", n)
		}
		ids[i] = r.Hash().String()
	}
	return ids, nil
}

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
