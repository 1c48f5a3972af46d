package patch

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/conductor-dev/conductor/patch/git"
)

// samplePatches are the diffs in testdata/patches (canonical extract form,
// format-patch series, log -p, show).
func samplePatches(t testing.TB) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "testdata", "patches", "*"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no sample patches: %v", err)
	}
	out := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = b
	}
	return out
}

func TestSamplePatchesMatchGit(t *testing.T) {
	requireGit(t)
	for name, b := range samplePatches(t) {
		t.Run(name, func(t *testing.T) {
			assertSameAsGit(t, b)
			for _, m := range allModes {
				if _, err := strictIDs(b, m); err != nil {
					t.Errorf("strict %s: %v", m, err)
				}
			}
		})
	}
}

// fuzzSeeds adds the sample patches and some edge cases.
func fuzzSeeds(f *testing.F) {
	for _, b := range samplePatches(f) {
		f.Add(b)
	}
	for _, s := range []string{
		"",
		"diff --git a/x b/x\nold mode 100644\nnew mode 100755\n",
		"diff --git a/b b/b\nindex 1..2\nGIT binary patch\nliteral 5\nIcmZpX0000H00RI3\n\n",
		"commit 1111111111111111111111111111111111111111\ndiff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n",
		"diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1,999999999999 +1,-5 @@\n-a\n",
		"diff --git a/../../etc/passwd b/../../etc/passwd\nnew file mode 100644\n--- /dev/null\n+++ b/../../etc/passwd\n@@ -0,0 +1 @@\n+x\n",
	} {
		f.Add([]byte(s))
	}
}

// FuzzPatchID: PatchID never panics, and strict mode, when it accepts an
// input, gives exactly the lenient (git) ids.
func FuzzPatchID(f *testing.F) {
	fuzzSeeds(f)
	// CONDUCTOR_FUZZ_GIT=1 also compares every input with git patch-id
	// (slow: three git processes per input).
	diffGit := os.Getenv("CONDUCTOR_FUZZ_GIT") != ""
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, m := range allModes {
			var lenient bytes.Buffer
			if err := WritePatchIDTo(&lenient, bytes.NewReader(data), m); err != nil {
				t.Fatalf("lenient %s: %v", m, err)
			}
			if diffGit {
				if want := gitPatchIDs(t, data, m); !bytes.Equal(lenient.Bytes(), want) {
					t.Fatalf("%s: got\n%s\ngit says\n%s", m, lenient.Bytes(), want)
				}
			}
			strict, err := strictIDs(data, m)
			if err == nil && !bytes.Equal(strict, lenient.Bytes()) {
				t.Fatalf("strict %s ids differ from lenient ids", m)
			}
		}
	})
}

// TestWriteFuzzCorpus rewrites testdata/fuzz from the seeds when
// CONDUCTOR_UPDATE is set, so `go test` replays them as regression inputs.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("CONDUCTOR_UPDATE") == "" {
		t.Skip("set CONDUCTOR_UPDATE=1 to rewrite testdata/fuzz")
	}
	for _, target := range []string{"FuzzPatchID"} {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range samplePatches(t) {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(b)))
			if err := os.WriteFile(filepath.Join(dir, "seed-"+name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// FuzzIndexSeedable: the index scanner never panics or reads past the file,
// whatever the bytes (the seeds are real git indexes of versions 2 to 4).
func FuzzIndexSeedable(f *testing.F) {
	requireGit(f)
	repo := newRepo(f)
	for i := 0; i < 5; i++ {
		os.WriteFile(filepath.Join(repo, fmt.Sprintf("f%d", i)), []byte{byte(i)}, 0o644)
	}
	testGit(f, repo, nil, "add", ".")
	for _, v := range []string{"2", "3", "4"} {
		testGit(f, repo, nil, "update-index", "--index-version", v)
		testGit(f, repo, nil, "update-index", "--skip-worktree", "f1")
		b, err := os.ReadFile(filepath.Join(repo, ".git", "index"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		testGit(f, repo, nil, "update-index", "--no-skip-worktree", "f1")
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		git.IndexSeedable(b)
	})
}

// FuzzIndexEntries: the index reader behind IndexGitlinks never panics or
// loops, on real indexes of versions 2 to 4 with gitlinks and on garbage.
func FuzzIndexEntries(f *testing.F) {
	requireGit(f)
	repo := newRepo(f)
	os.MkdirAll(filepath.Join(repo, "d"), 0o755)
	for i := 0; i < 3; i++ {
		os.WriteFile(filepath.Join(repo, "d", fmt.Sprintf("f%d", i)), []byte{byte(i)}, 0o644)
	}
	testGit(f, repo, nil, "add", ".")
	testGit(f, repo, nil, "update-index", "--add", "--cacheinfo", "160000,1111111111111111111111111111111111111111,d/sub")
	for _, v := range []string{"2", "3", "4"} {
		testGit(f, repo, nil, "update-index", "--index-version", v)
		b, err := os.ReadFile(filepath.Join(repo, ".git", "index"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		git.IndexEntries(b, func(uint32, string) { n++ })
		if n > len(b) {
			t.Fatalf("%d entries from %d bytes", n, len(b))
		}
	})
}

// FuzzEscapePath: an escaped path is always safe to print, and a safe one
// is left as it is.
func FuzzEscapePath(f *testing.F) {
	for _, s := range []string{"plain/path.go", "a\x1b]52;c;aGk=\x07b", "\xff\xfe", "c1\u0085", "back\\slash\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := EscapePath(s)
		if !SafeName(e) {
			t.Fatalf("EscapePath(%q) = %q is not safe", s, e)
		}
		if SafeName(s) != (e == s) {
			t.Fatalf("EscapePath(%q) = %q, SafeName %v", s, e, SafeName(s))
		}
	})
}
