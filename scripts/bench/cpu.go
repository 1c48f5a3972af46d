package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTicks = 100

// cpuTimes are CPU seconds spent so far: by one process and the children
// it has waited for (a worker and its git processes), and by the whole
// machine (busy and all).
type cpuTimes struct {
	proc      float64
	busy, all float64
	ok        bool
}

// readCPU reads pid's and the machine's CPU times from /proc (ok false
// where there is none).
func readCPU(pid int) cpuTimes {
	var t cpuTimes
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return t
	}
	// The command name is in parentheses and may hold spaces: fields
	// count from the last ")". utime stime cutime cstime are fields 14–17.
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return t
	}
	for _, v := range f[11:15] {
		n, _ := strconv.ParseFloat(v, 64)
		t.proc += n / clockTicks
	}
	all, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t
	}
	line, _, _ := strings.Cut(string(all), "\n")
	cols := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(cols) < 9 || cols[0] != "cpu" {
		return t
	}
	for i, v := range cols[1:9] {
		n, _ := strconv.ParseFloat(v, 64)
		t.all += n / clockTicks
		if i != 3 && i != 4 { // idle, iowait
			t.busy += n / clockTicks
		}
	}
	t.ok = true
	return t
}

// add sums two spans of CPU.
func (t cpuTimes) add(o cpuTimes) cpuTimes {
	return cpuTimes{proc: t.proc + o.proc, busy: t.busy + o.busy, all: t.all + o.all, ok: t.ok && o.ok}
}

// sub is the CPU spent between two readings.
func (t cpuTimes) sub(o cpuTimes) cpuTimes {
	return cpuTimes{proc: t.proc - o.proc, busy: t.busy - o.busy, all: t.all - o.all, ok: t.ok && o.ok}
}

// machineSpeed is what machineProbe measured: the wall time of one git
// process's start and of one 4 KiB write and fsync.
type machineSpeed struct{ exec, fsync time.Duration }

// machineProbe times two things every job of the queue row does many
// times, on the machine as it is now: starting a git process (`git
// version`) and a small durable write (4 KiB written and fsynced in dir).
// Measured before and after the row's bursts, it says how fast the
// machine was while they ran: on a shared VM the same code's CPU per job
// drifts by a third within an hour, and the row's ratio with it.
func (b *bench) machineProbe(dir string) (machineSpeed, error) {
	const n = 20
	var s machineSpeed
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if _, err := b.git(dir, "version"); err != nil {
			return s, err
		}
	}
	s.exec = time.Since(t0) / n
	f, err := os.CreateTemp(dir, "probe-*")
	if err != nil {
		return s, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, 4096)
	t0 = time.Now()
	for i := 0; i < n; i++ {
		if _, err := f.WriteAt(block, int64(i)*4096); err != nil {
			return s, err
		}
		if err := f.Sync(); err != nil {
			return s, err
		}
	}
	s.fsync = time.Since(t0) / n
	return s, nil
}

// dataRootFS is what `conductor doctor` says of the file system under
// the queue row's data root (its "data root" line): on ext4 without a
// journal every file a job creates pays for the files deleted in the last
// minutes, which moves the row by several hundredths (docs/bench.md,
// fourteenth pass). Empty when doctor cannot say.
func (b *bench) dataRootFS(env []string) string {
	cmd := exec.Command(b.bin, "doctor", "--json")
	cmd.Env = env
	out, _ := cmd.Output() // exit 1 when no sandbox works: the report is still printed
	var rep struct {
		DataRoot *struct {
			FS, State, Detail string
		} `json:"dataRoot"`
	}
	if json.Unmarshal(out, &rep) != nil || rep.DataRoot == nil {
		return ""
	}
	return fmt.Sprintf("the data root's file system: %s (doctor: %s)", rep.DataRoot.FS, rep.DataRoot.State)
}
