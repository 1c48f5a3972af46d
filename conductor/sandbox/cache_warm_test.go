package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
	env := map[string]string{"PATH": strings.TrimPrefix(testPath, "PATH="), "GOMODCACHE": filepath.Join(base, "no-host-modcache")}
	var log bytes.Buffer
	res, err := WarmGo(context.Background(), WarmOptions{Tree: tree, Getenv: func(k string) string { return env[k] }, Sandbox: Options{GoCache: filepath.Join(base, "warm")}, Log: &log, Label: "landed"})
	if err != nil {
		t.Fatalf("warming: %v\n%s", err, log.String())
	}
	t.Logf("warming's log:\n%s", log.String())
	err = filepath.WalkDir(res.Dir, func(p string, d fs.DirEntry, err error) error {
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

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
