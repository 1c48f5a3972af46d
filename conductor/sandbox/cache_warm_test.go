package sandbox

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestWarmGoRunsNoTreeCodeOnTheHost is the warming's attack: the landed
// tip it compiles was written by a worker, and compiling Go can read host
// files into the objects every later gate and worker command sees through
// the warm cache. A cgo preamble's `.incbin` makes the C assembler embed
// any file the compiler can read; a go.mod `replace` with a host path
// compiles whatever module lies there. Warming compiled on the host, as
// the conductor (root): both secrets ended up in the cache. It now compiles
// in the sandbox, which sees neither.
func TestWarmGoRunsNoTreeCodeOnTheHost(t *testing.T) {
	host := filepath.Join(t.TempDir(), "host-only") // never bound into a sandbox
	marker := make([]byte, 16)
	rand.Read(marker)
	secret := "SECRET-" + hex.EncodeToString(marker)
	writeFile(t, filepath.Join(host, "credentials"), strings.Repeat(secret+"\n", 4), 0o600)
	writeFile(t, filepath.Join(host, "mod", "go.mod"), "module example.com/hostmod\n\ngo 1.22\n", 0o644)
	writeFile(t, filepath.Join(host, "mod", "s.go"), "package hostmod\n\nconst Secret = \""+secret+"\"\n\nfunc S() string { return Secret }\n", 0o644)

	t.Run("cgo incbin", func(t *testing.T) {
		if goEnv(t, "CGO_ENABLED") != "1" {
			t.Skip("cgo is off here (no C compiler)")
		}
		warmLanded(t, secret, "module example.com/landed\n\ngo 1.22\n", map[string]string{"leak/leak.go": `package leak

/*
__asm__(".section .rodata\n.globl conductor_leaked\nconductor_leaked:\n.incbin \"` + filepath.Join(host, "credentials") + `\"\n.previous\n");
*/
import "C"

func Leak() {}
`})
	})
	t.Run("replace with a host path", func(t *testing.T) {
		warmLanded(t, secret, "module example.com/landed\n\ngo 1.22\n\nrequire example.com/hostmod v0.0.0\n\nreplace example.com/hostmod => "+filepath.Join(host, "mod")+"\n",
			map[string]string{"uses/uses.go": "package uses\n\nimport \"example.com/hostmod\"\n\nfunc S() string { return hostmod.S() }\n"})
	})
}

