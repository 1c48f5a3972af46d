package sandbox

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/conductor-dev/conductor/conductor"
)

// MinMemory is the smallest memory limit a command may get: below it the
// sandbox itself (bwrap, a Go program's runtime) cannot start reliably.
const MinMemory = conductor.MinSandboxMemory

// ParseBytes reads a byte count: digits, optionally followed by K, M or G
// (binary: 1K is 1024), with an optional "i" and "B" (512MiB, 2G, 1073741824).
func ParseBytes(s string) (int64, error) { return conductor.ParseBytes(s) }

// memoryLimit is the limit for one command: Spec.MemoryLimit may lower
// Options.MaxMemory (the operator's), never raise it.
func (o Options) memoryLimit(spec Spec) int64 {
	limit := int64(o.withDefaults().MaxMemory)
	if spec.MemoryLimit > 0 {
		limit = max(min(spec.MemoryLimit, limit), MinMemory)
	}
	return limit
}

// cgroup2Magic is CGROUP2_SUPER_MAGIC, statfs's f_type of a cgroup v2 mount.
const cgroup2Magic = 0x63677270

// checkCgroup says whether dir is a cgroup v2 folder the conductor can
// give commands child cgroups with a memory limit in.
func checkCgroup(dir string) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	if st.Type != cgroup2Magic {
		return fmt.Errorf("cgroup %s: not a cgroup v2 folder (statfs type %#x)", dir, st.Type)
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	if !hasWord(string(b), "memory") {
		return fmt.Errorf("cgroup %s: the memory controller is not enabled for its children (echo +memory > %s/cgroup.subtree_control)", dir, dir)
	}
	if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
		return fmt.Errorf("cgroup %s: not writable by the conductor: %w", dir, err)
	}
	return nil
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// CgroupStatus describes what the host offers for a memory limit per
// command, for doctor: the given cgroup's state, or what /sys/fs/cgroup
// is when none is given.
func CgroupStatus(o Options) (usable bool, detail string) {
	if o.Cgroup != "" {
		if err := checkCgroup(o.Cgroup); err != nil {
			return false, err.Error()
		}
		return true, "cgroup v2 " + o.Cgroup + ": each command gets a child cgroup with memory.max"
	}
	var st syscall.Statfs_t
	kind := "not mounted"
	if syscall.Statfs("/sys/fs/cgroup", &st) == nil {
		kind = "cgroup v1 or hybrid"
		if st.Type == cgroup2Magic {
			kind = "cgroup v2"
		}
	}
	return false, fmt.Sprintf("no delegated cgroup v2 folder given (%s; /sys/fs/cgroup is %s)", EnvCgroup, kind)
}

// memCgroup is the child cgroup one command runs in.
type memCgroup struct {
	dir string
	fd  *os.File
}

// newMemCgroup makes a child of parent limited to limit bytes, with no swap
// and the whole group killed at once when it is reached.
func newMemCgroup(parent string, limit int64) (*memCgroup, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	dir := filepath.Join(parent, "conductor-cmd-"+hex.EncodeToString(rnd[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	c := &memCgroup{dir: dir}
	write := func(name, v string) error { return os.WriteFile(filepath.Join(dir, name), []byte(v), 0) }
	if err := write("memory.max", strconv.FormatInt(limit, 10)); err != nil {
		c.remove()
		return nil, fmt.Errorf("cgroup: memory.max: %w", err)
	}
	_ = write("memory.swap.max", "0") // absent without swap accounting
	_ = write("memory.oom.group", "1")
	fd, err := os.Open(dir)
	if err != nil {
		c.remove()
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	c.fd = fd
	return c, nil
}

// oomKilled reports whether the kernel killed a process of the cgroup at
// its memory limit.
func (c *memCgroup) oomKilled() bool {
	b, err := os.ReadFile(filepath.Join(c.dir, "memory.events"))
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		if (k == "oom_kill" || k == "oom_group_kill") && v != "0" {
			return true
		}
	}
	return false
}

// remove kills whatever is left in the cgroup and removes it.
func (c *memCgroup) remove() {
	if c.fd != nil {
		c.fd.Close()
	}
	for i := 0; i < 100; i++ {
		err := os.Remove(c.dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		_ = os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0)
		time.Sleep(10 * time.Millisecond)
	}
}

// outOfMemoryMessages are what programs print when an allocation fails
// (Go, C libraries and strerror(ENOMEM), Python, C++, V8, GCC).
var outOfMemoryMessages = [][]byte{
	[]byte("out of memory"),
	[]byte("cannot allocate memory"),
	[]byte("memoryerror"),
	[]byte("bad_alloc"),
	[]byte("memory exhausted"),
	[]byte("allocation failed"),
}

// saysOutOfMemory reports whether a failed command's output says an
// allocation failed. With RLIMIT_DATA alone this is how a command that ran
// into its limit is told from one that failed otherwise; the command's own
// output decides, so a command can only mislabel its own failure.
func saysOutOfMemory(out []byte) bool {
	low := bytes.ToLower(out)
	for _, m := range outOfMemoryMessages {
		if bytes.Contains(low, m) {
			return true
		}
	}
	return false
}

// classifyMemory turns a failed result into memory-exceeded when its
// cgroup recorded an OOM kill or, without one, when it says so.
func classifyMemory(res *Result, cg *memCgroup) {
	switch res.Outcome {
	case OutcomeExited, OutcomeSignaled:
	default:
		return // timed out, cancelled or killed for its output: that is what it was
	}
	if res.Outcome == OutcomeExited && res.ExitCode == 0 {
		return
	}
	if (cg != nil && cg.oomKilled()) || saysOutOfMemory(res.Output) {
		res.Outcome, res.MemoryExceeded = OutcomeMemoryExceeded, true
	}
}
