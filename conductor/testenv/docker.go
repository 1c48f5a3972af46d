package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// dockerd is the one engine of a test binary: starting dockerd takes
// seconds, so every test of a package shares it (each uses containers of
// its own). It stops when the package's tests end (StopDocker, from
// TestMain) or with the test process.
var dockerd struct {
	once sync.Once
	host string
	err  error
	skip string
	cmd  *exec.Cmd
	dir  string
}

// Docker starts a private dockerd (once per test binary) on a unix socket in
// a fresh folder, with its own data root and exec root, and returns its
// DOCKER_HOST value ("unix:///…/d.sock"). Without dockerd and the docker CLI,
// or when not root (dockerd needs root), the test is skipped, unless
// CI=true. Call StopDocker from TestMain.
func Docker(t testing.TB) string {
	t.Helper()
	dockerd.once.Do(startDocker)
	if dockerd.skip != "" {
		redisUnavailable(t, dockerd.skip)
	}
	if dockerd.err != nil {
		t.Fatal(dockerd.err)
	}
	return dockerd.host
}

// dockerdExited is closed when the dockerd Docker started has exited.
var dockerdExited = make(chan struct{})

func startDocker() {
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		dockerd.skip = "dockerd (Debian's docker.io)"
		return
	}
	if _, err := exec.LookPath("docker"); err != nil {
		dockerd.skip = "the docker CLI (Debian's docker.io)"
		return
	}
	if os.Geteuid() != 0 {
		dockerd.skip = "root (to start dockerd)"
		return
	}
	// Short paths: the socket path must fit a sockaddr_un (107 bytes)
	// and containerd puts its own sockets under the exec root.
	dir, err := os.MkdirTemp("/tmp", "dk-")
	if err != nil {
		dockerd.err = err
		return
	}
	dockerd.dir = dir
	sock := filepath.Join(dir, "d.sock")
	logf, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		dockerd.err = err
		return
	}
	cmd := exec.Command(bin, "--host", "unix://"+sock,
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "x"),
		"--pidfile", filepath.Join(dir, "d.pid"), "--iptables=false", "--ip6tables=false",
		"--bridge=none", "--log-level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// The parent-death signal follows the thread that forks: start dockerd
	// from a thread of its own that lives as long as dockerd does (a Go
	// thread ends when a goroutine exits while locked to it, as the
	// sandbox's do, and would take dockerd with it).
	started := make(chan error)
	go func() {
		runtime.LockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			_ = cmd.Wait()
		}
		close(dockerdExited)
	}()
	if err := <-started; err != nil {
		dockerd.err = fmt.Errorf("start dockerd: %w", err)
		return
	}
	dockerd.cmd = cmd
	dockerd.host = "unix://" + sock
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := exec.CommandContext(ctx, "docker", "--host", dockerd.host, "version").Run()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "dockerd.log"))
			dockerd.err = fmt.Errorf("dockerd did not answer on %s within 60s: %v\n%s", sock, err, log)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StopDocker stops the dockerd Docker started, if any, and removes its
// folder; the next Docker starts a new one. Containers left running are
// stopped with it.
func StopDocker() {
	if dockerd.cmd == nil {
		return
	}
	_ = dockerd.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-dockerdExited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-dockerd.cmd.Process.Pid, syscall.SIGKILL)
		<-dockerdExited
	}
	dockerdExited = make(chan struct{})
	_ = os.RemoveAll(dockerd.dir)
	dockerd.once, dockerd.host, dockerd.err, dockerd.skip, dockerd.cmd, dockerd.dir = sync.Once{}, "", nil, "", nil, ""
}