// warmLanded warms a new cache from a tree of gomod and files and fails
// when secret is in any of the generation's files.
func warmLanded(t *testing.T, secret, gomod string, files map[string]string) {
	base := worktree(t)
	tree := filepath.Join(base, "tree")
	writeFile(t, filepath.Join(tree, "go.mod"), gomod, 0o644)
	for p, body := range files {
		writeFile(t, filepath.Join(tree, p), body, 0o644)
	}
	res, log := warmTree(t, base, tree, "landed")
	t.Logf("warming's log:\n%s", log.String())
	err := filepath.WalkDir(res.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(secret)) {
			t.Errorf("a host file's content is in the warm cache: %s", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// warmTree warms a new cache under base from tree (no host module cache)
// and returns the result and the warming's log; a failed warming fails t.
func warmTree(t *testing.T, base, tree, label string) (WarmResult, *bytes.Buffer) {
	t.Helper()
	env := map[string]string{"PATH": strings.TrimPrefix(testPath, "PATH="), "GOMODCACHE": filepath.Join(base, "no-host-modcache")}
	var log bytes.Buffer
	res, err := WarmGo(context.Background(), WarmOptions{Tree: tree, Getenv: func(k string) string { return env[k] }, Sandbox: Options{GoCache: filepath.Join(base, "warm")}, Log: &log, Label: label})
	if err != nil {
		t.Fatalf("warming: %v\n%s", err, log.String())
	}
	return res, &log
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// TestGoModules: the modules a warming compiles are every go.mod's folder
// the go command would see, the root first; no link is followed and the
// folders go skips are skipped.
func TestGoModules(t *testing.T) {
	tree := t.TempDir()
	for _, p := range []string{"go.mod", "tools/go.mod", "a/b/go.mod", "vendor/x/go.mod", "testdata/m/go.mod", ".hidden/go.mod", "_old/go.mod", "node_modules/m/go.mod", "notamod/go.sum"} {
		writeFile(t, filepath.Join(tree, p), "module m\n", 0o644)
	}
	os.Mkdir(filepath.Join(tree, "dirmod"), 0o755)
	os.Mkdir(filepath.Join(tree, "dirmod", "go.mod"), 0o755) // a folder named go.mod
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "go.mod"), "module outside\n", 0o644)
	os.Symlink(outside, filepath.Join(tree, "linked"))                                     // a link to a module folder
	os.Mkdir(filepath.Join(tree, "linkmod"), 0o755)                                        //
	os.Symlink(filepath.Join(outside, "go.mod"), filepath.Join(tree, "linkmod", "go.mod")) // a go.mod that is a link
	mods, skipped := goModules(tree)
	var got []string
	for _, m := range mods {
		got = append(got, strings.Join(m.args("build"), " "))
	}
	if want := "build|-C a/b build|-C tools build"; strings.Join(got, "|") != want || skipped != 0 {
		t.Errorf("modules %q (skipped %d), want %q", got, skipped, want)
	}

	// Only a go.work at the root: the root is warmed (workspace mode).
	work := t.TempDir()
	writeFile(t, filepath.Join(work, "go.work"), "go 1.22\n\nuse ./m\n", 0o644)
	writeFile(t, filepath.Join(work, "m", "go.mod"), "module m\n", 0o644)
	mods, _ = goModules(work)
	if len(mods) != 2 || mods[0].dir != "." || mods[0].hasGoMod || mods[1].dir != "m" {
		t.Errorf("go.work tree: %+v", mods)
	}

	// A tree with more modules than a warming compiles: the first ones, and
	// the rest counted.
	many := t.TempDir()
	for i := range maxWarmModules + 3 {
		writeFile(t, filepath.Join(many, fmt.Sprintf("m%02d", i), "go.mod"), "module m\n", 0o644)
	}
	mods, skipped = goModules(many)
	if len(mods) != maxWarmModules || skipped != 3 || mods[0].dir != "m00" {
		t.Errorf("many modules: %d warmed, %d skipped, first %+v", len(mods), skipped, mods[0])
	}
}

// TestWarmGoWarmsEveryModule: a repository whose gates build a module in a
// subfolder gets that module compiled into the warm cache too (it used to
// warm only a go.mod at the root); a module under testdata is not.
func TestWarmGoWarmsEveryModule(t *testing.T) {
	base := worktree(t)
	tree := filepath.Join(base, "tree")
	mark := func(name string) string {
		b := make([]byte, 8)
		rand.Read(b)
		return "WARM-" + name + "-" + hex.EncodeToString(b)
	}
	root, sub, skipped := mark("root"), mark("sub"), mark("testdata")
	for p, body := range map[string]string{
		"go.mod":                         "module example.com/root\n\ngo 1.22\n",
		"r/r.go":                         "package r\n\nconst Marker = \"" + root + "\"\n",
		"tools/lint/go.mod":              "module example.com/lint\n\ngo 1.22\n",
		"tools/lint/check/check.go":      "package check\n\nconst Marker = \"" + sub + "\"\n",
		"testdata/fixture/go.mod":        "module example.com/fixture\n\ngo 1.22\n",
		"testdata/fixture/fix/fix.go":    "package fix\n\nconst Marker = \"" + skipped + "\"\n",
		"tools/lint/check/check_test.go": "package check\n\nimport \"testing\"\n\nfunc TestMarker(t *testing.T) { _ = Marker }\n",
	} {
		writeFile(t, filepath.Join(tree, p), body, 0o644)
	}
	res, log := warmTree(t, base, tree, "modules")
	if len(res.Warnings) > 0 {
		t.Errorf("warnings: %q\n%s", res.Warnings, log.String())
	}
	found := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(res.Dir, "gocache"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		for _, m := range []string{root, sub, skipped} {
			if bytes.Contains(b, []byte(m)) {
				found[m] = true
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !found[root] || !found[sub] {
		t.Errorf("compiled into the cache: root module %v, tools/lint module %v; want both\n%s", found[root], found[sub], log.String())
	}
	if found[skipped] {
		t.Error("a module under testdata was compiled")
	}
	if !strings.Contains(log.String(), "go -C tools/lint test") {
		t.Errorf("the sub-module's test binaries were not linked:\n%s", log.String())
	}
	// Every download (on the host, as the conductor, into the stage and
	// reading the tree) comes before the first compile in the sandbox,
	// which can write both: the conductor never writes where, or reads
	// what, a sandboxed command of this warming could have written.
	compiled := false
	downloads := 0
	for _, line := range strings.Split(log.String(), "\n") {
		switch {
		case strings.Contains(line, " mod download"):
			downloads++
			if compiled {
				t.Errorf("a download after a compile in the sandbox: %q\n%s", line, log.String())
			}
		case strings.Contains(line, "conductor: warm: go "):
			compiled = true
		}
	}
	if downloads != 2 {
		t.Errorf("%d downloads logged, want 2 (one per module):\n%s", downloads, log.String())
	}
}

// TestWarmGoCopiesOnlyPinnedModules: a warming fills the warm module cache
// from the host's own module cache, which may hold the operator's private
// modules. The landed tree is a worker's: naming one in its go.mod
// without its hash in go.sum must not copy it into the cache every later
// gate and worker command reads (go mod download, with GOSUMDB off,
// trusted whatever the file proxy served and added the hash itself). A
// module the tree pins is copied.
func TestWarmGoCopiesOnlyPinnedModules(t *testing.T) {
	base := worktree(t)
	mark := func(name string) string {
		b := make([]byte, 8)
		rand.Read(b)
		return name + "-" + hex.EncodeToString(b)
	}
	secret, pinned := mark("SECRET"), mark("PINNED")
	// The host's module cache: its download folder is a module proxy's
	// layout.
	hostMods := filepath.Join(base, "host-modcache")
	dl := filepath.Join(hostMods, "cache", "download")
	for _, m := range []struct{ path, marker string }{{"example.com/private", secret}, {"example.com/Pinned", pinned}} {
		esc := strings.ReplaceAll(m.path, "P", "!p")
		gomod := "module " + m.path + "\n\ngo 1.22\n"
		at := filepath.Join(dl, esc, "@v")
		writeFile(t, filepath.Join(at, "v1.0.0.mod"), gomod, 0o644)
		writeFile(t, filepath.Join(at, "v1.0.0.info"), `{"Version":"v1.0.0"}`, 0o644)
		writeFile(t, filepath.Join(at, "list"), "v1.0.0\n", 0o644)
		zipModule(t, filepath.Join(at, "v1.0.0.zip"), m.path+"@v1.0.0", map[string]string{"go.mod": gomod, "p.go": "package p\n\nconst Marker = \"" + m.marker + "\"\n"})
	}
	// The root module pins what it requires; a module in a subfolder
	// (which the gates need not build) names the private one without its
	// hash.
	tree := filepath.Join(base, "tree")
	writeFile(t, filepath.Join(tree, "go.mod"), "module example.com/landed\n\ngo 1.22\n\nrequire example.com/Pinned v1.0.0\n", 0o644)
	writeFile(t, filepath.Join(tree, "uses", "uses.go"), "package uses\n\nimport p \"example.com/Pinned\"\n\nconst M = p.Marker\n", 0o644)
	writeFile(t, filepath.Join(tree, "tools", "x", "go.mod"), "module example.com/x\n\ngo 1.22\n\nrequire example.com/private v1.0.0\n", 0o644)
	sum := exec.Command("go", "mod", "tidy") // go.sum as go writes it: both hashes of each module
	sum.Dir = tree
	sum.Env = []string{testPath, "HOME=" + base, "GOMODCACHE=" + filepath.Join(base, "scratch-modcache"), "GOCACHE=" + filepath.Join(base, "scratch-gocache"),
		"GOPROXY=file://" + dl + ",off", "GOSUMDB=off", "GOENV=off", "GOTOOLCHAIN=local", "GOFLAGS=-modcacherw"}
	if out, err := sum.CombinedOutput(); err != nil {
		t.Fatalf("go mod tidy: %v: %s", err, out)
	}

	env := map[string]string{"PATH": strings.TrimPrefix(testPath, "PATH="), "GOMODCACHE": hostMods}
	var log bytes.Buffer
	res, err := WarmGo(context.Background(), WarmOptions{Tree: tree, Getenv: func(k string) string { return env[k] }, Sandbox: Options{GoCache: filepath.Join(base, "warm")}, Log: &log, Label: "pinned"})
	if err != nil {
		t.Fatalf("warming: %v\n%s", err, log.String())
	}
	t.Logf("warming's log:\n%s", log.String())
	found := map[string]bool{}
	err = filepath.WalkDir(filepath.Join(res.Dir, "gomodcache"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || !strings.HasSuffix(p, ".go") {
			return err
		}
		b, err := os.ReadFile(p)
		for _, m := range []string{secret, pinned} {
			if bytes.Contains(b, []byte(m)) {
				found[m] = true
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if found[secret] {
		t.Error("a module of the host's cache the tree does not pin is in the warm cache")
	}
	if !found[pinned] {
		t.Error("the module the tree pins is not in the warm cache")
	}
}

// zipModule writes a module zip as a module proxy serves it: each file
// under prefix (module@version/).
func zipModule(t *testing.T, dst, prefix string, files map[string]string) {
	t.Helper()
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	for name, content := range files {
		w, err := z.Create(prefix + "/" + name)
		if err == nil {
			_, err = w.Write([]byte(content))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dst, b.String(), 0o644)
}
