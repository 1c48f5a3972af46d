package git

import (
	"errors"
	"fmt"
	"sort"
	"strings"

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

// Ref is a ref's name and the id it holds.
type Ref struct{ Name, ID string }

// ListRefs lists the refs of gitDir under the given prefixes, in process
// (loose or packed, go-git's reader), sorted by name like `git
// for-each-ref`: a prefix ending in "/" matches the refs below it, any
// other the ref itself and those below it ("refs/stash"). Symbolic refs are
// followed. An error when a ref does not hold an id (the caller then asks
// git, which says what is wrong).
func ListRefs(gitDir string, prefixes ...string) ([]Ref, error) {
	st := filesystem.NewStorageWithOptions(osfs.New(gitDir), cache.NewObjectLRU(0), filesystem.Options{})
	it, err := st.IterReferences()
	if err != nil {
		return nil, err
	}
	defer it.Close()
	match := func(name string) bool {
		for _, p := range prefixes {
			if strings.HasSuffix(p, "/") && strings.HasPrefix(name, p) || name == p || strings.HasPrefix(name, p+"/") {
				return true
			}
		}
		return false
	}
	var refs []Ref
	err = it.ForEach(func(r *plumbing.Reference) error {
		name := r.Name().String()
		if !match(name) {
			return nil
		}
		if r.Type() == plumbing.SymbolicReference {
			res, err := storer.ResolveReference(st, r.Name())
			if err != nil {
				return fmt.Errorf("read %s: %w", name, err)
			}
			r = res
		}
		if r.Hash().IsZero() {
			return fmt.Errorf("read %s: not an object id", name)
		}
		refs = append(refs, Ref{Name: name, ID: r.Hash().String()})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].Name < refs[j].Name })
	return refs, nil
}
