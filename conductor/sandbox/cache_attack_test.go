package sandbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// shellGate runs script with /bin/sh as a gate on tree with the scratch
// folder scratch (made when missing).
func shellGate(t *testing.T, sb Sandbox, tree, scratch, script string) gateRun {
	t.Helper()
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		t.Fatal(err)
	}
	host := map[string]string{"PATH": strings.TrimPrefix(testPath, "PATH=")}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := RunGate(ctx, sb, tree, scratch, []string{"/bin/sh", "-c", script}, GateEnv(func(k string) string { return host[k] }, scratch), 10*time.Minute, 1<<20)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("gate %q: exit %d, %v:\n%s", script, res.ExitCode, err, res.Output)
	}
	return gateRun{res, err, string(res.Output)}
}

// fakeWarmBox is backend with a small generation (fakeGen) in a fresh
// warm cache folder, owned as a warming leaves it.
func fakeWarmBox(t *testing.T, backend string) (sb Sandbox, base, gen string, warn *bytes.Buffer) {
	t.Helper()
	base = worktree(t)
	root := filepath.Join(base, "warm")
	sb, id, warn := warmBox(t, backend, root)
	gen = fakeGen(t, root, id)
	writeFile(t, filepath.Join(base, "tree", "go.mod"), "module example.com/attack\n\ngo 1.22\n", 0o644)
	return sb, base, gen, warn
}

// TestWarmCacheNewScratchFolderNewLayer: a layer belongs to one scratch
// folder, not to its path. A gate whose scratch folder has the path of
// an earlier one, removed since, must not see what the earlier gate's
// command wrote into its caches.
func TestWarmCacheNewScratchFolderNewLayer(t *testing.T) {
	for _, backend := range []string{BackendBwrap, BackendDocker} {
		t.Run(backend, func(t *testing.T) {
			sb, base, _, warn := fakeWarmBox(t, backend)
			tree, scratch := filepath.Join(base, "tree"), filepath.Join(base, "scratch")
			first := shellGate(t, sb, tree, scratch, `echo poison > "$GOCACHE/ab/ab12-d" && echo planted > "$GOCACHE/planted" && echo "$GOCACHE" && cat "$GOCACHE/ab/ab12-d"`)
			if !strings.Contains(first.out, warmDirName) || !strings.Contains(first.out, "poison") {
				t.Fatalf("the first gate did not write into a warm cache:\n%s", first.out)
			}
			// The same gate's next command shares its layer.
			if again := shellGate(t, sb, tree, scratch, `cat "$GOCACHE/planted"`); !strings.Contains(again.out, "planted") {
				t.Fatalf("the gate's second command does not share its first's layer:\n%s", again.out)
			}
			if err := os.RemoveAll(scratch); err != nil {
				t.Fatal(err)
			}
			next := shellGate(t, sb, tree, scratch, `cat "$GOCACHE/ab/ab12-d"; ls "$GOCACHE"`)
			if strings.Contains(next.out, "poison") || strings.Contains(next.out, "planted") {
				t.Fatalf("a new scratch folder at an old one's path got its layer:\n%s", next.out)
			}
			if !strings.Contains(next.out, "an object") {
				t.Fatalf("the next gate's cache is not the generation's:\n%s", next.out)
			}
			if warn.Len() > 0 {
				t.Errorf("warnings with a good cache: %s", warn.String())
			}
		})
	}
}

// TestWarmCacheLowerSurvivesEveryWrite: whatever a command does to the
// files and folders of its warm caches (truncate, reopen for writing
// through /proc, rename, unlink, replace with a link, hard link out of the
// cache, change modes and times, remove whole folders), the generation is
// unchanged and the next gate sees it whole.
func TestWarmCacheLowerSurvivesEveryWrite(t *testing.T) {
	attack := `set -u
for c in "$GOCACHE" "$GOMODCACHE"; do
	ln "$c/README" "$HOME/hardlink" 2>/dev/null && echo poison >> "$HOME/hardlink"
	find "$c" -type f | while read -r f; do
		truncate -s 0 "$f"
		exec 3<"$f"; echo poison > /proc/self/fd/3; exec 3<&-
		chmod 0777 "$f"; touch -d 2000-01-01 "$f"
		mv "$f" "$f.moved"; ln -s /tmp/poison "$f"
	done
	find "$c" -type d -exec chmod 0777 {} +
done
echo poison > /tmp/poison
rm -rf "$GOMODCACHE/cache"
echo attacked: $(find "$GOCACHE" "$GOMODCACHE" -name '*.moved' | wc -l)
`
	for _, backend := range []string{BackendBwrap, BackendDocker} {
		t.Run(backend, func(t *testing.T) {
			sb, base, gen, warn := fakeWarmBox(t, backend)
			lower := treeSum(t, gen)
			tree := filepath.Join(base, "tree")
			g := shellGate(t, sb, tree, filepath.Join(base, "attack"), attack)
			if !strings.Contains(g.out, "attacked: 2") {
				t.Fatalf("the attack did not reach the cache files:\n%s", g.out)
			}
			if got := treeSum(t, gen); got != lower {
				t.Fatal("the command changed the warm lower layer")
			}
			next := shellGate(t, sb, tree, filepath.Join(base, "next"), `cat "$GOCACHE/README" "$GOCACHE/ab/ab12-d" "$GOMODCACHE/cache/download/x.txt"; find "$GOCACHE" "$GOMODCACHE" -name '*.moved'`)
			if want := "This directory holds cached build artifacts from the Go build system.\nan object\na download\n"; next.out != want {
				t.Fatalf("the next gate's caches:\n%s\nwant:\n%s", next.out, want)
			}
			if warn.Len() > 0 {
				t.Errorf("warnings with a good cache: %s", warn.String())
			}
		})
	}
}

