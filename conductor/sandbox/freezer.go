package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// freezer is a container's cgroup freezer, seen from the host. Killing a
// command's processes one by one from outside races whatever keeps forking
// (a fork bomb replaces each process killed between two scans, and under
// load it can win for seconds); frozen, nothing forks, so one pass of
// SIGKILL reaches every process, and each dies as it is thawed, before it
// runs another instruction.
type freezer struct {
	dir string // the cgroup's folder
	v2  bool   // cgroup.freeze (v2) rather than freezer.state (v1)
}

// freezeWait bounds how long a freeze may take to settle (a process in an
// uninterruptible sleep delays it); past it the kill goes on unfrozen.
const freezeWait = time.Second

// cgroupFreezer finds the freezer of the cgroup process pid is in; ok is
// false when the host has none we can write.
func cgroupFreezer(pid int) (f freezer, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return freezer{}, false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch ctrl, path := parts[1], parts[2]; {
		case ctrl == "freezer":
			if dir := filepath.Join("/sys/fs/cgroup/freezer", path); pathExists(filepath.Join(dir, "freezer.state")) {
				return freezer{dir: dir}, true
			}
		case ctrl == "" && parts[0] == "0":
			if dir := filepath.Join("/sys/fs/cgroup", path); pathExists(filepath.Join(dir, "cgroup.freeze")) {
				f, ok = freezer{dir: dir, v2: true}, true // a v1 freezer, when listed too, wins
			}
		}
	}
	return f, ok
}

// freeze stops every process of the cgroup and reports whether they all
// stopped within freezeWait.
func (f freezer) freeze() bool {
	file, value := "freezer.state", "FROZEN"
	if f.v2 {
		file, value = "cgroup.freeze", "1"
	}
	if os.WriteFile(filepath.Join(f.dir, file), []byte(value), 0) != nil {
		return false
	}
	deadline := time.Now().Add(freezeWait)
	for !f.frozen() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func (f freezer) frozen() bool {
	if f.v2 {
		b, err := os.ReadFile(filepath.Join(f.dir, "cgroup.events"))
		return err == nil && (bytes.HasPrefix(b, []byte("frozen 1")) || bytes.Contains(b, []byte("\nfrozen 1")))
	}
	b, err := os.ReadFile(filepath.Join(f.dir, "freezer.state"))
	return err == nil && strings.TrimSpace(string(b)) == "FROZEN"
}

// thaw lets the cgroup's processes run again (those killed while frozen
// die as they wake).
func (f freezer) thaw() {
	file, value := "freezer.state", "THAWED"
	if f.v2 {
		file, value = "cgroup.freeze", "0"
	}
	_ = os.WriteFile(filepath.Join(f.dir, file), []byte(value), 0)
}

// procs lists the host pids of the cgroup's processes.
func (f freezer) procs() []int {
	b, err := os.ReadFile(filepath.Join(f.dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, l := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(l); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
