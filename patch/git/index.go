package git

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// The index file (gitformat-index, versions 2 to 4) is read here, by hand:
// go-git's decoder (plumbing/format/index) drops the assume-valid bit
// (CE_VALID), which IndexIsPlain must see — an assume-unchanged entry hides
// a file's change from status, add and reset — and refuses a whole index
// for an extension it does not know. TestIndexMatchesGoGit checks both
// readers agree on every entry's mode and name where go-git can read.

// IndexGitlinks returns the paths of the gitlink (submodule) entries of the
// index file at path, in index order. It reads the file only (versions 2 to
// 4); an index it cannot parse is an error.
func IndexGitlinks(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var links []string
	err = IndexEntries(b, func(mode uint32, name string) {
		if mode&0o170000 == 0o160000 {
			links = append(links, name)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", path, err)
	}
	return links, nil
}

// IndexEntries calls fn with the mode and path of each entry of an index
// file (gitformat-index, versions 2 to 4).
func IndexEntries(b []byte, fn func(mode uint32, name string)) error {
	if len(b) < 12+20 || string(b[:4]) != "DIRC" {
		return errors.New("not an index file")
	}
	be := func(off int) uint32 {
		return uint32(b[off])<<24 | uint32(b[off+1])<<16 | uint32(b[off+2])<<8 | uint32(b[off+3])
	}
	version := be(4)
	if version < 2 || version > 4 {
		return fmt.Errorf("index version %d not supported", version)
	}
	count := be(8)
	end := len(b) - 20
	off := 12
	prev := ""
	for i := uint32(0); i < count; i++ {
		const fixed = 62
		if off+fixed > end {
			return errors.New("truncated entry")
		}
		mode := be(off + 24)
		flags := uint16(b[off+60])<<8 | uint16(b[off+61])
		start := off + fixed
		if flags&0x4000 != 0 {
			if version < 3 {
				return errors.New("extended flags in a version 2 index")
			}
			start += 2
		}
		if start >= end { // a name takes at least its NUL
			return errors.New("truncated entry")
		}
		if version == 4 {
			// Bytes to strip from the previous name (git's offset
			// varint), then the rest of the name up to a NUL.
			c := b[start]
			start++
			strip := int(c & 127)
			for c&128 != 0 {
				if start >= end || strip > len(b) {
					return errors.New("bad name prefix")
				}
				c = b[start]
				start++
				strip = (strip+1)<<7 | int(c&127)
			}
			if strip > len(prev) {
				return errors.New("bad name prefix")
			}
			nul := bytesIndex0(b[start:end])
			if nul < 0 {
				return errors.New("unterminated name")
			}
			prev = prev[:len(prev)-strip] + string(b[start:start+nul])
			fn(mode, prev)
			off = start + nul + 1
			continue
		}
		nul := bytesIndex0(b[start:end])
		if nul < 0 {
			return errors.New("unterminated name")
		}
		fn(mode, string(b[start:start+nul]))
		off += (start - off + nul + 8) &^ 7
	}
	// A split index keeps entries in another file, a sparse one folds
	// folders: neither lists every entry here.
	for off+8 <= end {
		sig := string(b[off : off+4])
		if sig == "link" || sig == "sdir" {
			return fmt.Errorf("a split or sparse index (%s extension)", sig)
		}
		size := int(be(off + 4))
		if size < 0 || size > end-off-8 {
			return errors.New("truncated extension")
		}
		off += 8 + size
	}
	return nil
}

func bytesIndex0(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// IndexIsPlain reports whether the index file at path exists and every
// entry is one git refreshes from the file's stat data (see IndexSeedable):
// no assume-unchanged or skip-worktree bit, no conflict, no split or
// sparse index. An index that is not plain can hide a file's change from
// `git status`, `add` and `reset`.
func IndexIsPlain(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && IndexSeedable(b)
}

// IndexSeedable scans an index file (gitformat-index: versions 2 to 4) and
// reports whether every entry is a plain stage-0 entry git refreshes from
// the file's stat data: no assume-unchanged (CE_VALID) or skip-worktree bit,
// no conflict stage, and no split-index ("link") or sparse-directory
// ("sdir") extension.
func IndexSeedable(b []byte) bool {
	if len(b) < 12+20 || string(b[:4]) != "DIRC" {
		return false
	}
	version := binary.BigEndian.Uint32(b[4:8])
	if version < 2 || version > 4 {
		return false
	}
	count := binary.BigEndian.Uint32(b[8:12])
	end := len(b) - 20 // the trailing checksum
	off := 12
	for i := uint32(0); i < count; i++ {
		const fixed = 62 // stat data, object id, flags
		if off+fixed > end {
			return false
		}
		flags := binary.BigEndian.Uint16(b[off+60:])
		if flags&0x8000 != 0 || flags&0x3000 != 0 { // assume-valid, stage
			return false
		}
		start := off + fixed
		if flags&0x4000 != 0 { // extended flags
			if version < 3 || start+2 > end {
				return false
			}
			if binary.BigEndian.Uint16(b[start:])&0x4000 != 0 { // skip-worktree
				return false
			}
			start += 2
		}
		if version == 4 {
			// A varint (bytes to strip from the previous name), then the
			// rest of the name up to a NUL; no padding.
			for start < end && b[start]&0x80 != 0 {
				start++
			}
			if start++; start > end {
				return false
			}
			nul := bytes.IndexByte(b[start:end], 0)
			if nul < 0 {
				return false
			}
			off = start + nul + 1
			continue
		}
		nul := bytes.IndexByte(b[start:end], 0)
		if nul < 0 {
			return false
		}
		// The entry is NUL-padded to a multiple of 8 bytes (1 to 8 NULs).
		off += (start - off + nul + 8) &^ 7
	}
	// Extensions: a 4-byte signature and a 4-byte size each.
	for off+8 <= end {
		sig := string(b[off : off+4])
		if sig == "link" || sig == "sdir" {
			return false
		}
		size := int64(binary.BigEndian.Uint32(b[off+4:]))
		if size > int64(end-off-8) {
			return false
		}
		off += 8 + int(size)
	}
	return off == end
}
