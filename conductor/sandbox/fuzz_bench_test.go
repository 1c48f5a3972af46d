package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzCapture: whatever a command writes, in whatever pieces, the kept
// output is at most the limit plus the marker, counts every byte, and is
// the output itself when it fits.
func FuzzCapture(f *testing.F) {
	f.Add([]byte("hello, world"), uint16(5), uint8(3))
	f.Add(bytes.Repeat([]byte("y\n"), 1000), uint16(64), uint8(7))
	f.Add([]byte{}, uint16(0), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, limit uint16, chunk uint8) {
		c := newCapture(int64(limit), 0, nil)
		step := int(chunk) + 1
		for i := 0; i < len(data); i += step {
			c.Write(data[i:min(i+step, len(data))])
		}
		out, truncated := c.result()
		if c.written() != int64(len(data)) {
			t.Fatalf("written %d, want %d", c.written(), len(data))
		}
		lim := max(int(limit), 2)
		switch {
		case !truncated && !bytes.Equal(out, data):
			t.Fatalf("not truncated but %q != %q", out, data)
		case truncated && len(data) <= lim:
			t.Fatalf("truncated %d bytes under the limit %d", len(data), lim)
		case truncated:
			marker := fmt.Sprintf("\n... [%d bytes omitted] ...\n", len(data)-lim)
			if len(out) != lim+len(marker) || !bytes.Contains(out, []byte(marker)) {
				t.Fatalf("kept %d bytes (%q), want %d + marker", len(out), out, lim)
			}
			if !bytes.HasPrefix(data, out[:lim/2]) || !bytes.HasSuffix(data, out[len(out)-(lim-lim/2):]) {
				t.Fatal("head or tail is not the output's")
			}
		}
	})
}

// FuzzOptionsFromEnv: the environment never yields a root sandbox, a
// relative read-only path or a panic.
func FuzzOptionsFromEnv(f *testing.F) {
	f.Add("65534", "1024", "/opt/go:/opt/x")
	f.Add("0:0", "", "")
	f.Add("1000:", "abc", "relative:/abs")
	f.Fuzz(func(t *testing.T, uid, procs, ro string) {
		env := map[string]string{EnvUID: uid, EnvMaxProcs: procs, EnvReadOnly: ro}
		o, err := OptionsFromEnv(func(k string) string { return env[k] })
		if err != nil {
			return
		}
		if (o.UID != nil && *o.UID <= 0) || (o.GID != nil && *o.GID <= 0) {
			t.Fatalf("uid %v gid %v from %q", o.UID, o.GID, uid)
		}
		if o.MaxProcs != 0 && o.MaxProcs < 16 {
			t.Fatalf("max procs %d", o.MaxProcs)
		}
		for _, p := range o.ReadOnly {
			if !filepath.IsAbs(p) {
				t.Fatalf("read-only path %q", p)
			}
		}
	})
}

// BenchmarkBwrapCommand is the sandbox's cost per command: `true` in a
// fresh bwrap sandbox (namespaces, mounts, limits, teardown).
func BenchmarkBwrapCommand(b *testing.B) {
	sb, err := NewWithOptions("bwrap", Options{})
	if err != nil {
		b.Skipf("bwrap: %v", err)
	}
	dir := b.TempDir()
	for _, p := range []string{filepath.Dir(dir), dir} {
		os.Chmod(p, 0o755)
	}
	spec := Spec{Dir: dir, Argv: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}, Timeout: 30 * time.Second}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if res, err := sb.Run(context.Background(), spec); err != nil || res.ExitCode != 0 {
			b.Fatalf("%v %+v", err, res)
		}
	}
}

// BenchmarkHandOver is the ownership pass before each command on a
// 10,000-file worktree that already belongs to the sandbox uid (the
// steady state: only lstat calls).
func BenchmarkHandOver(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the hand-over runs only when the conductor is root")
	}
	dir := b.TempDir()
	for i := 0; i < 100; i++ {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", i))
		if err := os.Mkdir(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for j := 0; j < 100; j++ {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%03d.go", j)), []byte("package x\n"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	id := identity{uid: DefaultUID, gid: DefaultGID, drop: true}
	if err := handOver(dir, id); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := handOver(dir, id); err != nil {
			b.Fatal(err)
		}
	}
}
