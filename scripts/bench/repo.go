package main

import (
	"bufio"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// text makes deterministic source-like lines.
type text struct{ rng *rand.Rand }

var words = strings.Fields("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi chi psi omega " +
	"return value index count buffer reader writer context error result commit tree patch worker queue land extract pool")

func newText(seed int64) *text { return &text{rng: rand.New(rand.NewSource(seed))} }

// lines returns n lines of about 40–70 bytes each.
func (t *text) lines(n int) []byte {
	var b strings.Builder
	for i := 0; i < n; i++ {
		switch t.rng.Intn(6) {
		case 0:
			fmt.Fprintf(&b, "func %s%d(%s int) int {\n", words[t.rng.Intn(len(words))], t.rng.Intn(1000), words[t.rng.Intn(len(words))])
		case 1:
			b.WriteString("}\n")
		default:
			b.WriteString("\t// ")
			for j := 0; j < 5+t.rng.Intn(6); j++ {
				b.WriteString(words[t.rng.Intn(len(words))])
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%d\n", t.rng.Intn(100000))
		}
	}
	return []byte(b.String())
}

// path of file f in folder d of the generated tree: 2,000 folders spread
// under 50 package folders.
func (b *bench) path(d, f int) string { return fmt.Sprintf("pkg%02d/d%04d/f%d.go", d%50, d, f) }

// generate writes the operator repository with git fast-import:
//
//	refs/heads/main      C0 (folders×perFolder files), then one unrelated commit (the land target's tip)
//	refs/heads/near      C0 + 20 edited files (pool resets go between C0 and this)
//	refs/heads/big       C0 with every file edited in two places (the patch-id row's diff)
//	refs/heads/work/bench C0 + 3 edits and a new file (the change the land row lands)
func (b *bench) generate() error {
	b.folders, b.files = b.sz.folders, b.sz.folders*b.sz.perFolder
	b.repo = filepath.Join(b.tmp, "repo")
	b.gitDir = filepath.Join(b.repo, ".git")
	if _, err := b.git(b.tmp, "init", "-q", "-b", "operator", b.repo); err != nil {
		return err
	}
	cmd := exec.CommandContext(b.ctx, "git", "--git-dir="+b.gitDir, "fast-import", "--quiet")
	cmd.Env = b.env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		return err
	}
	w := bufio.NewWriterSize(stdin, 1<<20)
	werr := b.stream(w)
	if werr == nil {
		werr = w.Flush()
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("fast-import: %v: %s", err, errb.String())
	}
	if werr != nil {
		return werr
	}
	if b.base, err = b.git(b.repo, "--git-dir="+b.gitDir, "rev-parse", "main~1"); err != nil {
		return err
	}
	b.near, err = b.git(b.repo, "--git-dir="+b.gitDir, "rev-parse", "near")
	return err
}

func (b *bench) stream(w io.Writer) error {
	t := newText(1)
	contents := make([][]byte, b.files)
	commit := func(ref string, mark int, from string, msg string) {
		fmt.Fprintf(w, "commit %s\nmark :%d\ncommitter Bench <bench@example.test> 1767225600 +0000\ndata %d\n%s\n", ref, mark, len(msg), msg)
		if from != "" {
			fmt.Fprintf(w, "from %s\n", from)
		}
	}
	file := func(p string, data []byte) {
		fmt.Fprintf(w, "M 100644 inline %s\ndata %d\n", p, len(data))
		w.Write(data)
		w.Write([]byte("\n"))
	}
	commit("refs/heads/main", 1, "", "generated tree")
	for d := 0; d < b.folders; d++ {
		for f := 0; f < b.sz.perFolder; f++ {
			i := d*b.sz.perFolder + f
			contents[i] = t.lines(20 + t.rng.Intn(40))
			file(b.path(d, f), contents[i])
		}
	}
	commit("refs/heads/near", 2, ":1", "nearby commit")
	for i := 0; i < 20; i++ {
		d := (i * 97) % b.folders
		file(b.path(d, 1), append(append([]byte(nil), contents[d*b.sz.perFolder+1]...), t.lines(3)...))
	}
	// Every file edited in two places, sized so the diff reaches patchIDBytes.
	perFile := int(b.sz.patchIDBytes/int64(b.files))*11/10 + 1
	commit("refs/heads/big", 3, ":1", "big change")
	for d := 0; d < b.folders; d++ {
		for f := 0; f < b.sz.perFolder; f++ {
			old := strings.SplitAfter(string(contents[d*b.sz.perFolder+f]), "\n")
			var nb strings.Builder
			for k, l := range old {
				nb.WriteString(l)
				if k == 5 {
					nb.Write(t.lines(perFile / 2 / 55))
				}
			}
			nb.Write(t.lines(perFile / 2 / 55))
			file(b.path(d, f), []byte(nb.String()))
		}
	}
	commit("refs/heads/work/bench", 4, ":1", "Bench change\n\nRun-Id: run-bench\nModel: bench")
	for _, d := range []int{1, b.folders / 2, b.folders - 3} {
		file(b.path(d, 2), append(append([]byte(nil), contents[d*b.sz.perFolder+2]...), []byte("// changed by the work\n")...))
	}
	file(fmt.Sprintf("pkg%02d/d%04d/new.go", 7%50, 7), []byte("package p7\n\nconst New = 1\n"))
	commit("refs/heads/main", 5, ":1", "unrelated change on the target")
	file(b.path(b.folders-1, 0), []byte("package last\n\n// moved on\n"))
	return nil
}

// worktree adds a detached linked worktree at rev.
func (b *bench) worktree(name, rev string) (string, error) {
	dir := filepath.Join(b.tmp, "wt", name)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	_, err := b.git(b.repo, "--git-dir="+b.gitDir, "worktree", "add", "-q", "--detach", dir, rev)
	return dir, err
}

func (b *bench) removeWorktree(dir string) error {
	_, err := b.git(b.repo, "--git-dir="+b.gitDir, "worktree", "remove", "--force", dir)
	return err
}

// change edits a worktree like a worker would: edits, new files,
// deletions, a mode change and a binary file.
func (b *bench) change(wt string, seed int64, edits int) error {
	t := newText(seed)
	for i := 0; i < edits; i++ {
		d := t.rng.Intn(b.folders)
		p := filepath.Join(wt, b.path(d, t.rng.Intn(b.sz.perFolder)))
		data, err := os.ReadFile(p)
		if err != nil {
			continue // deleted by an earlier edit
		}
		if err := os.WriteFile(p, append(data, t.lines(3)...), 0o644); err != nil {
			return err
		}
	}
	for i := 0; i < edits/4; i++ {
		p := filepath.Join(wt, "new", fmt.Sprintf("n%d", i), "file.go")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, t.lines(30), 0o644); err != nil {
			return err
		}
	}
	for i := 0; i < edits/10; i++ {
		os.Remove(filepath.Join(wt, b.path(t.rng.Intn(b.folders), 0)))
	}
	if err := os.Chmod(filepath.Join(wt, b.path(1, 1)), 0o755); err != nil {
		return err
	}
	bin := make([]byte, 200000)
	t.rng.Read(bin)
	return os.WriteFile(filepath.Join(wt, "blob.bin"), bin, 0o644)
}
