package patch

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// requireGit skips a test when git is not installed, except under CI
// (CI=true), where a missing git is a failure.
func requireGit(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("git not installed (required when CI=true)")
		}
		t.Skip("git not installed")
	}
}

// testEnv is the isolated environment every test git runs with.
func testEnv(home string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=Test Author",
		"GIT_AUTHOR_EMAIL=author@example.test",
		"GIT_COMMITTER_NAME=Test Committer",
		"GIT_COMMITTER_EMAIL=committer@example.test",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z",
		"GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
		"LC_ALL=C",
	}
}

// testGit runs the real git CLI in dir with an isolated environment and
// fails the test on any error.
func testGit(t testing.TB, dir string, stdin []byte, args ...string) []byte {
	t.Helper()
	out, err := testGitErr(dir, stdin, args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return out
}

func testGitErr(dir string, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.Command("git", append([]string{"-c", "init.defaultBranch=main", "-c", "core.autocrlf=false"}, args...)...)
	cmd.Dir = dir
	cmd.Env = testEnv(filepath.Join(os.TempDir(), "conductor-test-nohome"))
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, errb.String())
	}
	return out.Bytes(), nil
}

// newRepo makes an empty repository in a temporary folder.
func newRepo(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	testGit(t, dir, nil, "init", "-q")
	return dir
}

