package sandbox

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"syscall"
)

// The seccomp filter bwrap installs (--seccomp) just before it starts the
// command. It is a short deny list on top of what the namespaces and the
// absence of capabilities already forbid: the kernel keyrings (shared by
// every command of one uid: a channel between workers), and the kernel
// interfaces with the worst record that a build or a test does not need
// (bpf, perf_event_open, userfaultfd, io_uring). Other architectures' system
// calls (32-bit compatibility, x32) are refused wholesale, so a 32-bit
// binary cannot call around the list.

// blockedSyscalls are refused with EPERM, by name, with their numbers on
// each supported architecture.
var blockedSyscalls = []struct {
	name         string
	amd64, arm64 uint32
}{
	{"add_key", 248, 217},
	{"request_key", 249, 218},
	{"keyctl", 250, 219},
	{"perf_event_open", 298, 241},
	{"bpf", 321, 280},
	{"userfaultfd", 323, 282},
	{"io_uring_setup", 425, 425},
	{"io_uring_enter", 426, 426},
	{"io_uring_register", 427, 427},
}

// Classic BPF and seccomp constants (linux/filter.h, linux/seccomp.h,
// linux/audit.h).
const (
	bpfLdWAbs  = 0x20 // BPF_LD | BPF_W | BPF_ABS
	bpfJeqK    = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	bpfJgeK    = 0x35 // BPF_JMP | BPF_JGE | BPF_K
	bpfRetK    = 0x06 // BPF_RET | BPF_K
	retAllow   = 0x7fff0000
	retErrno   = 0x00050000
	archX86_64 = 0xc000003e
	archArm64  = 0xc00000b7
	x32Bit     = 0x40000000
	offNr      = 0 // struct seccomp_data.nr
	offArch    = 4 // struct seccomp_data.arch
)

type sockFilter struct {
	code   uint16
	jt, jf uint8
	k      uint32
}

// seccompFilter returns the filter for this architecture as bwrap reads it
// (an array of struct sock_filter), or nil when there is none for it.
func seccompFilter(goarch string) []byte {
	var arch uint32
	nr := func(s struct {
		name         string
		amd64, arm64 uint32
	}) uint32 {
		if goarch == "arm64" {
			return s.arm64
		}
		return s.amd64
	}
	switch goarch {
	case "amd64":
		arch = archX86_64
	case "arm64":
		arch = archArm64
	default:
		return nil
	}
	// Layout: checks, then [allow, deny, wrong-arch] at the end; jumps are
	// offsets from the next instruction.
	var prog []sockFilter
	checks := 3 + len(blockedSyscalls) // ld arch, jeq arch, ld nr, one jeq per call
	if goarch == "amd64" {
		checks++ // jge x32
	}
	allow := checks
	deny := allow + 1
	wrongArch := deny + 1
	jump := func(at, target int) uint8 { return uint8(target - at - 1) }

	prog = append(prog, sockFilter{code: bpfLdWAbs, k: offArch})
	prog = append(prog, sockFilter{code: bpfJeqK, k: arch, jt: 0, jf: jump(len(prog), wrongArch)})
	prog = append(prog, sockFilter{code: bpfLdWAbs, k: offNr})
	if goarch == "amd64" {
		prog = append(prog, sockFilter{code: bpfJgeK, k: x32Bit, jt: jump(len(prog), wrongArch), jf: 0})
	}
	for _, s := range blockedSyscalls {
		prog = append(prog, sockFilter{code: bpfJeqK, k: nr(s), jt: jump(len(prog), deny), jf: 0})
	}
	prog = append(prog,
		sockFilter{code: bpfRetK, k: retAllow},
		sockFilter{code: bpfRetK, k: retErrno | uint32(syscall.EPERM)},
		sockFilter{code: bpfRetK, k: retErrno | uint32(syscall.ENOSYS)},
	)
	if len(prog) != wrongArch+1 {
		panic(fmt.Sprintf("seccomp: program layout %d != %d", len(prog), wrongArch+1))
	}
	out := make([]byte, 0, 8*len(prog))
	for _, f := range prog {
		out = binary.NativeEndian.AppendUint16(out, f.code)
		out = append(out, f.jt, f.jf)
		out = binary.NativeEndian.AppendUint32(out, f.k)
	}
	return out
}

// hostSeccompFilter is the filter for the running architecture.
func hostSeccompFilter() []byte { return seccompFilter(runtime.GOARCH) }
