package git

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// The object formats are go-git's: a tree entry is its TreeEntry (mode a
// filemode.FileMode, id a plumbing.Hash), and trees and commits are
// decoded and encoded by its codecs. What this file adds is the raw-bytes
// interface conductor's readers and writers use, and the checks git makes
// before it writes an object and go-git does not.

// TreeEntry is one entry of a tree object.
type TreeEntry = object.TreeEntry

// Modes of tree entries.
const (
	ModeTree    = filemode.Dir
	ModeFile    = filemode.Regular
	ModeExec    = filemode.Executable
	ModeSymlink = filemode.Symlink
	ModeGitlink = filemode.Submodule
)

// memory returns a go-git object holding raw.
func memory(typ plumbing.ObjectType, raw []byte) *plumbing.MemoryObject {
	o := &plumbing.MemoryObject{}
	o.SetType(typ)
	o.Write(raw) // a MemoryObject's Write never fails
	return o
}

// ParseTree decodes a raw tree object.
func ParseTree(raw []byte) ([]TreeEntry, error) {
	var t object.Tree
	if err := t.Decode(memory(plumbing.TreeObject, raw)); err != nil {
		return nil, err
	}
	return t.Entries, nil
}

// EncodeTree encodes entries as a tree object, in git's order (a folder's
// name sorts as if it ended in "/"), refusing what git would not write: an
// empty name, a name with a '/' or NUL, twice the same name, a zero id.
func EncodeTree(es []TreeEntry) ([]byte, error) {
	es = slices.Clone(es)
	slices.SortStableFunc(es, func(a, b TreeEntry) int { return strings.Compare(sortName(a), sortName(b)) })
	for i, e := range es {
		if e.Name == "" || strings.ContainsAny(e.Name, "/\x00") || e.Hash.IsZero() || e.Mode == filemode.Empty ||
			(i > 0 && es[i-1].Name == e.Name) {
			return nil, fmt.Errorf("bad tree entry %o %q %s", uint32(e.Mode), e.Name, e.Hash)
		}
	}
	o := &plumbing.MemoryObject{}
	t := object.Tree{Entries: es}
	if err := t.Encode(o); err != nil {
		return nil, err
	}
	return rawOf(o)
}

func sortName(e TreeEntry) string {
	if e.Mode == filemode.Dir {
		return e.Name + "/"
	}
	return e.Name
}

func rawOf(o *plumbing.MemoryObject) ([]byte, error) {
	r, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// Signature is an author or committer: name, email and date (its zone
// kept as the offset the object had).
type Signature = object.Signature

// Commit is the part of a commit object conductor reads and writes.
type Commit struct {
	ID        string
	Tree      string
	Parents   []string
	Author    Signature
	Committer Signature
	Message   string
}

// ParseCommit decodes a raw commit object with go-git's decoder (it knows
// every header, multi-line signatures included).
func ParseCommit(id string, raw []byte) (Commit, error) {
	var gc object.Commit
	if err := gc.Decode(memory(plumbing.CommitObject, raw)); err != nil {
		return Commit{ID: id}, fmt.Errorf("commit %s: %w", id, err)
	}
	if gc.TreeHash.IsZero() {
		return Commit{ID: id}, fmt.Errorf("commit %s: no tree", id)
	}
	if gc.Author.Email == "" && gc.Author.Name == "" {
		return Commit{ID: id}, fmt.Errorf("commit %s: bad author line", id)
	}
	c := Commit{ID: id, Tree: gc.TreeHash.String(), Message: gc.Message, Author: gc.Author, Committer: gc.Committer}
	for _, p := range gc.ParentHashes {
		c.Parents = append(c.Parents, p.String())
	}
	return c, nil
}

// EncodeCommit encodes c (its ID ignored) with go-git's encoder, refusing
// what git would not write: a tree or parent that is not an id, an empty
// email, '<', '>' or a line break in a name or an email.
func EncodeCommit(c Commit) ([]byte, error) {
	gc := object.Commit{TreeHash: plumbing.NewHash(c.Tree), Author: c.Author, Committer: c.Committer, Message: c.Message}
	if !IsObjectID(c.Tree) {
		return nil, fmt.Errorf("commit: bad tree id %q", c.Tree)
	}
	for _, p := range c.Parents {
		if !IsObjectID(p) {
			return nil, fmt.Errorf("commit: bad parent id %q", p)
		}
		gc.ParentHashes = append(gc.ParentHashes, plumbing.NewHash(p))
	}
	for _, s := range []Signature{c.Author, c.Committer} {
		if err := CheckSignature(s); err != nil {
			return nil, err
		}
	}
	o := &plumbing.MemoryObject{}
	if err := gc.Encode(o); err != nil {
		return nil, err
	}
	return rawOf(o)
}

// CheckSignature refuses an identity git would not write.
func CheckSignature(s Signature) error {
	if s.Email == "" || strings.ContainsAny(s.Name+s.Email, "<>\n\x00") || s.When.IsZero() {
		return fmt.Errorf("bad identity %q <%s>", s.Name, s.Email)
	}
	return nil
}

// NewSignature is name and email at when, in when's zone.
func NewSignature(name, email string, when time.Time) Signature {
	return Signature{Name: name, Email: email, When: when}
}