// committedRepo is newRepo with one commit (file f); it returns the
// folder and the commit's id.
func committedRepo(t testing.TB) (string, string) {
	t.Helper()
	repo := newRepo(t)
	if err := os.WriteFile(filepath.Join(repo, "f"), []byte("f\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testGit(t, repo, nil, "add", ".")
	testGit(t, repo, nil, "commit", "-q", "-m", "c")
	return repo, strings.TrimSpace(string(testGit(t, repo, nil, "rev-parse", "HEAD")))
}

// genFile is one file of a generated tree.
type genFile struct {
	mode string // 100644, 100755, 120000
	data []byte
}

// gen produces random but reproducible content changes.
type gen struct {
	rng   *rand.Rand
	files map[string]genFile
	seq   int
}

func newGen(seed int64) *gen {
	return &gen{rng: rand.New(rand.NewSource(seed)), files: map[string]genFile{}}
}

var words = strings.Fields("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi chi psi omega func return if else for")

func (g *gen) textLines(n int, crlf bool) []byte {
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		k := 1 + g.rng.Intn(6)
		if g.rng.Intn(5) == 0 {
			b.WriteString(strings.Repeat(" ", g.rng.Intn(4)))
		}
		if g.rng.Intn(9) == 0 {
			b.WriteByte('\t')
		}
		for j := 0; j < k; j++ {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[g.rng.Intn(len(words))])
		}
		if crlf {
			b.WriteByte('\r')
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func (g *gen) binary(n int) []byte {
	b := make([]byte, n)
	g.rng.Read(b)
	if n > 0 {
		b[0] = 0
	}
	return b
}

func (g *gen) newName() string {
	g.seq++
	dirs := []string{"", "src/", "src/lib/", "docs/", "a b/", "deep/er/still/"}
	return fmt.Sprintf("%sf%03d.txt", dirs[g.rng.Intn(len(dirs))], g.seq)
}

func (g *gen) names() []string {
	ns := make([]string, 0, len(g.files))
	for n := range g.files {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// mutate applies 1..max random changes to the file set and reports the
// renames it made (old → new).
func (g *gen) mutate(max int) map[string]string {
	renames := map[string]string{}
	n := 1 + g.rng.Intn(max)
	for i := 0; i < n; i++ {
		var names []string
		for _, n := range g.names() {
			if !strings.HasPrefix(n, ".git") { // keep .gitignore/.gitattributes as set
				names = append(names, n)
			}
		}
		pick := func() (string, genFile, bool) {
			if len(names) == 0 {
				return "", genFile{}, false
			}
			name := names[g.rng.Intn(len(names))]
			f, ok := g.files[name]
			return name, f, ok
		}
		switch op := g.rng.Intn(14); op {
		case 0, 1: // new text file
			g.files[g.newName()] = genFile{"100644", g.textLines(1+g.rng.Intn(30), g.rng.Intn(6) == 0)}
		case 2: // new empty file
			g.files[g.newName()] = genFile{"100644", nil}
		case 3: // new binary file
			g.files[strings.TrimSuffix(g.newName(), ".txt")+".bin"] = genFile{"100644", g.binary(1 + g.rng.Intn(3000))}
		case 4, 5, 6: // edit text lines
			name, f, ok := pick()
			if !ok || f.mode == "120000" || bytes.IndexByte(f.data, 0) >= 0 {
				continue
			}
			lines := bytes.SplitAfter(f.data, []byte("\n"))
			for k := 0; k < 1+g.rng.Intn(4); k++ {
				at := g.rng.Intn(len(lines) + 1)
				switch g.rng.Intn(3) {
				case 0:
					lines = append(lines[:at], append([][]byte{g.textLines(1+g.rng.Intn(3), false)}, lines[at:]...)...)
				case 1:
					if at < len(lines) {
						lines = append(lines[:at], lines[at+1:]...)
					}
				case 2:
					if at < len(lines) {
						lines[at] = g.textLines(1, g.rng.Intn(3) == 0)
					}
				}
			}
			f.data = bytes.Join(lines, nil)
			g.files[name] = f
		case 7: // whitespace-only change
			name, f, ok := pick()
			if !ok || f.mode == "120000" || bytes.IndexByte(f.data, 0) >= 0 || len(f.data) == 0 {
				continue
			}
			switch g.rng.Intn(3) {
			case 0:
				f.data = bytes.Replace(f.data, []byte(" "), []byte("  "), 1)
			case 1:
				f.data = bytes.Replace(f.data, []byte("\n"), []byte(" \n"), 1)
			case 2:
				f.data = bytes.Replace(f.data, []byte("\n"), []byte("\r\n"), 1)
			}
			g.files[name] = f
		case 8: // toggle the trailing newline
			name, f, ok := pick()
			if !ok || f.mode == "120000" || len(f.data) == 0 {
				continue
			}
			if f.data[len(f.data)-1] == '\n' {
				f.data = f.data[:len(f.data)-1]
			} else {
				f.data = append(append([]byte(nil), f.data...), '\n')
			}
			g.files[name] = f
		case 9: // mode change
			name, f, ok := pick()
			if !ok || f.mode == "120000" {
				continue
			}
			if f.mode == "100644" {
				f.mode = "100755"
			} else {
				f.mode = "100644"
			}
			g.files[name] = f
		case 10: // delete
			name, _, ok := pick()
			if !ok {
				continue
			}
			delete(g.files, name)
		case 11: // rename, maybe with an edit
			name, f, ok := pick()
			if !ok {
				continue
			}
			nn := g.newName()
			delete(g.files, name)
			if g.rng.Intn(2) == 0 && f.mode != "120000" && bytes.IndexByte(f.data, 0) < 0 {
				f.data = append(append([]byte(nil), f.data...), g.textLines(1, false)...)
			}
			g.files[nn] = f
			renames[name] = nn
		case 12: // symlink
			g.files[strings.TrimSuffix(g.newName(), ".txt")+".lnk"] = genFile{"120000", []byte(fmt.Sprintf("target/%d", g.rng.Intn(100)))}
		case 13: // binary edit
			name, f, ok := pick()
			if !ok || bytes.IndexByte(f.data, 0) < 0 {
				continue
			}
			d := append([]byte(nil), f.data...)
			for k := 0; k < 1+g.rng.Intn(20); k++ {
				d[g.rng.Intn(len(d))] = byte(g.rng.Intn(256))
			}
			f.data = d
			g.files[name] = f
		}
	}
	return renames
}

// fastImportCommit appends one commit with the full file set to a
// fast-import stream.
func (g *gen) fastImportCommit(w *bytes.Buffer, mark int, msg string) {
	fmt.Fprintf(w, "commit refs/heads/main\nmark :%d\ncommitter Test <t@example.test> %d +0000\ndata %d\n%s\n", mark, 1767225600+mark, len(msg)+1, msg)
	if mark > 1 {
		fmt.Fprintf(w, "from :%d\n", mark-1)
	}
	w.WriteString("deleteall\n")
	for _, name := range g.names() {
		f := g.files[name]
		fmt.Fprintf(w, "M %s inline %q\ndata %d\n", f.mode, name, len(f.data))
		w.Write(f.data)
		w.WriteByte('\n')
	}
}

// writeTree writes the file set into dir (files, modes, symlinks).
func (g *gen) writeTree(t testing.TB, dir string) {
	t.Helper()
	for _, name := range g.names() {
		f := g.files[name]
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Remove(p)
		switch f.mode {
		case "120000":
			if err := os.Symlink(string(f.data), p); err != nil {
				t.Fatal(err)
			}
		case "100755":
			if err := os.WriteFile(p, f.data, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.WriteFile(p, f.data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
