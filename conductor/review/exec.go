package review

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/patch"
)

// exportTree writes the tree of commit into a new scratch folder: root/tree
// holds the files (no .git), root/home and root/tmp are the commands' HOME
// and TMPDIR. Blobs are written from the object store as they are: no
// checkout filter, attribute, hook or .git link exists. The returned func
// removes the folder.
func exportTree(ctx context.Context, g patch.Git, commit, scratchDir string) (string, func(), error) {
	if scratchDir == "" {
		scratchDir = os.TempDir()
	}
	if err := os.MkdirAll(scratchDir, 0o755); err != nil {
		return "", nil, err
	}
	root, err := os.MkdirTemp(scratchDir, "review-")
	if err != nil {
		return "", nil, err
	}
	remove := func() { removeAll(root) }
	fail := func(err error) (string, func(), error) { remove(); return "", nil, err }
	// The sandbox uid must traverse it (MkdirTemp makes it private).
	if err := os.Chmod(root, 0o755); err != nil {
		return fail(err)
	}
	for _, d := range []string{"tree", "home", "tmp"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			return fail(err)
		}
	}
	tree := filepath.Join(root, "tree")

	out, err := g.Run(ctx, "ls-tree", "-r", "-z", "--full-tree", commit)
	if err != nil {
		return fail(fmt.Errorf("list %s: %w", patch.Short(commit), err))
	}
	type entry struct{ mode, oid, name string }
	var blobs []entry
	r, err := os.OpenRoot(tree)
	if err != nil {
		return fail(err)
	}
	defer r.Close()
	for _, rec := range strings.Split(string(out), "\x00") {
		meta, name, ok := strings.Cut(rec, "\t")
		if !ok {
			continue
		}
		f := strings.Fields(meta)
		if len(f) != 3 {
			return fail(fmt.Errorf("ls-tree: unexpected line %q", rec))
		}
		if f[0] == "160000" { // a submodule: an empty folder, as a checkout without it
			if err := r.MkdirAll(name, 0o755); err != nil {
				return fail(err)
			}
			continue
		}
		blobs = append(blobs, entry{f[0], f[2], name})
	}
	if len(blobs) == 0 {
		return tree, remove, nil
	}

	cmd := g.Command(ctx, "cat-file", "--batch")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fail(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fail(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	go func() {
		w := bufio.NewWriter(stdin)
		for _, b := range blobs {
			fmt.Fprintln(w, b.oid)
		}
		w.Flush()
		stdin.Close()
	}()
	br := bufio.NewReaderSize(stdout, 64<<10)
	writeErr := func() error {
		for _, b := range blobs {
			hdr, err := br.ReadString('\n')
			if err != nil {
				return fmt.Errorf("cat-file: %w", err)
			}
			f := strings.Fields(hdr)
			if len(f) != 3 || f[0] != b.oid || f[1] != "blob" {
				return fmt.Errorf("cat-file: unexpected header %q for %s", strings.TrimSpace(hdr), b.name)
			}
			size, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				return fmt.Errorf("cat-file: bad size in %q", hdr)
			}
			if err := r.MkdirAll(path.Dir(b.name), 0o755); err != nil {
				return fmt.Errorf("export %s: %w", b.name, err)
			}
			if b.mode == "120000" {
				target := make([]byte, size)
				if _, err := io.ReadFull(br, target); err != nil {
					return err
				}
				if err := r.Symlink(string(target), b.name); err != nil {
					return fmt.Errorf("export %s: %w", b.name, err)
				}
			} else {
				perm := os.FileMode(0o644)
				if b.mode == "100755" {
					perm = 0o755
				}
				fh, err := r.OpenFile(b.name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
				if err != nil {
					return fmt.Errorf("export %s: %w", b.name, err)
				}
				_, err = io.CopyN(fh, br, size)
				if cerr := fh.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return fmt.Errorf("export %s: %w", b.name, err)
				}
			}
			if _, err := br.Discard(1); err != nil { // the newline after the content
				return err
			}
		}
		return nil
	}()
	if writeErr != nil {
		cmd.Process.Kill()
	}
	waitErr := cmd.Wait()
	if writeErr != nil {
		return fail(writeErr)
	}
	if waitErr != nil {
		return fail(fmt.Errorf("cat-file: %v: %s", waitErr, strings.TrimSpace(errb.String())))
	}
	return tree, remove, nil
}

// removeAll removes a scratch folder even where a command left read-only
// folders behind.
func removeAll(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	os.RemoveAll(dir)
}

// run runs argv on the scratch export inside the sandbox (no network, no
// credential, no .git, an unprivileged uid): a check or gate command runs
// worker-written code, so it never runs on the host. When the timeout passes
// (or ctx ends) the sandbox kills the whole process group. The error says
// the command could not be run at all.
func (c *checker) run(dir string, argv []string, timeout time.Duration) (sandbox.Result, error) {
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	root := filepath.Join(filepath.Dir(dir), "sandbox")
	res, err := sandbox.RunGate(c.ctx, c.sb, dir, root, argv, sandbox.GateEnv(c.getenv, root), timeout, sandbox.GateOutputLimit)
	if err != nil {
		return res, fmt.Errorf("%s: %w", argv[0], err)
	}
	return res, nil
}

func sortStrings(s []string) []string { sort.Strings(s); return s }

// ExportTree writes the tree of commit, from the repository's object store
// as it is (no checkout filter, hook or .git), into a new folder under
// scratchDir, as the gate sees it: the trusted tree `conductor cache warm`
// compiles. It returns the tree's folder and a func that removes it.
func ExportTree(ctx context.Context, g patch.Git, commit, scratchDir string) (string, func(), error) {
	return exportTree(ctx, g, commit, scratchDir)
}
