package policy

import (
	"fmt"
	"io"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// Change is one file of a diff, as the landing rules and review see it.
type Change struct {
	// Status is 'A' added, 'M' modified, 'D' deleted, 'R' renamed,
	// 'C' copied or 'T' type changed (file ↔ symlink ↔ gitlink).
	Status byte
	// Path is the path after the change (for 'D', the deleted path).
	Path string
	// OldPath is the path before a rename or copy; empty otherwise.
	OldPath string
	// OldMode and NewMode are git's octal modes ("100644", "100755",
	// "120000" symlink, "160000" gitlink); empty when absent.
	OldMode, NewMode string
	// OldOID and NewOID are the blob ids of the diff's index line (whole
	// ids in a --full-index diff such as the canonical one); empty for the
	// side a file does not exist on, and when the diff gives none (a change
	// of mode only).
	OldOID, NewOID string
	// LinkTarget is the new symlink target when NewMode is 120000 and the
	// diff carries it.
	LinkTarget string
	// Added and Deleted count text lines.
	Added, Deleted int64
	// Binary marks a binary change.
	Binary bool
}

// ParseChanges reads a git diff (the canonical diff of package patch, or any
// `git diff` output with full headers) and returns its changes in order.
// Quoted names ("a/caf\303\251") are unquoted.
func ParseChanges(diff io.Reader) ([]Change, error) {
	files, _, err := gitdiff.Parse(diff)
	if err != nil {
		return nil, fmt.Errorf("parse diff: %w", err)
	}
	out := make([]Change, 0, len(files))
	for i, f := range files {
		c := Change{Binary: f.IsBinary}
		if f.OldMode != 0 {
			c.OldMode = fmt.Sprintf("%06o", uint32(f.OldMode))
		}
		if f.NewMode != 0 {
			c.NewMode = fmt.Sprintf("%06o", uint32(f.NewMode))
		}
		switch {
		case f.IsNew:
			c.Status, c.Path = 'A', f.NewName
		case f.IsDelete:
			c.Status, c.Path = 'D', f.OldName
		case f.IsRename:
			c.Status, c.Path, c.OldPath = 'R', f.NewName, f.OldName
		case f.IsCopy:
			c.Status, c.Path, c.OldPath = 'C', f.NewName, f.OldName
		case c.OldMode != "" && c.NewMode != "" && c.OldMode[:2] != c.NewMode[:2]:
			c.Status, c.Path = 'T', f.NewName
		default:
			c.Status, c.Path = 'M', f.NewName
		}
		if c.Path == "" {
			return nil, fmt.Errorf("parse diff: file %d has no name", i+1)
		}
		if c.NewMode == "" && c.Status != 'D' && c.OldMode != "" {
			c.NewMode = c.OldMode // mode unchanged: the header gives only "index a..b 100644"
		}
		c.OldOID, c.NewOID = blobID(f.OldOIDPrefix), blobID(f.NewOIDPrefix)
		for _, frag := range f.TextFragments {
			c.Added += frag.LinesAdded
			c.Deleted += frag.LinesDeleted
		}
		if c.NewMode == "120000" {
			c.LinkTarget = linkTarget(f)
		}
		out = append(out, c)
	}
	return out, nil
}

// blobID is an index line's id, "" for the all-zero id of a side that does
// not exist.
func blobID(id string) string {
	if strings.Trim(id, "0") == "" {
		return ""
	}
	return id
}

// linkTarget returns the symlink target carried by the added side of a
// symlink's diff.
func linkTarget(f *gitdiff.File) string {
	var b strings.Builder
	for _, frag := range f.TextFragments {
		for _, l := range frag.Lines {
			if l.Op == gitdiff.OpAdd {
				b.WriteString(l.Line)
			}
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}
