package land

import (
	"path"
	"slices"
	"strings"

	"github.com/conductor-dev/conductor/policy"
)

// The squash of an approved change onto a target tip that moved since the
// work's base. Mostly the target moved elsewhere: the change's files are
// at the tip exactly as the work's base had them, and the squash is the
// tip's tree with those files set to the approved versions — a few trees
// rebuilt in process, no merge-tree. Its canonical diff is then the policy
// diff, byte for byte (same paths, modes and blobs), and so is its
// patch-id. Anything else goes to `git merge-tree` and a diff of its tree.

// maxAppliedChanges bounds the changes applied or compared in process.
const maxAppliedChanges = 2000

// treeMode is a tree entry's mode for a folder.
const treeMode = "40000"

// folder is a tree being edited: its entries, and the folders below it that
// are edited too.
type folder struct {
	entries []treeEntry
	sub     map[string]*folder
}

// applyChanges returns the tree that is tipTree with changes (the policy
// diff from the merge base to the approved commit, whose tree is
// approvedTree) applied, and the new tree objects that make it (not
// written). ok is false — merge-tree decides — unless every change is an
// addition, modification or deletion carrying its blob ids, whose old side
// is exactly what tip has at that path, an addition goes into a folder tip
// has, and a deletion leaves its folder in the approved tree: then
// merge-tree would give the same tree (no path was changed on both sides,
// and neither side removed a folder the other added to, so no rename is
// detected either).
func (l *lander) applyChanges(tipTree, approvedTree string, changes []policy.Change) (string, []looseObject, bool) {
	if len(changes) == 0 || len(changes) > maxAppliedChanges {
		return "", nil, false
	}
	root := &folder{}
	if !l.load(root, tipTree) {
		return "", nil, false
	}
	adds := 0
	for _, c := range changes {
		if c.Status == 'A' {
			adds++
		}
	}
	for _, c := range changes {
		dir, name := path.Split(c.Path)
		dir = strings.TrimSuffix(dir, "/")
		f := l.folderAt(root, dir)
		if f == nil && c.Status == 'A' {
			f = l.newFolder(root, dir, approvedTree, changes)
		}
		if f == nil || name == "" {
			return "", nil, false
		}
		i := -1
		for k, e := range f.entries {
			if e.Name == name {
				i = k
				break
			}
		}
		switch c.Status {
		case 'A':
			if i >= 0 || c.NewOID == "" || c.NewMode == "" {
				return "", nil, false
			}
			f.entries = append(f.entries, treeEntry{Mode: c.NewMode, Name: name, OID: c.NewOID})
		case 'M', 'D':
			if i < 0 || c.OldOID == "" || f.entries[i].Mode != c.OldMode || f.entries[i].OID != c.OldOID {
				return "", nil, false
			}
			if c.Status == 'M' {
				if c.NewOID == "" || c.NewMode == "" {
					return "", nil, false
				}
				f.entries[i] = treeEntry{Mode: c.NewMode, Name: name, OID: c.NewOID}
				break
			}
			if dir != "" && adds > 0 {
				// A folder the approved side removed while adding files
				// elsewhere may be a folder rename, which merge-tree
				// follows: it decides.
				if o, err := l.cat.get(approvedTree + ":" + dir); err != nil || o.Type != "tree" {
					return "", nil, false
				}
			}
			f.entries = append(f.entries[:i], f.entries[i+1:]...)
		default:
			return "", nil, false
		}
	}
	var objs []looseObject
	id, ok := l.store(root, &objs)
	return id, objs, ok && id != ""
}

// load reads tree id into f.
func (l *lander) load(f *folder, id string) bool {
	es, ok := l.treeEntries(id)
	f.entries, f.sub = es, map[string]*folder{}
	return ok
}

