package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// cacheModule writes a small module: lib.V() returns v, lib's test wants
// want; with attack, a package whose test poisons every cache it can
// write (each file of GOCACHE and GOMODCACHE overwritten with garbage of
// the same size, a file dropped in each, the host's own cache tried too).
func cacheModule(t *testing.T, dir string, v, want int, attack bool, hostCache string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "go.mod"), "module example.com/warm\n\ngo 1.22\n", 0o644)
	writeFile(t, filepath.Join(dir, "lib", "lib.go"), fmt.Sprintf("package lib\n\nfunc V() int { return %d }\n", v), 0o644)
	writeFile(t, filepath.Join(dir, "lib", "lib_test.go"), fmt.Sprintf(`package lib

import "testing"

func TestV(t *testing.T) {
	if got := V(); got != %d {
		t.Fatalf("V() = %%d, want %d", got)
	}
}
`, want, want), 0o644)
	if !attack {
		return
	}
	writeFile(t, filepath.Join(dir, "attack", "attack.go"), "package attack\n", 0o644)
	writeFile(t, filepath.Join(dir, "attack", "attack_test.go"), fmt.Sprintf(`package attack

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestPoison(t *testing.T) {
	n := 0
	for _, v := range []string{"GOCACHE", "GOMODCACHE"} {
		dir := os.Getenv(v)
		if dir == "" {
			t.Fatalf("%%s unset", v)
		}
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			os.Chmod(p, 0o644)
			garbage := make([]byte, fi.Size())
			for i := range garbage {
				garbage[i] = 'X'
			}
			if os.WriteFile(p, garbage, 0o644) == nil {
				n++
			}
			return nil
		})
		os.MkdirAll(filepath.Join(dir, "planted"), 0o755)
		os.WriteFile(filepath.Join(dir, "planted", "poison"), []byte("poison"), 0o644)
	}
	os.WriteFile(filepath.Join(%q, "poison"), []byte("poison"), 0o644)
	t.Logf("poisoned %%d cache files", n)
	if n == 0 {
		t.Fatal("no cache file to poison: the cache was not warm")
	}
}
`, hostCache), 0o644)
}

