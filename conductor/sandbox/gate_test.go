package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestGateEnv(t *testing.T) {
	host := map[string]string{
		"PATH": "/usr/bin:/bin", "GOFLAGS": "-mod=mod", "LANG": "C.UTF-8",
		"OPENAI_API_KEY": "sk-gate", "GITEA_TOKEN": "gt-gate", "DATABASE_URL": "postgres://u:pw@h/db",
		"GOCACHE": "/root/.cache/go-build", "HOME": "/root", "SSH_AUTH_SOCK": "/tmp/ssh-agent",
	}
	env := GateEnv(func(k string) string { return host[k] }, "/scratch/root", "EXTRA=1")
	has := func(kv string) bool { return slices.Contains(env, kv) }
	for _, want := range []string{"PATH=/usr/bin:/bin", "GOFLAGS=-mod=mod", "LANG=C.UTF-8",
		"HOME=/scratch/root/home", "TMPDIR=/scratch/root/tmp", "GOPROXY=off", "CI=true", "CONDUCTOR_GATE=1", "EXTRA=1"} {
		if !has(want) {
			t.Errorf("gate env lacks %s: %v", want, env)
		}
	}
	for _, kv := range env {
		for _, secret := range []string{"sk-gate", "gt-gate", "pw@", "/root/.cache", "ssh-agent", "HOME=/root"} {
			if strings.Contains(kv, secret) {
				t.Errorf("gate env carries %q", kv)
			}
		}
	}
	// Defaults when the conductor has no PATH or LANG.
	env = GateEnv(func(string) string { return "" }, "/r")
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=/") }) {
		t.Errorf("no default PATH: %v", env)
	}
}

func TestRunGateInTheSandbox(t *testing.T) {
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	base := worktree(t)
	dir, root := filepath.Join(base, "tree"), filepath.Join(base, "sandbox")
	for _, d := range []string{dir, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "Makefile"), "test:\n", 0o644)
	marker := filepath.Join(base, "outside-marker")
	env := GateEnv(func(k string) string {
		if k == "OPENAI_API_KEY" {
			return "sk-run-gate"
		}
		return os.Getenv(k)
	}, root)
	for _, argv := range [][]string{
		{et, "write", "built.txt", "x"},                          // the tree is writable
		{et, "write", filepath.Join(root, "home", "h.txt"), "x"}, // HOME is the scratch folder's
	} {
		res, err := RunGate(context.Background(), sb, dir, root, argv, env, 20*time.Second, 1<<20)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%v: %v %s", argv, err, res.Output)
		}
	}
	if !exists(filepath.Join(dir, "built.txt")) || !exists(filepath.Join(root, "home", "h.txt")) {
		t.Fatal("the gate's writes did not land in the tree and its HOME")
	}
	for _, argv := range [][]string{{et, "write", marker, "x"}, {et, "env"}} {
		res, err := RunGate(context.Background(), sb, dir, root, argv, env, 20*time.Second, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(res.Output), "sk-run-gate") {
			t.Fatalf("ESCAPE: the gate saw a credential: %s", res.Output)
		}
	}
	if exists(marker) {
		t.Fatal("ESCAPE: a gate command wrote outside its tree and scratch folder")
	}
}

func TestForGate(t *testing.T) {
	var none Sandbox = &noneBackend{opts: Options{}.withDefaults()}
	if sb, err := ForGate(none); err != nil || sb != none {
		t.Fatalf("ForGate(sb) = %v, %v; want sb itself", sb, err)
	}
	sb, err := ForGate(nil)
	switch {
	case err != nil && !errors.Is(err, ErrUnavailable):
		t.Fatalf("ForGate(nil): %v, want nil or ErrUnavailable", err)
	case err == nil && sb.Name() != BackendBwrap:
		t.Fatalf("ForGate(nil) = %s: a gate never runs unsandboxed by default", sb.Name())
	}
}
