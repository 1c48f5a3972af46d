package patch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/conductor-dev/conductor/patch/git"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// File is one file's change in a parsed diff.
type File = gitdiff.File

// Parse parses a git diff (one patch, as Extract writes it) and checks that
// it is one: at least one file diff, every path inside the tree (relative,
// no "..", no ".git" component), modes that a tree can hold, and binary
// hunks complete. Its errors name the file at fault.
func Parse(r io.Reader) ([]*File, error) {
	files, _, err := gitdiff.Parse(r)
	if err != nil {
		return nil, fmt.Errorf("parse diff: %w", err)
	}
	if len(files) == 0 {
		return nil, errors.New("parse diff: input is not a diff (no file header found)")
	}
	for _, f := range files {
		if err := checkFile(f); err != nil {
			return nil, fmt.Errorf("parse diff: %w", err)
		}
	}
	return files, nil
}

// fileName is the name a file diff is known by in messages.
func fileName(f *File) string {
	if f.NewName != "" {
		return f.NewName
	}
	return f.OldName
}

func checkFile(f *File) error {
	name := fileName(f)
	for _, p := range []string{f.OldName, f.NewName} {
		if p == "" {
			continue
		}
		if err := CheckPath(p); err != nil {
			return err
		}
	}
	if f.OldName == "" && !f.IsNew {
		return fmt.Errorf("%s: no old name for a changed file", name)
	}
	if f.NewName == "" && !f.IsDelete {
		return fmt.Errorf("%s: no new name for a changed file", name)
	}
	for _, m := range []os.FileMode{f.OldMode, f.NewMode} {
		if m != 0 && treeMode(m) == "" {
			return fmt.Errorf("%s: mode %o cannot be stored in a tree", name, m)
		}
	}
	if f.IsBinary && f.BinaryFragment == nil {
		return fmt.Errorf("%s: binary change without data (not made with --binary)", name)
	}
	for _, bf := range []*gitdiff.BinaryFragment{f.BinaryFragment, f.ReverseBinaryFragment} {
		if bf == nil {
			continue
		}
		got, err := io.Copy(io.Discard, bf.Data())
		if err != nil || got != bf.Size {
			return fmt.Errorf("%s: truncated or corrupt binary hunk (%d of %d bytes decode)", name, got, bf.Size)
		}
	}
	return nil
}

// CheckPath refuses a path that would leave the tree it is applied to or
// touch a git directory: absolute paths, empty, "." or ".." components, a
// ".git" component (in any case), NUL. (A backslash is an ordinary name
// character for git on POSIX systems.)
func CheckPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty path")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is outside the worktree (absolute)", p)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("path %q holds a NUL byte", p)
	}
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "" || c == ".":
			return fmt.Errorf("path %q has an empty or \".\" component", p)
		case c == "..":
			return fmt.Errorf("path %q is outside the worktree (\"..\")", p)
		case strings.EqualFold(c, ".git"):
			return fmt.Errorf("path %q touches a .git directory", p)
		}
	}
	return nil
}

// treeMode maps a file mode from a diff header to a tree entry mode.
func treeMode(m os.FileMode) string {
	switch m {
	case 0o100644, 0o100755, 0o120000:
		return strconv.FormatUint(uint64(m), 8)
	case 0o100664: // old git wrote group-writable files; git reads them as 644
		return "100644"
	}
	return ""
}

// ApplyOptions says what to apply where.
type ApplyOptions struct {
	// Repo holds the base tree and receives the new blobs and tree.
	Repo Git
	// Base is the commit or tree the diff applies to.
	Base string
	// Patch is the diff, as Extract or DiffTrees wrote it.
	Patch io.Reader
}

