package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeGen writes a small, valid generation of a warm cache into root (no
// compiling: a few files and their manifest), the sandbox uid's as a
// warming leaves it, and points root/current at it: what the bad-cache
// cases below then break one way each.
func fakeGen(t *testing.T, root string, id identity) string {
	t.Helper()
	gen := filepath.Join(root, genPrefix+"1")
	files := map[string]string{
		"gocache/README":                  "This directory holds cached build artifacts from the Go build system.\n",
		"gocache/ab/ab12-d":               "an object\n",
		"gomodcache/cache/download/x.txt": "a download\n",
	}
	for p, body := range files {
		writeFile(t, filepath.Join(gen, p), body, 0o644)
	}
	l, digest := listDigest(t, gen)
	if l.files != int64(len(files)) {
		t.Fatalf("listGen counted %d files of %d", l.files, len(files))
	}
	m, err := json.Marshal(manifest{Created: time.Now(), UID: id.uid, GID: id.gid, GoVersion: "go-test", Files: l.files, Bytes: l.bytes, Digest: digest})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(gen, manifestName), string(m), 0o644)
	if id.drop {
		if err := handOver(gen, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(genPrefix+"1", filepath.Join(root, "current")); err != nil {
		t.Fatal(err)
	}
	return gen
}

// listDigest lists gen and hashes its content.
func listDigest(t *testing.T, gen string) (genList, string) {
	t.Helper()
	l, err := listGen(gen)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := l.digest()
	if err != nil {
		t.Fatal(err)
	}
	return l, digest
}

// editManifest rewrites gen's manifest through edit.
func editManifest(t *testing.T, gen string, edit func(*manifest)) {
	t.Helper()
	var m manifest
	b, _ := os.ReadFile(filepath.Join(gen, manifestName))
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(&m)
	b, _ = json.Marshal(m)
	writeFile(t, filepath.Join(gen, manifestName), string(b), 0o644)
}

// TestWarmCacheBadFolderRunsCold is issue 23's bad input: a warm cache
// folder that is missing, unreadable or corrupted makes the gate run with
// a cold cache after one warning line naming what is wrong; the gate
// itself runs and passes, and its cache is never in the broken folder.
func TestWarmCacheBadFolderRunsCold(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, root, gen string) // nil: the good generation
		warn  string                               // what the one warning line says ("" for none: the warm cache is used)
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
		{"a file's content changed, same size", func(t *testing.T, root, gen string) {
			writeFile(t, filepath.Join(gen, "gocache", "ab", "ab12-d"), "an abject\n", 0o644)
		}, "corrupted"},
		{"the stamp a named pipe (ignored: the content is hashed)", func(t *testing.T, root, gen string) {
			if err := syscall.Mkfifo(filepath.Join(gen, stampName), 0o644); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"a manifest from before content digests", func(t *testing.T, root, gen string) {
			editManifest(t, gen, func(m *manifest) { m.Digest = "" })
		}, "warm it again"},
		{"warmed for another uid", func(t *testing.T, root, gen string) {
			editManifest(t, gen, func(m *manifest) { m.UID++ })
		}, "warm it again"},
		{"current a folder", func(t *testing.T, root, gen string) {
			os.Remove(filepath.Join(root, "current"))
			if err := os.Mkdir(filepath.Join(root, "current"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "current"},
		// The links below keep every listed file and the manifest as they
		// were: what the manifest does not count must not be used either.
		{"the generation folder a link to a copy elsewhere", func(t *testing.T, root, gen string) {
			moved := filepath.Join(filepath.Dir(root), "elsewhere")
			if err := os.Rename(gen, moved); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(moved, gen); err != nil {
				t.Fatal(err)
			}
		}, "corrupted"},
		{"gomodcache a link, the manifest counting gocache alone", func(t *testing.T, root, gen string) {
			moved := filepath.Join(filepath.Dir(root), "mods")
			if err := os.Rename(filepath.Join(gen, "gomodcache"), moved); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(moved, filepath.Join(gen, "gomodcache")); err != nil {
				t.Fatal(err)
			}
			editManifest(t, gen, func(m *manifest) {
				m.Files, m.Bytes, m.Digest = 2, 0, ""
				var l genList
				for _, p := range []string{"gocache/README", "gocache/ab/ab12-d"} {
					fi, err := os.Stat(filepath.Join(gen, p))
					if err != nil {
						t.Fatal(err)
					}
					l.rel, m.Bytes = append(l.rel, p), m.Bytes+fi.Size()
				}
				l.dir = gen
				d, err := l.digest()
				if err != nil {
					t.Fatal(err)
				}
				m.Digest = d
			})
		}, "corrupted"},
		{"a link among the cache files", func(t *testing.T, root, gen string) {
			if err := os.Symlink("/tmp/poison", filepath.Join(gen, "gocache", "ab", "ab13-d")); err != nil {
				t.Fatal(err)
			}
		}, "corrupted"},
		// A copy that did not keep owners or modes: the content is as
		// warmed, but go could not write its build cache (seen: the
		// docker backend's gate failed, "failed to initialize build
		// cache ... permission denied").
		{"owned by root, as a copy by root leaves it", func(t *testing.T, root, gen string) {
			ownGenByRoot(t, gen)
		}, "warm it again"},
		{"a build cache folder its owner may not write", func(t *testing.T, root, gen string) {
			if err := os.Chmod(filepath.Join(gen, "gocache", "ab"), 0o555); err != nil {
				t.Fatal(err)
			}
		}, "warm it again"},
		{"a named pipe among the cache files", func(t *testing.T, root, gen string) {
			if err := syscall.Mkfifo(filepath.Join(gen, "gocache", "ab", "ab14-d"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "corrupted"},
	} {
		for _, backend := range []string{BackendBwrap, BackendDocker} {
			t.Run(backend+"/"+c.name, func(t *testing.T) {
				badCacheGate(t, backend, c.spoil, c.warn)
			})
		}
	}
}

// warmBox opens backend with the warm cache folder root; its warnings go
// to the returned buffer.
func warmBox(t *testing.T, backend, root string) (Sandbox, identity, *bytes.Buffer) {
	t.Helper()
	warn := &bytes.Buffer{}
	mod := func(o *Options) { o.GoCache, o.GoCacheExplicit, o.Warn = root, true, warn }
	if backend == BackendBwrap {
		b := bwrapBox(t, mod)
		return b, b.warm.id, warn
	}
	d := dockerBox(t, mod)
	return d, d.warm.id, warn
}

// oneColdWarning fails unless warn holds exactly one line, saying the
// command runs with a cold cache and naming want.
func oneColdWarning(t *testing.T, warn *bytes.Buffer, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(warn.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "running with a cold cache") || !strings.Contains(lines[0], want) {
		t.Fatalf("want one warning line saying %q; got:\n%s", want, warn.String())
	}
}

// badCacheGate runs one case of TestWarmCacheBadFolderRunsCold on backend.
func badCacheGate(t *testing.T, backend string, spoil func(t *testing.T, root, gen string), want string) {
	base := worktree(t)
	root := filepath.Join(base, "warm")
	sb, id, warn := warmBox(t, backend, root)
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
	if want == "" {
		if warn.Len() > 0 {
			t.Fatalf("warnings with a good cache: %s", warn.String())
		}
		if !strings.Contains(g.out, warmDirName) {
			t.Fatalf("a good generation was not used; the gate's caches:\n%s", g.out)
		}
		return
	}
	oneColdWarning(t, warn, want)
	if strings.Contains(g.out, warmDirName) || strings.Contains(g.out, root) {
		t.Fatalf("the gate ran with the broken warm cache:\n%s", g.out)
	}
}

// TestWarmGoLeavesNoLitter: a warming removes what crashed warmings left
// (a half-made gen-N.tmp clone: each warming names its own, so nothing else
// ever would) and old generations even when one's manifest is a named pipe
// (it used to hold the warming for ever at the prune), and leaves nothing
// of its own behind: its last go command (go version, for the manifest)
// ran after the warming's HOME was removed and made it again, with go's
// telemetry files, after the folder had become the generation: a stray
// gen-N.tmp at every warming.
func TestWarmGoLeavesNoLitter(t *testing.T) {
	base := worktree(t)
	root := filepath.Join(base, "warm")
	writeFile(t, filepath.Join(root, genPrefix+"1.tmp", "gocache", "ab", "ab12-d"), "a crashed warming's\n", 0o644)
	pipeGen := filepath.Join(root, genPrefix+"2")
	if err := os.MkdirAll(pipeGen, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(pipeGen, manifestName), 0o644); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(base, "tree")
	writeFile(t, filepath.Join(tree, "go.mod"), "module example.com/litter\n\ngo 1.22\n", 0o644)
	host := map[string]string{"PATH": strings.TrimPrefix(testPath, "PATH="), "GOMODCACHE": filepath.Join(base, "no-host-modcache")}
	var log bytes.Buffer
	res, err := WarmGo(context.Background(), WarmOptions{Tree: tree, Getenv: func(k string) string { return host[k] }, Sandbox: Options{GoCache: root}, Log: &log, Label: "litter"})
	if err != nil {
		t.Fatalf("warming: %v\n%s", err, log.String())
	}
	// Anything outliving a go command writes within moments; a slow
	// machine can only make this check pass, never fail.
	time.Sleep(2 * time.Second)
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	// The warming recorded the stamp: the first gate does not hash the
	// generation again.
	l, err := listGen(res.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if readStamp(filepath.Join(res.Dir, stampName)) != l.stamp {
		t.Error("the warming did not record its generation's stamp")
	}
	want := []string{"current", filepath.Base(res.Dir), "warm.lock"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		out, _ := exec.Command("find", root, "-path", "*.tmp*").CombinedOutput()
		t.Fatalf("the cache folder holds %v after warming, want %v\n%s", names, want, out)
	}
}

// TestWarmCacheStampSeesLaterWrites: a generation's content is hashed
// before use unless its stamp (every file's size, inode and change times,
// recorded once its content matched the manifest) says nothing was written
// since. A write after the stamp, even one that keeps the size and puts the
// modification time back, is caught; a generation written moments ago is
// not stamped (its change times may not move again within the clock's
// tick).
func TestWarmCacheStampSeesLaterWrites(t *testing.T) {
	id := identity{uid: os.Getuid(), gid: os.Getgid()}
	root := filepath.Join(t.TempDir(), "warm")
	gen := fakeGen(t, root, id)
	stamp := filepath.Join(gen, stampName)
	open := func() error {
		g, err := openGen(root, id, true)
		if err == nil {
			g.release()
		}
		return err
	}
	if err := open(); err != nil {
		t.Fatal(err)
	}
	if exists(stamp) {
		t.Fatal("a generation written moments ago was stamped")
	}
	time.Sleep(stampSettle + 100*time.Millisecond)
	if err := open(); err != nil {
		t.Fatal(err)
	}
	if !exists(stamp) {
		t.Fatal("a settled generation that matched its manifest was not stamped")
	}
	if err := open(); err != nil {
		t.Fatalf("a stamped generation: %v", err)
	}
	// Same size, the modification time put back.
	obj := filepath.Join(gen, "gocache", "ab", "ab12-d")
	fi, err := os.Stat(obj)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, obj, "an abject\n", 0o644)
	if err := os.Chtimes(obj, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := open(); err == nil || !strings.Contains(err.Error(), "corrupted") {
		t.Fatalf("a write after the stamp was not seen: %v", err)
	}
}

// TestWarmGoHashesWhatItCopies: rot below the file system keeps a file's
// metadata, so a gate trusts the generation's stamp; a warming does not: it
// hashes the generation it would copy in full and, when that no longer
// matches, warms from empty instead of building on the rot and recording
// it in a new digest.
func TestWarmGoHashesWhatItCopies(t *testing.T) {
	base := worktree(t)
	root := filepath.Join(base, "warm")
	so := Options{GoCache: root}
	id, err := so.identity()
	if err != nil {
		t.Fatal(err)
	}
	gen := fakeGen(t, root, id)
	writeFile(t, filepath.Join(gen, "gocache", "ab", "ab12-d"), "an abject\n", 0o644)
	l, err := listGen(gen) // the stamp as if the rot had moved no ctime
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(gen, stampName), l.stamp, 0o600)
	g, err := openGen(root, id, true)
	if err != nil {
		t.Fatalf("a gate does not trust the stamp: %v", err)
	}
	g.release()

	tree := filepath.Join(base, "tree")
	writeFile(t, filepath.Join(tree, "go.mod"), "module example.com/rot\n\ngo 1.22\n", 0o644)
	host := map[string]string{"PATH": strings.TrimPrefix(testPath, "PATH="), "GOMODCACHE": filepath.Join(base, "no-host-modcache")}
	var log bytes.Buffer
	res, err := WarmGo(context.Background(), WarmOptions{Tree: tree, Getenv: func(k string) string { return host[k] }, Sandbox: so, Log: &log, Label: "rot"})
	if err != nil {
		t.Fatalf("warming: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "not reused") || !strings.Contains(log.String(), "corrupted") {
		t.Errorf("the warming did not say why it started from empty:\n%s", log.String())
	}
	if exists(filepath.Join(res.Dir, "gocache", "ab", "ab12-d")) {
		t.Fatal("the warming copied the rotten generation")
	}
}

// TestWarmCacheFullLayerFolderRunsCold is issue 23's "full": the folder a
// gate's writable layer lives in ($TMPDIR/conductor-warm-UID) has a few
// KiB left. The layer could be made, but the gate's own compiling then
// failed in it (no space left on device): the gate failed because of the
// cache. It now runs cold, in its scratch folder, after one warning.
func TestWarmCacheFullLayerFolderRunsCold(t *testing.T) {
	for _, backend := range []string{BackendBwrap, BackendDocker} {
		t.Run(backend, func(t *testing.T) {
			base := worktree(t)
			tmp := filepath.Join(base, "small-tmp")
			if err := os.Mkdir(tmp, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mount("tmpfs", tmp, "tmpfs", 0, "size=4m,mode=1777"); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("mount a small tmpfs (the test needs root): %v", err)
				}
				t.Skipf("cannot mount a small tmpfs here: %v", err)
			}
			t.Cleanup(func() { syscall.Unmount(tmp, syscall.MNT_DETACH) })
			// Nearly full: 64 KiB left, enough for the layer's folders and
			// files, not for compiling.
			var st syscall.Statfs_t
			if err := syscall.Statfs(tmp, &st); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(tmp, "fill"), strings.Repeat("x", int(st.Bavail)*int(st.Bsize)-64<<10), 0o644)

			root := filepath.Join(base, "warm")
			sb, id, warn := warmBox(t, backend, root)
			gen := fakeGen(t, root, id)
			if id.drop { // as warming leaves it: the sandbox uid's
				if err := handOver(gen, id); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("TMPDIR", tmp) // where the layers go (the sandbox's test tool is built)
			if r := ProbeWarm(Options{GoCache: root, GoCacheExplicit: true}, backend); r.Works || !strings.Contains(r.Detail, "full") {
				t.Errorf("conductor doctor's probe does not say the layer folder is full: %+v", r)
			}
			tree := filepath.Join(base, "tree")
			writeFile(t, filepath.Join(tree, "go.mod"), "module example.com/full\n\ngo 1.22\n", 0o644)
			writeFile(t, filepath.Join(tree, "main.go"), "package main\n\nfunc main() {}\n", 0o644)
			goBuildRunsCold(t, sb, tree, warn, "full")
		})
	}
}

// ownGenByRoot gives the generation's caches to root, as a copy by root
// that did not keep owners leaves them (skipped unless the test runs as
// root: the sandbox then runs as the test's own uid).
func ownGenByRoot(t *testing.T, gen string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the sandbox runs as the conductor's own uid: nothing else to own the cache")
	}
	for _, c := range []string{"gocache", "gomodcache"} {
		if out, err := exec.Command("chown", "-R", "0:0", filepath.Join(gen, c)).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v: %s", err, out)
		}
	}
}

// goBuildRunsCold runs `go build ./...` in tree as a gate: it must pass,
// with one warning naming why the warm cache was not used.
func goBuildRunsCold(t *testing.T, sb Sandbox, tree string, warn *bytes.Buffer, why string) {
	t.Helper()
	host := map[string]string{"PATH": strings.TrimPrefix(testPath, "PATH=")}
	g := warmGate(t, sb, tree, func(k string) string { return host[k] }, "go", "build", "./...")
	if g.err != nil || g.res.ExitCode != 0 {
		t.Fatalf("the gate failed because of the cache (%s; exit %d, %v):\n%s", why, g.res.ExitCode, g.err, g.out)
	}
	oneColdWarning(t, warn, why)
}