// treeSum hashes every path, mode and content under dir (a generation),
// but its verified stamp, which the conductor writes once a gate has
// checked the generation's content.
func treeSum(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == filepath.Join(dir, stampName) {
			return nil
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	for _, p := range paths {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %v %d\n", strings.TrimPrefix(p, dir), fi.Mode(), fi.Size())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func hostGoCache(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

type gateRun struct {
	res Result
	err error
	out string
}

// warmGate runs argv as a gate on tree in sb with a fresh scratch folder.
func warmGate(t *testing.T, sb Sandbox, tree string, getenv func(string) string, argv ...string) gateRun {
	t.Helper()
	root := filepath.Join(filepath.Dir(tree), fmt.Sprintf("scratch-%d", time.Now().UnixNano()))
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := RunGate(ctx, sb, tree, root, argv, GateEnv(getenv, root), 10*time.Minute, 1<<20)
	return gateRun{res, err, string(res.Output)}
}

func copyModule(t *testing.T, base, name string, v, want int, attack bool, hostCache string) string {
	d := filepath.Join(base, name, "tree")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	cacheModule(t, d, v, want, attack, hostCache)
	return d
}

// TestWarmCacheIsolation is issue 23's attack: a worker's test that
// poisons the build and module caches it is given reaches neither the next
// gate, nor the warm lower layer, nor the host's own cache; a gate after
// the target moved sees the new code.
func TestWarmCacheIsolation(t *testing.T) {
	// One cache folder for both backends (both run as the same uid):
	// the cold warming, which compiles the standard library, is paid once.
	cacheDir := t.TempDir()
	for _, backend := range []string{BackendBwrap, BackendDocker} {
		t.Run(backend, func(t *testing.T) {
			sb, _, warn := warmBox(t, backend, cacheDir)
			testWarmCacheIsolation(t, sb, cacheDir, warn)
		})
	}
	// The warmed cache rots: a gate on a copy of it whose compiled objects
	// were changed in place, at the same size, runs cold (Go's cache checks
	// an object's size, then compiles against it: the gate used to fail).
	t.Run("rotten lower layer", func(t *testing.T) {
		if !exists(filepath.Join(cacheDir, "current")) {
			t.Skip("no warmed cache (the subtests above failed)")
		}
		rotten := filepath.Join(t.TempDir(), "warm")
		if out, err := exec.Command("cp", "-a", cacheDir, rotten).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v: %s", err, out)
		}
		if n := rot(t, filepath.Join(rotten, "current", "gocache")); n == 0 {
			t.Fatal("no compiled object to spoil: the cache was not warm")
		}
		for _, backend := range []string{BackendBwrap, BackendDocker} {
			t.Run(backend, func(t *testing.T) {
				sb, _, warn := warmBox(t, backend, rotten)
				base := worktree(t)
				host := map[string]string{"PATH": strings.TrimPrefix(testPath, "PATH="), "GOMODCACHE": filepath.Join(base, "no-host-modcache")}
				g := warmGate(t, sb, copyModule(t, base, "tip", 2, 2, false, hostGoCache(t)), func(k string) string { return host[k] }, "go", "test", "-count=1", "./...")
				if g.err != nil || g.res.ExitCode != 0 {
					t.Fatalf("the gate failed because of the rotten cache (exit %d, %v):\n%s", g.res.ExitCode, g.err, g.out)
				}
				oneColdWarning(t, warn, "corrupted")
			})
		}
	})
}

// rot overwrites 64 bytes in the middle of every compiled object over
// 64 KiB under gocache, keeping each file's size; it returns how many.
func rot(t *testing.T, gocache string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(gocache, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || !strings.HasSuffix(p, "-d") {
			return err
		}
		fi, err := d.Info()
		if err != nil || fi.Size() < 64<<10 {
			return err
		}
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, 64), fi.Size()/2); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func testWarmCacheIsolation(t *testing.T, sb Sandbox, cacheDir string, warn *bytes.Buffer) {
	base := worktree(t)
	host := map[string]string{"PATH": strings.TrimPrefix(testPath, "PATH="), "GOMODCACHE": filepath.Join(base, "no-host-modcache")}
	getenv := func(k string) string { return host[k] }
	hostCache := hostGoCache(t)
	hostPoison := filepath.Join(hostCache, "poison")
	os.Remove(hostPoison)

	// Warm from the landed tip (v1), compiled in this backend's sandbox.
	tip := copyModule(t, base, "tip1", 1, 1, false, hostCache)
	var so Options
	switch b := sb.(type) {
	case *bwrapBackend:
		so = b.opts
	case *dockerBackend:
		so = b.opts
	}
	wres, err := WarmGo(context.Background(), WarmOptions{Tree: tip, Getenv: getenv, Sandbox: so, Box: sb, Label: "tip1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(wres.Warnings) > 0 || wres.Files == 0 {
		t.Fatalf("warming: %d files, warnings %v", wres.Files, wres.Warnings)
	}
	lower := treeSum(t, wres.Dir)

	// The gate starts warm: lib is not stale (compiled by warming), nothing
	// to rebuild.
	stale := warmGate(t, sb, copyModule(t, base, "probe", 1, 1, false, hostCache), getenv, "go", "list", "-f", "{{.ImportPath}} {{.Stale}}", "testing", "./...")
	if stale.err != nil || stale.res.ExitCode != 0 {
		t.Fatalf("go list: %v %s", stale.err, stale.out)
	}
	if strings.Contains(stale.out, " true") {
		t.Errorf("a gate right after warming finds stale packages (the cache is not warm):\n%s", grepLines(stale.out, " true"))
	}

	// The worker's gate: its test poisons everything it can reach.
	worker := copyModule(t, base, "worker", 1, 1, true, hostCache)
	// Only the attack's package: run beside the module's other packages it
	// would also poison their builds in this gate (its own writable layer,
	// thrown away), which under load can break the gate it runs in.
	attack := warmGate(t, sb, worker, getenv, "go", "test", "-v", "./attack")
	if attack.err != nil || attack.res.ExitCode != 0 || !strings.Contains(attack.out, "poisoned") {
		t.Fatalf("the attack's gate did not run its poisoning (exit %d, %v):\n%s", attack.res.ExitCode, attack.err, attack.out)
	}
	if got := treeSum(t, wres.Dir); got != lower {
		t.Fatal("the worker's test changed the warm lower layer")
	}
	if exists(hostPoison) {
		os.Remove(hostPoison)
		t.Fatal("the worker's test wrote into the host's own build cache")
	}

	// The next gate, same tree: a clean, warm cache; lib's test passes.
	next := warmGate(t, sb, copyModule(t, base, "next", 1, 1, false, hostCache), getenv, "go", "test", "-count=1", "./...")
	if next.err != nil || next.res.ExitCode != 0 || !strings.Contains(next.out, "ok  \texample.com/warm/lib") {
		t.Fatalf("the gate after the poisoning gate failed (exit %d, %v):\n%s", next.res.ExitCode, next.err, next.out)
	}

	// The target moves (V returns 2, its test wants 2) and is warmed: a
	// gate on a change that breaks it fails (no stale result), one on the
	// new tip passes, and an old gate's tree still sees its own code.
	tip2 := copyModule(t, base, "tip2", 2, 2, false, hostCache)
	w2, err := WarmGo(context.Background(), WarmOptions{Tree: tip2, Getenv: getenv, Sandbox: so, Box: sb, Label: "tip2"})
	if err != nil || len(w2.Warnings) > 0 {
		t.Fatalf("second warming: %v %v", err, w2.Warnings)
	}
	if w2.Dir == wres.Dir {
		t.Fatal("warming reused the generation in place")
	}
	for _, c := range []struct {
		name   string
		v, w   int
		passes bool
	}{{"new tip", 2, 2, true}, {"change breaking the new tip", 3, 2, false}, {"old tree", 1, 1, true}} {
		g := warmGate(t, sb, copyModule(t, base, strings.ReplaceAll(c.name, " ", "-"), c.v, c.w, false, hostCache), getenv, "go", "test", "./...")
		if g.err != nil || (g.res.ExitCode == 0) != c.passes {
			t.Errorf("%s: gate exit %d (%v), want passing=%v:\n%s", c.name, g.res.ExitCode, g.err, c.passes, g.out)
		}
	}
	if warn.Len() > 0 {
		t.Errorf("warnings with a good cache: %s", warn.String())
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