// Apply applies a diff onto the base tree without a checkout and returns the
// id of the resulting tree (its blobs and trees are written into the
// repository's object store). The diff is applied in Go with go-gitdiff —
// text hunks, binary literals and binary deltas, new, deleted, mode-changed
// and symlink files — and the result is assembled with a temporary index in
// a neutral git dir (read-tree, update-index --index-info, write-tree). It
// checks that every preimage blob is the one the diff's index line names,
// and changes nothing in the repository but adding objects.
func Apply(ctx context.Context, opts ApplyOptions) (string, error) {
	files, err := Parse(opts.Patch)
	if err != nil {
		return "", fmt.Errorf("apply: %w", err)
	}
	baseTree, err := resolveTree(ctx, opts.Repo, "base", opts.Base)
	if err != nil {
		return "", fmt.Errorf("apply: %w", err)
	}
	n, err := newNeutralRepo(opts.Repo, "")
	if err != nil {
		return "", fmt.Errorf("apply: %w", err)
	}
	defer n.close()

	entries, err := lsTree(ctx, n.Git, baseTree, files)
	if err != nil {
		return "", fmt.Errorf("apply: %w", err)
	}
	cat, err := newCatFile(ctx, n.Git)
	if err != nil {
		return "", fmt.Errorf("apply: %w", err)
	}
	defer cat.close()

	type update struct {
		mode, path, tmp string
		remove          bool
	}
	var updates []update
	seen := map[string]bool{}
	for i, f := range files {
		name := fileName(f)
		if seen[name] {
			return "", fmt.Errorf("apply: %s: changed twice in one diff", name)
		}
		seen[name] = true
		var old []byte
		oldMode := ""
		if !f.IsNew {
			e, ok := entries[f.OldName]
			if !ok {
				return "", fmt.Errorf("apply: %s: not in base %s", f.OldName, opts.Base)
			}
			if f.OldOIDPrefix != "" && !strings.HasPrefix(e.oid, f.OldOIDPrefix) {
				return "", fmt.Errorf("apply: %s: base has blob %s, the diff expects %s", f.OldName, e.oid, f.OldOIDPrefix)
			}
			if f.OldMode != 0 && treeMode(f.OldMode) != e.mode {
				return "", fmt.Errorf("apply: %s: base has mode %s, the diff expects %o", f.OldName, e.mode, f.OldMode)
			}
			if e.mode == "160000" {
				return "", fmt.Errorf("apply: %s: is a submodule in the base", f.OldName)
			}
			if old, err = cat.blob(e.oid); err != nil {
				return "", fmt.Errorf("apply: %s: %w", f.OldName, err)
			}
			oldMode = e.mode
		} else if _, ok := entries[f.NewName]; ok {
			return "", fmt.Errorf("apply: %s: new file already exists in base %s", f.NewName, opts.Base)
		}
		var out bytes.Buffer
		if err := gitdiff.Apply(&out, bytes.NewReader(old), f); err != nil {
			return "", fmt.Errorf("apply: %s: %w", name, err)
		}
		if f.IsDelete {
			if out.Len() != 0 {
				return "", fmt.Errorf("apply: %s: deletion leaves %d bytes (the diff does not match the base)", name, out.Len())
			}
			updates = append(updates, update{path: f.OldName, remove: true})
			continue
		}
		if f.OldName != "" && f.OldName != f.NewName && !f.IsCopy {
			updates = append(updates, update{path: f.OldName, remove: true})
		}
		mode := oldMode
		if f.NewMode != 0 {
			mode = treeMode(f.NewMode)
		}
		if mode == "" {
			mode = "100644"
		}
		tmp := filepath.Join(n.dir, "blob-"+strconv.Itoa(i))
		if err := os.WriteFile(tmp, out.Bytes(), 0o600); err != nil {
			return "", fmt.Errorf("apply: %w", err)
		}
		updates = append(updates, update{mode: mode, path: f.NewName, tmp: tmp})
	}

	// Hash the new contents in one git process, without filters.
	var paths bytes.Buffer
	for _, u := range updates {
		if !u.remove {
			paths.WriteString(u.tmp + "\n")
		}
	}
	oids := []string{}
	if paths.Len() > 0 {
		out, err := n.RunInput(ctx, &paths, "hash-object", "-w", "--no-filters", "--stdin-paths")
		if err != nil {
			return "", fmt.Errorf("apply: write blobs: %w", err)
		}
		oids = strings.Fields(string(out))
	}
	var info bytes.Buffer
	k := 0
	for _, u := range updates {
		if u.remove {
			fmt.Fprintf(&info, "0 %s\t%s\x00", zeroID, u.path)
			continue
		}
		if k >= len(oids) {
			return "", errors.New("apply: write blobs: git returned too few ids")
		}
		fmt.Fprintf(&info, "%s %s\t%s\x00", u.mode, oids[k], u.path)
		k++
	}
	if _, err := n.Run(ctx, "read-tree", baseTree); err != nil {
		return "", fmt.Errorf("apply: read base tree: %w", err)
	}
	if _, err := n.RunInput(ctx, &info, "update-index", "-z", "--index-info"); err != nil {
		return "", fmt.Errorf("apply: update index: %w", err)
	}
	tree, err := n.Line(ctx, "write-tree")
	if err != nil {
		return "", fmt.Errorf("apply: write tree: %w", err)
	}
	return tree, nil
}

type treeEntry struct{ mode, oid string }

// lsTree returns the base tree's entries for the old and new paths of files.
func lsTree(ctx context.Context, g Git, tree string, files []*File) (map[string]treeEntry, error) {
	want := map[string]bool{}
	for _, f := range files {
		want[f.OldName] = true
		want[f.NewName] = true
	}
	cmd := g.Command(ctx, "ls-tree", "-r", "-z", "--full-tree", tree)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, &git.GitError{Args: cmd.Args, Err: err}
	}
	entries := map[string]treeEntry{}
	br := bufio.NewReaderSize(stdout, 64<<10)
	for {
		rec, err := br.ReadString(0)
		if err == io.EOF {
			break
		}
		if err != nil {
			cmd.Wait()
			return nil, err
		}
		rec = strings.TrimSuffix(rec, "\x00")
		tab := strings.IndexByte(rec, '\t')
		if tab < 0 {
			continue
		}
		path := rec[tab+1:]
		if !want[path] {
			continue
		}
		m := strings.Fields(rec[:tab])
		if len(m) == 3 {
			entries[path] = treeEntry{mode: m[0], oid: m[2]}
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, &git.GitError{Args: []string{"ls-tree", tree}, Stderr: stderr.Bytes(), Err: err}
	}
	return entries, nil
}

// catFile reads blobs through one `git cat-file --batch` process.
type catFile struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func newCatFile(ctx context.Context, g Git) (*catFile, error) {
	cmd := g.Command(ctx, "cat-file", "--batch")
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, &git.GitError{Args: []string{"cat-file", "--batch"}, Err: err}
	}
	return &catFile{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 64<<10)}, nil
}

func (c *catFile) blob(oid string) ([]byte, error) {
	if _, err := io.WriteString(c.in, oid+"\n"); err != nil {
		return nil, fmt.Errorf("read blob %s: %w", oid, err)
	}
	head, err := c.out.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("read blob %s: %w", oid, err)
	}
	f := strings.Fields(head)
	if len(f) != 3 || f[1] != "blob" {
		return nil, fmt.Errorf("read blob %s: %s", oid, strings.TrimSpace(head))
	}
	size, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("read blob %s: bad size %q", oid, f[2])
	}
	data := make([]byte, size+1)
	if _, err := io.ReadFull(c.out, data); err != nil {
		return nil, fmt.Errorf("read blob %s: %w", oid, err)
	}
	return data[:size], nil
}

func (c *catFile) close() {
	c.in.Close()
	c.cmd.Wait()
}
