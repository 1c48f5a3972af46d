package patch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/patch/git"
)

// hazardTree makes a worktree-like folder holding one of each hazard, and
// files that are not hazards.
func hazardTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	mk := func(p, body string) {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk(".git", "gitdir: /elsewhere\n") // the worktree's own link: not a hazard
	mk("ok/file.go", "package ok\n")
	mk("sub/.git/config", "[filter \"evil\"]\n\tclean = touch /nope\n")
	mk("deep/er/.git", "gitdir: /somewhere\n")
	mk("pkg/nest/.git/objects/x", "")
	if err := syscall.Mkfifo(filepath.Join(dir, "pkg", "nest", ".git", "HEAD"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "ok", "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 { // a device (as /dev/null): only root can make one
		if err := syscall.Mknod(filepath.Join(dir, "ok", "null"), syscall.S_IFCHR|0o644, 1<<8|3); err != nil {
			t.Fatal(err)
		}
	}
	mk("bad\x1b]52;c;aGk=\x07name", "x")
	mk("inv\xffalid/f", "x")
	if err := os.Symlink("/", filepath.Join(dir, "root-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ok", filepath.Join(dir, "linkdir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(dir, "ok", ".git")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func hazardStrings(hs []Hazard) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Code+" "+h.Path)
	}
	return out
}

// TestScanWorktree: every nested .git (folder, file, link), special file
// and unsafe name is found, with escaped paths; links are not followed
// and the worktree's own .git is not a hazard. With Remove, nested .git
// entries and special files are gone and nothing else is touched.
func TestScanWorktree(t *testing.T) {
	want := []string{
		`unsafe-path-name bad\x1b]52;c;aGk=\x07name`,
		"nested-repository deep/er/.git",
		`unsafe-path-name inv\xffalid`,
		"nested-repository ok/.git",
		"special-file ok/null",
		"special-file ok/pipe",
		"nested-repository pkg/nest/.git",
		"nested-repository sub/.git",
	}
	if os.Geteuid() != 0 {
		want = slices.DeleteFunc(want, func(s string) bool { return s == "special-file ok/null" })
	}
	for _, remove := range []bool{false, true} {
		dir := hazardTree(t)
		hs, err := ScanWorktree(dir, ScanOptions{Remove: remove})
		if err != nil {
			t.Fatal(err)
		}
		if got := hazardStrings(hs); !slices.Equal(got, want) {
			t.Fatalf("remove=%v: hazards\n%s\nwant\n%s", remove, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		for _, h := range hs {
			if !SafeName(h.Path) || h.Detail == "" {
				t.Fatalf("hazard %+v: unsafe path or no detail", h)
			}
		}
		gone := []string{"sub/.git", "deep/er/.git", "pkg/nest/.git", "ok/pipe", "ok/.git"}
		kept := []string{".git", "ok/file.go", "pkg/nest", "bad\x1b]52;c;aGk=\x07name", "inv\xffalid/f", "root-link", "linkdir"}
		for _, p := range gone {
			_, err := os.Lstat(filepath.Join(dir, p))
			if remove != os.IsNotExist(err) {
				t.Fatalf("remove=%v: %s: %v", remove, p, err)
			}
		}
		for _, p := range kept {
			if _, err := os.Lstat(filepath.Join(dir, p)); err != nil {
				t.Fatalf("remove=%v: %s was touched: %v", remove, p, err)
			}
		}
		if _, err := os.Stat("/etc/passwd"); err != nil {
			t.Fatal("the scan followed ok/.git -> /etc and removed through it")
		}
	}
	// A clean tree has no hazards.
	clean := t.TempDir()
	if err := os.WriteFile(filepath.Join(clean, "a"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if hs, err := ScanWorktree(clean, ScanOptions{Remove: true}); err != nil || len(hs) != 0 {
		t.Fatalf("clean tree: %v %v", hs, err)
	}
}

func TestEscapePath(t *testing.T) {
	for in, want := range map[string]string{
		"plain/path.go":    "plain/path.go",
		"héllo":            "héllo",
		"a\x1bb":           `a\x1bb`,
		"a\nb\\c":          `a\x0ab\\c`,
		"\xff\xfe":         `\xff\xfe`,
		"c1\u0085":         `c1\x85`,
		"back\\slash-only": "back\\slash-only",
	} {
		if got := EscapePath(in); got != want {
			t.Errorf("EscapePath(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestIndexGitlinks reads the submodule entries of index versions 2 to 4.
func TestIndexGitlinks(t *testing.T) {
	requireGit(t)
	repo, _ := committedRepo(t)
	for _, p := range []string{"vendor/lib", "vendor/libb", "z/sub"} {
		testGit(t, repo, nil, "update-index", "--add", "--cacheinfo", "160000,1111111111111111111111111111111111111111,"+p)
	}
	for _, v := range []string{"2", "3", "4"} {
		testGit(t, repo, nil, "update-index", "--index-version", v)
		if v == "3" {
			testGit(t, repo, nil, "update-index", "--skip-worktree", "f")
		}
		got, err := IndexGitlinks(filepath.Join(repo, ".git", "index"))
		if err != nil {
			t.Fatalf("version %s: %v", v, err)
		}
		if want := []string{"vendor/lib", "vendor/libb", "z/sub"}; !slices.Equal(got, want) {
			t.Fatalf("version %s: %q, want %q", v, got, want)
		}
	}
	if _, err := IndexGitlinks(filepath.Join(repo, "f")); err == nil {
		t.Fatal("a file that is not an index parsed")
	}
}

// TestGitDeadline: a git child that blocks (here on a named pipe where a
// repository's HEAD should be) is killed at its deadline even when the
// caller's context has none, with a clear error, and so is everything it
// started (its process group).
func TestGitDeadline(t *testing.T) {
	requireGit(t)
	dir := t.TempDir()
	for _, d := range []string{"objects", "refs"} {
		if err := os.MkdirAll(filepath.Join(dir, "nest", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "nest", "HEAD"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := Git{GitDir: filepath.Join(dir, "nest"), Timeout: 200 * time.Millisecond}
	_, err := g.Run(context.Background(), "rev-parse", "HEAD")
	var ge *git.GitError
	if !errors.As(err, &ge) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("blocked git: %v", err)
	}

	// A child of git (an alias runs a shell) that would outlive it.
	repo := newRepo(t)
	token := "conductor-deadline-token-" + filepath.Base(repo)
	g = Git{GitDir: filepath.Join(repo, ".git"), WorkTree: repo, Timeout: 300 * time.Millisecond,
		Config: []string{"alias.hang=!sh -c 'sleep 1000; :' " + token + " & sleep 1000; :"}}
	_, err = g.Run(context.Background(), "hang")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hanging alias: %v", err)
	}
	if pids := processesAfterGrace(token); len(pids) > 0 {
		t.Fatalf("git's children survived its deadline: %v", pids)
	}
	// Started has the same deadline.
	s := g.Start(context.Background(), "hang")
	if err := s.Send(""); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("started hanging alias: %v", err)
	}
}

// processesAfterGrace is processesWith once killed processes had a moment
// to go (the kernel ends them asynchronously).
func processesAfterGrace(s string) []string {
	for i := 0; ; i++ {
		pids := processesWith(s)
		if len(pids) == 0 || i == 100 {
			return pids
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processesWith lists processes whose command line contains s.
func processesWith(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestExtractSubmoduleFromBase: a worker that turns an uninitialised
// submodule's folder into a repository whose filter runs a program, and
// plants a nested repository with a named pipe for HEAD elsewhere, gets
// neither into the diff; no program runs, git does not block, the
// hazards are reported and the gitlink stays the base's.
func TestExtractSubmoduleFromBase(t *testing.T) {
	requireGit(t)
	repo, _ := committedRepo(t)
	testGit(t, repo, nil, "update-index", "--add", "--cacheinfo", "160000,1111111111111111111111111111111111111111,vendor/lib")
	testGit(t, repo, nil, "commit", "-q", "-m", "submodule")
	base := strings.TrimSpace(string(testGit(t, repo, nil, "rev-parse", "HEAD")))
	wt := filepath.Join(t.TempDir(), "wt")
	testGit(t, repo, nil, "worktree", "add", "-q", "--detach", wt, base)
	trap := t.TempDir()
	marker := filepath.Join(trap, "ran")
	sub := filepath.Join(wt, "vendor", "lib")
	testGit(t, sub, nil, "init", "-q")
	if err := os.WriteFile(filepath.Join(sub, "f.txt"), []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testGit(t, sub, nil, "add", "f.txt")
	testGit(t, sub, nil, "config", "filter.evil.clean", "touch "+marker+"; cat")
	testGit(t, sub, nil, "config", "core.fsmonitor", "touch "+marker)
	if err := os.WriteFile(filepath.Join(sub, ".gitattributes"), []byte("* filter=evil\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	os.Chtimes(filepath.Join(sub, "f.txt"), old, old)
	for _, d := range []string{"pkg/nest/.git/objects", "pkg/nest/.git/refs"} {
		if err := os.MkdirAll(filepath.Join(wt, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(wt, "pkg", "nest", ".git", "HEAD"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wt, "pkg", "nest", "n.go"), []byte("package nest\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	ex, err := Extract(context.Background(), ExtractOptions{Repo: Git{GitDir: privateGitDir(t, repo)}, WorkTree: wt, Base: base, Out: &out, RemoveHazards: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the submodule's filter ran")
	}
	if got, want := hazardStrings(ex.Hazards), []string{"nested-repository pkg/nest/.git", "nested-repository vendor/lib/.git"}; !slices.Equal(got, want) {
		t.Fatalf("hazards %q, want %q", got, want)
	}
	if !slices.Equal(ex.Files, []string{"pkg/nest/n.go"}) || strings.Contains(out.String(), "secret") {
		t.Fatalf("files %q\n%s", ex.Files, out.String())
	}
	// The tree keeps the base's gitlink.
	ls := string(testGit(t, repo, nil, "ls-tree", ex.Tree, "vendor/lib"))
	if !strings.HasPrefix(ls, "160000 commit 1111111111111111111111111111111111111111") {
		t.Fatalf("gitlink in the extracted tree: %q", ls)
	}
	// The same with the worker's folder replaced by a file.
	os.RemoveAll(sub)
	if err := os.WriteFile(sub, []byte("not a folder\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ex, err = Extract(context.Background(), ExtractOptions{Repo: Git{GitDir: privateGitDir(t, repo)}, WorkTree: wt, Base: base, RemoveHazards: true})
	if err != nil || !slices.Equal(ex.Files, []string{"pkg/nest/n.go"}) {
		t.Fatalf("gitlink replaced by a file: %q %v", ex.Files, err)
	}
}