// folderAt returns the folder at dir (slash-separated, "" the root),
// loading the trees on the way; nil when tip has no folder there.
func (l *lander) folderAt(root *folder, dir string) *folder {
	f := root
	if dir == "" {
		return f
	}
	for _, name := range strings.Split(dir, "/") {
		if sub, ok := f.sub[name]; ok {
			f = sub
			continue
		}
		i := -1
		for k, e := range f.entries {
			if e.Name == name && e.Mode == treeMode {
				i = k
				break
			}
		}
		if i < 0 {
			return nil
		}
		sub := &folder{}
		if !l.load(sub, f.entries[i].OID) {
			return nil
		}
		f.sub[name] = sub
		f = sub
	}
	return f
}

// newFolder makes the folders of dir that tip lacks, when the approved
// change creates them: every file under the first missing one in the
// approved tree is an addition of changes (so the merge base had no such
// folder, and tip cannot have moved it elsewhere). nil otherwise.
func (l *lander) newFolder(root *folder, dir, approvedTree string, changes []policy.Change) *folder {
	f, parts := root, strings.Split(dir, "/")
	for i, name := range parts {
		if sub, ok := f.sub[name]; ok {
			f = sub
			continue
		}
		if slices.ContainsFunc(f.entries, func(e treeEntry) bool { return e.Name == name }) {
			if i < len(parts)-1 && l.folderAt(root, strings.Join(parts[:i+1], "/")) != nil {
				f = f.sub[name]
				continue
			}
			return nil // a file (or an unreadable folder) of that name
		}
		missing := strings.Join(parts[:i+1], "/")
		added := 0
		for _, c := range changes {
			if c.Status == 'A' && strings.HasPrefix(c.Path, missing+"/") {
				added++
			}
		}
		o, err := l.cat.get(approvedTree + ":" + missing)
		if err != nil || o.Type != "tree" || l.countFiles(o.OID, added) != added {
			return nil
		}
		for _, name := range parts[i:] {
			sub := &folder{sub: map[string]*folder{}}
			f.entries = append(f.entries, treeEntry{Mode: treeMode, Name: name, OID: emptyTree})
			f.sub[name] = sub
			f = sub
		}
		return f
	}
	return f
}

// countFiles counts the files under tree id, stopping past limit.
func (l *lander) countFiles(id string, limit int) int {
	es, ok := l.treeEntries(id)
	if !ok {
		return limit + 1
	}
	n := 0
	for _, e := range es {
		if e.Mode == treeMode {
			n += l.countFiles(e.OID, limit-n)
		} else {
			n++
		}
		if n > limit {
			break
		}
	}
	return n
}

// store encodes f's edited folders bottom up, appending the tree objects
// the object store lacks to objs (a folder the tip did not change since the
// work's base is, once edited, the approved commit's own, already stored),
// and returns f's tree id ("" for an empty folder, which git does not
// keep).
func (l *lander) store(f *folder, objs *[]looseObject) (string, bool) {
	for name, sub := range f.sub {
		id, ok := l.store(sub, objs)
		if !ok {
			return "", false
		}
		for i, e := range f.entries {
			if e.Name == name && e.Mode == treeMode {
				if id == "" {
					f.entries = append(f.entries[:i], f.entries[i+1:]...)
				} else {
					f.entries[i].OID = id
				}
				break
			}
		}
	}
	if len(f.entries) == 0 {
		return "", true
	}
	raw, err := encodeTree(f.entries)
	if err != nil {
		return "", false
	}
	o := newObject("tree", raw)
	if !l.cat.has(o.oid) {
		*objs = append(*objs, o)
	}
	return o.oid, true
}

// sameChanges reports whether the file changes from tree from to tree to
// are exactly changes (see sameChangeSet). The canonical diff of from..to
// is then, byte for byte, the one changes were parsed from (with renames
// off, a file's diff depends on nothing else), and so is its patch-id.
// False (also for anything it cannot compare) sends the caller to git.
func (l *lander) sameChanges(from, to string, changes []policy.Change) bool {
	got, ok := l.fileChanges(from, to)
	return ok && sameChangeSet(got, changes)
}

