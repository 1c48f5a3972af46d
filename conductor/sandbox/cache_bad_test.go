package sandbox

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeGen writes a small, valid generation of a warm cache into root (no
// compiling: a few files and their manifest) and points root/current at
// it: what the bad-cache cases below then break one way each.
func fakeGen(t *testing.T, root string, id identity) string {
	t.Helper()
	gen := filepath.Join(root, genPrefix+"1")
	files := map[string]string{
		"gocache/README":                  "This directory holds cached build artifacts from the Go build system.\n",
		"gocache/ab/ab12-d":               "an object\n",
		"gomodcache/cache/download/x.txt": "a download\n",
	}
	var n, size int64
	for p, body := range files {
		writeFile(t, filepath.Join(gen, p), body, 0o644)
		n, size = n+1, size+int64(len(body))
	}
	m, err := json.Marshal(manifest{Created: time.Now(), UID: id.uid, GID: id.gid, GoVersion: "go-test", Files: n, Bytes: size})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(gen, manifestName), string(m), 0o644)
	if err := os.Symlink(genPrefix+"1", filepath.Join(root, "current")); err != nil {
		t.Fatal(err)
	}
	return gen
}

// TestWarmCacheBadFolderRunsCold is issue 23's bad input: a warm cache
// folder that is missing, unreadable or corrupted makes the gate run with
// a cold cache after one warning line naming what is wrong; the gate
// itself runs and passes, and its cache is never in the broken folder.
func TestWarmCacheBadFolderRunsCold(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, root, gen string) // nil: the good generation
		warn  string                               // what the one warning line says ("" for none)
	}{
		{"good generation", nil, ""},
		{"missing folder", func(t *testing.T, root, gen string) {
			if err := os.RemoveAll(root); err != nil {
				t.Fatal(err)
			}
		}, "holds no warm cache"},
		{"current names no generation", func(t *testing.T, root, gen string) {
			os.Remove(filepath.Join(root, "current"))
			if err := os.Symlink("../../etc", filepath.Join(root, "current")); err != nil {
				t.Fatal(err)
			}
		}, "not a generation: corrupted"},
		{"current dangles", func(t *testing.T, root, gen string) {
			os.Remove(filepath.Join(root, "current"))
			if err := os.Symlink(genPrefix+"9", filepath.Join(root, "current")); err != nil {
				t.Fatal(err)
			}
		}, genPrefix + "9"},
		{"manifest not JSON", func(t *testing.T, root, gen string) {
			writeFile(t, filepath.Join(gen, manifestName), "{\"files\": 3, \"by", 0o644)
		}, "corrupted"},
		{"manifest unreadable (a folder)", func(t *testing.T, root, gen string) {
			os.Remove(filepath.Join(gen, manifestName))
			if err := os.Mkdir(filepath.Join(gen, manifestName), 0o755); err != nil {
				t.Fatal(err)
			}
		}, manifestName},
		{"manifest a named pipe nobody writes", func(t *testing.T, root, gen string) {
			os.Remove(filepath.Join(gen, manifestName))
			if err := syscall.Mkfifo(filepath.Join(gen, manifestName), 0o644); err != nil {
				t.Fatal(err)
			}
		}, manifestName},
		{"a file gone", func(t *testing.T, root, gen string) {
			if err := os.Remove(filepath.Join(gen, "gocache", "ab", "ab12-d")); err != nil {
				t.Fatal(err)
			}
		}, "corrupted"},
		{"a file cut short", func(t *testing.T, root, gen string) {
			writeFile(t, filepath.Join(gen, "gomodcache", "cache", "download", "x.txt"), "a", 0o644)
		}, "corrupted"},
		{"warmed for another uid", func(t *testing.T, root, gen string) {
			var m manifest
			b, _ := os.ReadFile(filepath.Join(gen, manifestName))
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			m.UID++
			b, _ = json.Marshal(m)
			writeFile(t, filepath.Join(gen, manifestName), string(b), 0o644)
		}, "warm it again"},
	} {
		for _, backend := range []string{BackendBwrap, BackendDocker} {
			t.Run(backend+"/"+c.name, func(t *testing.T) {
				badCacheGate(t, backend, c.spoil, c.warn)
			})
		}
	}
}

// badCacheGate runs one case of TestWarmCacheBadFolderRunsCold on backend.
func badCacheGate(t *testing.T, backend string, spoil func(t *testing.T, root, gen string), want string) {
	base := worktree(t)
	root := filepath.Join(base, "warm")
	var warn bytes.Buffer
	mod := func(o *Options) { o.GoCache, o.GoCacheExplicit, o.Warn = root, true, &warn }
	var sb Sandbox
	var id identity
	if backend == BackendBwrap {
		b := bwrapBox(t, mod)
		sb, id = b, b.warm.id
	} else {
		d := dockerBox(t, mod)
		sb, id = d, d.warm.id
	}
	gen := fakeGen(t, root, id)
	if spoil != nil {
		spoil(t, root, gen)
	}
	tree := filepath.Join(base, "tree")
	writeFile(t, filepath.Join(tree, "go.mod"), "module example.com/cold\n\ngo 1.22\n", 0o644)
	host := map[string]string{"PATH": strings.TrimPrefix(testPath, "PATH=")}
	getenv := func(k string) string { return host[k] }
	// A gate that waits on the cache folder (a pipe's open) never
	// returns: the test binary's own timeout names it.
	g := warmGate(t, sb, tree, getenv, "go", "env", "GOCACHE", "GOMODCACHE")
	if g.err != nil || g.res.ExitCode != 0 {
		t.Fatalf("the gate failed because of the cache (exit %d, %v):\n%s", g.res.ExitCode, g.err, g.out)
	}
	lines := strings.Split(strings.TrimSpace(warn.String()), "\n")
	if want == "" {
		if warn.Len() > 0 {
			t.Fatalf("warnings with a good cache: %s", warn.String())
		}
		if !strings.Contains(g.out, warmDirName) {
			t.Fatalf("a good generation was not used; the gate's caches:\n%s", g.out)
		}
		return
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "running with a cold cache") || !strings.Contains(lines[0], want) {
		t.Fatalf("want one warning line saying %q; got:\n%s", want, warn.String())
	}
	if strings.Contains(g.out, warmDirName) || strings.Contains(g.out, root) {
		t.Fatalf("the gate ran with the broken warm cache:\n%s", g.out)
	}
}