// TestWarmGenerationInUseNotPruned: a warming's prune leaves a generation
// a command holds, and removes it once released.
func TestWarmGenerationInUseNotPruned(t *testing.T) {
	id := identity{uid: os.Getuid(), gid: os.Getgid()}
	root := filepath.Join(t.TempDir(), "warm")
	gen := fakeGen(t, root, id)
	g, err := openGen(root, id, true)
	if err != nil {
		t.Fatal(err)
	}
	if removed := pruneGens(root, genPrefix+"2"); len(removed) > 0 {
		g.release()
		t.Fatalf("a generation in use was removed: %v", removed)
	}
	if !exists(filepath.Join(gen, "gocache", "ab", "ab12-d")) {
		t.Fatal("a generation in use lost a file")
	}
	g.release()
	if removed := pruneGens(root, genPrefix+"2"); len(removed) != 1 || exists(gen) {
		t.Fatalf("a released generation was not removed: %v", removed)
	}
	// A command that read `current` before the prune finds its
	// generation gone: an error (cold), never a half-removed lower.
	if _, err := openGen(root, id, true); err == nil {
		t.Fatal("a removed generation opened")
	}
}

// TestWarmCacheForeignOwnerRunsCold: an operator copies the warm cache
// folder as root without keeping owners (cp -r, a restore): the content
// still matches its manifest, but the sandbox uid cannot write the build
// cache's folders. The gate used to run with it and fail (docker: "failed
// to initialize build cache ... permission denied"); it runs cold, after
// one warning.
func TestWarmCacheForeignOwnerRunsCold(t *testing.T) {
	for _, backend := range []string{BackendBwrap, BackendDocker} {
		t.Run(backend, func(t *testing.T) {
			sb, base, gen, warn := fakeWarmBox(t, backend)
			ownGenByRoot(t, gen)
			tree := filepath.Join(base, "tree")
			writeFile(t, filepath.Join(tree, "main.go"), "package main\n\nfunc main() {}\n", 0o644)
			goBuildRunsCold(t, sb, tree, warn, "warm it again")
		})
	}
}

// TestWarmCacheInAWritableFolderNotUsed: a warm cache folder the command
// itself can write (the operator named one inside a worktree, say) is a
// lower layer a worker could change while a gate reads it: it is not
// used, and the command runs cold after one warning.
// A cache folder given as a relative path (by a library caller: the
// config file and the environment refuse one) would be found from
// whatever the current directory is when a command starts, which may be a
// worktree: it is not used, and the command runs cold with one warning.
func TestWarmCacheRelativeFolderNotUsed(t *testing.T) {
	for _, backend := range []string{BackendBwrap, BackendDocker} {
		t.Run(backend, func(t *testing.T) {
			base := worktree(t)
			sb, id, warn := warmBox(t, backend, "warm")
			t.Chdir(base)
			fakeGen(t, filepath.Join(base, "warm"), id)
			tree := filepath.Join(base, "tree")
			writeFile(t, filepath.Join(tree, "go.mod"), "module example.com/relative\n\ngo 1.22\n", 0o644)
			g := shellGate(t, sb, tree, filepath.Join(base, "scratch"), `echo "$GOCACHE"`)
			if strings.Contains(g.out, warmDirName) {
				t.Fatalf("the gate ran with a warm cache found from the current directory:\n%s", g.out)
			}
			oneColdWarning(t, warn, "absolute")
		})
	}
}

func TestWarmCacheInAWritableFolderNotUsed(t *testing.T) {
	for _, backend := range []string{BackendBwrap, BackendDocker} {
		t.Run(backend, func(t *testing.T) {
			base := worktree(t)
			tree := filepath.Join(base, "tree")
			root := filepath.Join(tree, ".cache", "warm")
			sb, id, warn := warmBox(t, backend, root)
			fakeGen(t, root, id)
			writeFile(t, filepath.Join(tree, "go.mod"), "module example.com/inside\n\ngo 1.22\n", 0o644)
			g := shellGate(t, sb, tree, filepath.Join(base, "scratch"), `echo "$GOCACHE"`)
			if strings.Contains(g.out, warmDirName) {
				t.Fatalf("the gate ran with a warm cache it could write:\n%s", g.out)
			}
			oneColdWarning(t, warn, "can write")
		})
	}
}
