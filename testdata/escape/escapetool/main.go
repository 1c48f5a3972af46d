// Command escapetool is the escape suite's hostile worker program: each
// subcommand attempts one way out of the sandbox and reports what happened.
// It is built by the tests (static, no cgo) and run inside the sandbox, so
// the suite does not depend on which shells or utilities the host has.
//
//	escapetool read PATH             print PATH's content
//	escapetool write PATH TEXT       create or truncate PATH with TEXT
//	escapetool mkdir PATH            create PATH and its parents
//	escapetool symlink TARGET LINK   plant a symlink
//	escapetool link OLD NEW          make a hard link
//	escapetool fill PATH BYTES       write BYTES bytes to PATH
//	escapetool alloc BYTES           map and touch BYTES bytes of memory (mmap: fails cleanly with ENOMEM)
//	escapetool allocheap BYTES       allocate and touch BYTES bytes on the Go heap
//	escapetool mkfifo PATH           make a named pipe (a file that blocks its reader)
//	escapetool env                   print the environment, one per line
//	escapetool connect ADDR          open a TCP connection to ADDR (unix:PATH: a unix socket)
//	escapetool spew                  write to stdout forever
//	escapetool forkbomb              start copies of itself forever
//	escapetool orphans TOKEN         leave children behind (one in a new session), then sleep
//	escapetool linger TOKEN          sleep forever (TOKEN marks it in the process table)
//	escapetool fds                   list the descriptors it inherited beyond 0, 1, 2
//	escapetool syscalls              call keyctl, bpf, perf_event_open, userfaultfd, io_uring_setup; print each error
//	escapetool kill PID              send SIGKILL to PID (-1: every process it may signal)
//	escapetool keys                  read every key of the kernel keyrings it possesses
//	escapetool id                    print uid, gid and groups
//
// Exit status: 0 when the attempt succeeded, 1 when it failed (the error is
// printed), 2 on usage errors.
package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	args := os.Args[2:]
	need := func(n int) {
		if len(args) != n {
			usage()
		}
	}
	var err error
	switch os.Args[1] {
	case "read":
		need(1)
		var b []byte
		if b, err = os.ReadFile(args[0]); err == nil {
			os.Stdout.Write(b)
		}
	case "write":
		need(2)
		err = os.WriteFile(args[0], []byte(args[1]), 0o644)
	case "mkdir":
		need(1)
		err = os.MkdirAll(args[0], 0o755)
	case "symlink":
		need(2)
		err = os.Symlink(args[0], args[1])
	case "fill":
		need(2)
		var n int64
		if _, err = fmt.Sscan(args[1], &n); err == nil {
			err = fill(args[0], n)
		}
	case "alloc", "allocheap":
		need(1)
		var n int
		if _, err = fmt.Sscan(args[0], &n); err == nil {
			if os.Args[1] == "alloc" {
				held, err = syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
			} else {
				held = make([]byte, n)
			}
		}
		if err == nil {
			touch(held)
			fmt.Printf("allocated %d bytes\n", len(held))
		}
	case "mkfifo":
		need(1)
		err = syscall.Mkfifo(args[0], 0o644)
	case "socket":
		// A unix socket file left in place (a net listener would
		// unlink it on close).
		need(1)
		var fd int
		if fd, err = syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0); err == nil {
			err = syscall.Bind(fd, &syscall.SockaddrUnix{Name: args[0]})
		}
	case "link":
		need(2)
		err = os.Link(args[0], args[1])
	case "env":
		need(0)
		for _, kv := range os.Environ() {
			fmt.Println(kv)
		}
	case "connect":
		need(1)
		var c net.Conn
		network, addr := "tcp", args[0]
		if a, ok := strings.CutPrefix(addr, "unix:"); ok {
			network, addr = "unix", a
		}
		if c, err = net.DialTimeout(network, addr, 2*time.Second); err == nil {
			fmt.Fprintf(c, "escaped\n")
			c.Close()
			fmt.Println("connected")
		}
	case "spew":
		need(0)
		line := []byte(strings.Repeat("y", 4095) + "\n")
		for {
			if _, err = os.Stdout.Write(line); err != nil {
				break
			}
		}
	case "forkbomb":
		forkbomb()
	case "orphans":
		need(1)
		err = orphans(args[0])
	case "linger":
		need(1)
		for {
			time.Sleep(time.Hour)
		}
	case "fds":
		need(0)
		// The descriptors this process holds beyond stdin, stdout and
		// stderr (ReadDir's own is closed by the time it returns).
		var ents []os.DirEntry
		if ents, err = os.ReadDir("/proc/self/fd"); err == nil {
			for _, e := range ents {
				if n := e.Name(); n != "0" && n != "1" && n != "2" {
					target, err := os.Readlink("/proc/self/fd/" + n)
					if err != nil || strings.HasPrefix(target, "anon_inode:[event") || strings.HasSuffix(target, "/fd") || strings.HasPrefix(target, "/sys/fs/cgroup/") {
						continue // gone, or the Go runtime's own (poller, cgroup CPU limits)
					}
					fmt.Printf("fd %s -> %s\n", n, target)
				}
			}
		}
	case "syscalls":
		need(0)
		probeSyscalls()
	case "kill":
		need(1)
		var pid int
		if _, err = fmt.Sscan(args[0], &pid); err == nil {
			err = syscall.Kill(pid, syscall.SIGKILL)
		}
	case "keys":
		need(0)
		err = keys()
	case "id":
		need(0)
		groups, _ := os.Getgroups()
		fmt.Printf("uid=%d gid=%d euid=%d groups=%v\n", os.Getuid(), os.Getgid(), os.Geteuid(), groups)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "escapetool:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: escapetool read|write|mkdir|symlink|link|fill|mkfifo|socket|env|connect|spew|forkbomb|orphans|linger|fds|syscalls|kill|keys|id ...")
	os.Exit(2)
}