// fileChanges lists the files that differ from tree a to tree b as
// additions, modifications and deletions with their modes and blob ids
// (in no particular order); false past maxAppliedChanges or when a tree
// cannot be read.
func (l *lander) fileChanges(a, b string) ([]policy.Change, bool) {
	var cs []policy.Change
	ok := l.walkChanges("", a, b, func(path, oldMode, oldOID, newMode, newOID string) bool {
		c := policy.Change{Status: 'M', Path: path, OldMode: oldMode, NewMode: newMode, OldOID: oldOID, NewOID: newOID}
		if oldOID == "" {
			c.Status = 'A'
		} else if newOID == "" {
			c.Status = 'D'
		}
		cs = append(cs, c)
		return len(cs) <= maxAppliedChanges
	})
	return cs, ok
}

// sameChangeSet reports whether a and b change the same paths the same way
// (status, modes and blob ids), each an addition, a modification or a
// deletion carrying the ids of the sides it has.
func sameChangeSet(a, b []policy.Change) bool {
	if len(a) != len(b) || len(a) > maxAppliedChanges {
		return false
	}
	byPath := make(map[string]policy.Change, len(b))
	for _, c := range b {
		switch {
		case c.Status != 'A' && c.Status != 'M' && c.Status != 'D',
			c.Status != 'A' && c.OldOID == "", c.Status != 'D' && c.NewOID == "":
			return false
		}
		if _, dup := byPath[c.Path]; dup {
			return false
		}
		byPath[c.Path] = c
	}
	for _, c := range a {
		w, ok := byPath[c.Path]
		if !ok || w.Status != c.Status || w.OldMode != c.OldMode || w.NewMode != c.NewMode || w.OldOID != c.OldOID || w.NewOID != c.NewOID {
			return false
		}
		delete(byPath, c.Path)
	}
	return len(byPath) == 0
}

// walkChanges calls fn for every file (blob, symlink or gitlink) that
// differs between trees a and b ("" is no tree), with its modes and ids
// ("" on the side it is absent from), as `diff-tree -r` pairs them; false
// when fn does or a tree cannot be read.
func (l *lander) walkChanges(prefix, a, b string, fn func(path, oldMode, oldOID, newMode, newOID string) bool) bool {
	if a == b {
		return true
	}
	ea, ok := l.treeEntries(a)
	if !ok {
		return false
	}
	eb, ok := l.treeEntries(b)
	if !ok {
		return false
	}
	inB := make(map[string]treeEntry, len(eb))
	for _, e := range eb {
		inB[e.Name] = e
	}
	side := func(e treeEntry, removed bool) bool { // e only on one side
		p := prefix + e.Name
		switch {
		case e.Mode == treeMode && removed:
			return l.walkChanges(p+"/", e.OID, "", fn)
		case e.Mode == treeMode:
			return l.walkChanges(p+"/", "", e.OID, fn)
		case removed:
			return fn(p, e.Mode, e.OID, "", "")
		default:
			return fn(p, "", "", e.Mode, e.OID)
		}
	}
	for _, x := range ea {
		y, both := inB[x.Name]
		delete(inB, x.Name)
		switch {
		case both && x.Mode == y.Mode && x.OID == y.OID:
		case both && x.Mode == treeMode && y.Mode == treeMode:
			if !l.walkChanges(prefix+x.Name+"/", x.OID, y.OID, fn) {
				return false
			}
		case both && x.Mode != treeMode && y.Mode != treeMode:
			if !fn(prefix+x.Name, x.Mode, x.OID, y.Mode, y.OID) {
				return false
			}
		default: // gone, or replaced by something of the other kind
			if !side(x, true) || (both && !side(y, false)) {
				return false
			}
		}
	}
	for _, y := range eb {
		if _, added := inB[y.Name]; added && !side(y, false) {
			return false
		}
	}
	return true
}

// treeEntries reads a tree ("" is the empty tree).
func (l *lander) treeEntries(id string) ([]treeEntry, bool) {
	if id == "" {
		return nil, true
	}
	o, err := l.cat.get(id)
	if err != nil || o.Type != "tree" {
		return nil, false
	}
	es, err := parseTree(o.Content)
	return es, err == nil
}
