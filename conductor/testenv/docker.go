package testenv

import (
	"context"
	"errors"
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
	d    *Dockerd
	err  error
	skip string
}

// Docker starts a private dockerd (once per test binary) on a unix socket in
// a fresh folder, with its own data root and exec root, and returns its
// DOCKER_HOST value ("unix:///…/d.sock"). Without dockerd and the docker CLI,
// or when not root (dockerd needs root), the test is skipped, unless
// CI=true. Call StopDocker from TestMain.
func Docker(t testing.TB) string {
	t.Helper()
	dockerd.once.Do(func() {
		dockerd.d, dockerd.err = StartDockerd()
		var no *NoDockerError
		if errors.As(dockerd.err, &no) {
			dockerd.skip, dockerd.err = no.Missing, nil
		}
	})
	if dockerd.skip != "" {
		redisUnavailable(t, dockerd.skip)
	}
	if dockerd.err != nil {
		t.Fatal(dockerd.err)
	}
	return dockerd.d.Host
}

// StopDocker stops the dockerd Docker started, if any, and removes its
// folder; the next Docker starts a new one. Containers left running are
// stopped with it.
func StopDocker() {
	if dockerd.d != nil {
		dockerd.d.Stop()
	}
	dockerd.once, dockerd.d, dockerd.err, dockerd.skip = sync.Once{}, nil, nil, ""
}

// Dockerd is a private Docker engine (StartDockerd).
type Dockerd struct {
	Host   string // its DOCKER_HOST value
	cmd    *exec.Cmd
	dir    string
	exited chan struct{}
}

// NoDockerError is StartDockerd's answer where no engine can start here.
type NoDockerError struct{ Missing string }

func (e *NoDockerError) Error() string { return "no Docker engine here: needs " + e.Missing }

// StartDockerd starts a private dockerd on a unix socket in a fresh folder
// under /tmp, with its own data root and exec root, no network of its own
// and no iptables rules, and waits until it answers. A *NoDockerError says
// what is missing (dockerd, the docker CLI, root). Stop ends it.
func StartDockerd() (*Dockerd, error) {
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		return nil, &NoDockerError{"dockerd (Debian's docker.io)"}
	}
	if _, err := exec.LookPath("docker"); err != nil {
		return nil, &NoDockerError{"the docker CLI (Debian's docker.io)"}
	}
	if os.Geteuid() != 0 {
		return nil, &NoDockerError{"root (to start dockerd)"}
	}
	// Short paths: the socket path must fit a sockaddr_un (107 bytes)
	// and containerd puts its own sockets under the exec root.
	dir, err := os.MkdirTemp("/tmp", "dk-")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "d.sock")
	logf, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--host", "unix://"+sock,
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "x"),
		"--pidfile", filepath.Join(dir, "d.pid"), "--iptables=false", "--ip6tables=false",
		"--bridge=none", "--log-level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	d := &Dockerd{Host: "unix://" + sock, cmd: cmd, dir: dir, exited: make(chan struct{})}
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
		close(d.exited)
	}()
	if err := <-started; err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start dockerd: %w", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := exec.CommandContext(ctx, "docker", "--host", d.Host, "version").Run()
		cancel()
		if err == nil {
			return d, nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "dockerd.log"))
			d.Stop()
			return nil, fmt.Errorf("dockerd did not answer on %s within 60s: %v\n%s", sock, err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop stops the engine (the containers it runs with it) and removes its
// folder.
func (d *Dockerd) Stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.exited
	}
	_ = os.RemoveAll(d.dir)
}