// forkbomb starts copies of itself as fast as it can and never exits; each
// copy does the same.
func forkbomb() {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	for {
		cmd := exec.Command(self, "forkbomb")
		if cmd.Start() != nil {
			time.Sleep(time.Millisecond)
		}
	}
}

// orphans leaves two lingering children behind: one in its own process
// group, one in a new session (as a daemon would), then sleeps itself.
func orphans(token string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for _, attr := range []*syscall.SysProcAttr{{Setpgid: true}, {Setsid: true}} {
		cmd := exec.Command(self, "linger", token)
		cmd.SysProcAttr = attr
		if err := cmd.Start(); err != nil {
			return err
		}
		fmt.Println("started", filepath.Base(self), "linger", token, "pid", cmd.Process.Pid)
	}
	for {
		time.Sleep(time.Hour)
	}
}

// fill writes n bytes to path, 1 MiB at a time.
func fill(path string, n int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for n > 0 {
		k := int64(len(buf))
		if n < k {
			k = n
		}
		if _, err := f.Write(buf[:k]); err != nil {
			f.Close()
			return err
		}
		n -= k
	}
	return f.Close()
}

// keys reads the session, user-session, user and process keyrings and every
// key in them it may read, printing the payloads.
func keys() error {
	const (
		sysKeyctl   = 250 // amd64
		keyctlRead  = 11
		keyctlDescr = 6
	)
	if runtime.GOARCH != "amd64" {
		return fmt.Errorf("keys: only on amd64")
	}
	read := func(id int32) ([]byte, error) {
		buf := make([]byte, 4096)
		n, _, errno := syscall.Syscall6(sysKeyctl, keyctlRead, uintptr(id), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
		if errno != 0 {
			return nil, errno
		}
		return buf[:min(int(n), len(buf))], nil
	}
	found := false
	for _, ring := range []int32{-3, -5, -4, -2, -1} { // session, user-session, user, process, thread
		ids, err := read(ring)
		if err != nil {
			fmt.Printf("keyring %d: %v\n", ring, err)
			continue
		}
		for i := 0; i+4 <= len(ids); i += 4 {
			id := int32(uint32(ids[i]) | uint32(ids[i+1])<<8 | uint32(ids[i+2])<<16 | uint32(ids[i+3])<<24)
			payload, err := read(id)
			if err != nil {
				fmt.Printf("key %d in %d: %v\n", id, ring, err)
				continue
			}
			found = true
			fmt.Printf("key %d in %d: %q\n", id, ring, payload)
		}
	}
	if !found {
		return fmt.Errorf("no readable key")
	}
	return nil
}

// probeSyscalls calls kernel interfaces the sandbox refuses, with harmless
// arguments, and prints how each call ended ("ok" or the error).
func probeSyscalls() {
	if runtime.GOARCH != "amd64" {
		fmt.Println("syscalls: only on amd64")
		return
	}
	calls := []struct {
		name string
		nr   uintptr
		args [3]uintptr
	}{
		{"keyctl", 250, [3]uintptr{0, ^uintptr(2), 0}}, // KEYCTL_GET_KEYRING_ID of the session keyring
		{"add_key", 248, [3]uintptr{0, 0, 0}},
		{"bpf", 321, [3]uintptr{^uintptr(0), 0, 0}},
		{"perf_event_open", 298, [3]uintptr{0, 0, 0}},
		{"userfaultfd", 323, [3]uintptr{0, 0, 0}},
		{"io_uring_setup", 425, [3]uintptr{0, 0, 0}},
	}
	for _, c := range calls {
		_, _, errno := syscall.Syscall(c.nr, c.args[0], c.args[1], c.args[2])
		if errno == 0 {
			fmt.Printf("%s: ok\n", c.name)
		} else {
			fmt.Printf("%s: %v\n", c.name, errno)
		}
	}
}

// held keeps alloc's memory in use until the program exits.
var held []byte

// touch writes every page of b, so the memory is really used.
func touch(b []byte) {
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
}
