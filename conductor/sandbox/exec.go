package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

var (
	errTimeout        = errors.New("command timed out")
	errOutputExceeded = errors.New("command output exceeded the limit")
)

// Outcome names how a command ended (Result.Outcome).
const (
	OutcomeExited         = "exited"          // it exited by itself (any exit code)
	OutcomeSignaled       = "signaled"        // it was killed by a signal it did not get from us
	OutcomeTimeout        = "timeout"         // killed at Spec.Timeout
	OutcomeOutputExceeded = "output-exceeded" // killed after writing more than the kill limit
	OutcomeCancelled      = "cancelled"       // killed because the caller's context ended
	OutcomeMemoryExceeded = "memory-exceeded" // failed or killed at its memory limit
)

// runner holds what one execution needs besides the *exec.Cmd.
type runner struct {
	opts Options
	// afterStart runs once the process started; it may return a function
	// the runner calls to kill more than the process group (the bwrap
	// sandbox's pid namespace) and a function that waits until those
	// processes are gone.
	afterStart func() (kill func(), gone func(time.Duration) bool)
}

// execute starts cmd (whose Stdout/Stderr it sets), enforces timeout and
// output limits, kills the whole process group when the command ends or
// must stop, and reports what happened. cmd must have been built with
// SysProcAttr.Setpgid set.
func (r runner) execute(ctx context.Context, cmd *exec.Cmd, spec Spec) (Result, error) {
	// The command is started from a thread of its own that first joins a
	// new, empty session keyring: otherwise it would inherit (and possess)
	// the conductor's session keyring, and could read every key in it
	// whatever uid it runs as. The thread's credentials differ from the
	// others' from then on, so it is never unlocked: it ends with this
	// goroutine, after the command is gone (it must outlive the command:
	// the parent-death signal is tied to the thread that forked).
	type ret struct {
		res Result
		err error
	}
	done := make(chan ret, 1)
	go func() {
		runtime.LockOSThread()
		if err := joinEmptySessionKeyring(); err != nil {
			done <- ret{Result{ExitCode: -1}, fmt.Errorf("sandbox: isolate the kernel keyrings: %w", err)}
			return
		}
		res, err := r.executeHere(ctx, cmd, spec)
		done <- ret{res, err}
	}()
	v := <-done
	return v.res, v.err
}

// joinEmptySessionKeyring gives the calling thread a new anonymous session
// keyring (KEYCTL_JOIN_SESSION_KEYRING with no name). A kernel without
// keyrings (ENOSYS) has nothing to leak.
func joinEmptySessionKeyring() error {
	const keyctlJoinSessionKeyring = 1
	_, _, errno := syscall.Syscall(syscall.SYS_KEYCTL, keyctlJoinSessionKeyring, 0, 0)
	if errno != 0 && errno != syscall.ENOSYS {
		return errno
	}
	return nil
}

// executeHere runs the command from the calling goroutine's thread.
func (r runner) executeHere(ctx context.Context, cmd *exec.Cmd, spec Spec) (Result, error) {
	limit := spec.OutputLimit
	if limit <= 0 {
		limit = r.opts.OutputLimit
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if spec.Timeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, spec.Timeout, errTimeout)
		defer stop()
	}
	out := newCapture(limit, r.opts.OutputKillLimit, func() { cancel(errOutputExceeded) })
	cmd.Stdout = out
	cmd.Stderr = out
	if spec.Stdin != nil {
		cmd.Stdin = bytes.NewReader(spec.Stdin)
	}
	// Once the process has exited (or been killed) the pipes are closed
	// after this delay even if something still holds them open.
	cmd.WaitDelay = r.opts.KillGrace

	sealInheritedFDs()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Result{ExitCode: -1}, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	pid := cmd.Process.Pid
	var killMore func()
	var gone func(time.Duration) bool
	if r.afterStart != nil {
		killMore, gone = r.afterStart()
	}

	exited := make(chan struct{})
	go func() {
		// Wait for the exit without reaping: while the leader is a
		// zombie its pid (the process group id) cannot be reused, so
		// killing the group below can only reach our processes.
		waitNoReap(pid)
		close(exited)
	}()
	killed := false
	select {
	case <-exited:
	case <-ctx.Done():
		killed = true
		if killMore != nil {
			killMore()
		}
	}
	if killed && killMore != nil {
		// The sandbox's pid 1 is killed (and with it the namespace): let
		// bwrap reap it and exit by itself, so it is not left a zombie
		// for the host's init to collect (zombies count against the
		// uid's process limit, and a conductor running as a container's
		// pid 1 would never collect them).
		select {
		case <-exited:
		case <-time.After(250 * time.Millisecond):
		}
	}
	// Kill the whole group, also after a normal exit: a background
	// process a command left behind must not outlive it.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-exited
	waitErr := cmd.Wait()
	dur := time.Since(start)
	if gone != nil && !gone(r.opts.KillGrace) {
		return Result{ExitCode: -1, Duration: dur}, fmt.Errorf("run %s: processes of the sandbox still alive %s after the kill", spec.Argv[0], r.opts.KillGrace)
	}

	res := Result{ExitCode: -1, Duration: dur, Outcome: OutcomeExited}
	res.Output, res.Truncated = out.result()
	res.OutputBytes = out.written()
	if ps := cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Outcome = OutcomeSignaled
			res.Signal = ws.Signal().String()
		} else {
			res.ExitCode = ps.ExitCode()
		}
	}
	if killed {
		res.ExitCode = -1
		res.Signal = ""
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errTimeout):
			res.Outcome, res.TimedOut = OutcomeTimeout, true
		case errors.Is(cause, errOutputExceeded):
			res.Outcome, res.OutputExceeded = OutcomeOutputExceeded, true
		default:
			res.Outcome = OutcomeCancelled
			return res, fmt.Errorf("run %s: %w", spec.Argv[0], cause)
		}
		return res, nil
	}
	if waitErr != nil && !errors.Is(waitErr, exec.ErrWaitDelay) {
		var ee *exec.ExitError
		if !errors.As(waitErr, &ee) {
			return res, fmt.Errorf("run %s: %w", spec.Argv[0], waitErr)
		}
	}
	return res, nil
}

// sealInheritedFDs marks every open descriptor above stderr close-on-exec.
// Go opens its own descriptors that way, but a descriptor the conductor
// inherited from whoever started it (a CI runner's pipe, a supervisor's
// socket) is not, and would otherwise be inherited by every command, inside
// the sandbox too: a channel out of it. The commands' own descriptors
// (stdin, stdout, stderr and ExtraFiles) are set up by os/exec after the
// fork and are not affected.
func sealInheritedFDs() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		syscall.CloseOnExec(fd) // the directory's own descriptor is gone by now: EBADF, harmless
	}
}

// waitNoReap blocks until process pid has exited, leaving it a zombie for
// cmd.Wait to reap (waitid with WNOWAIT).
func waitNoReap(pid int) {
	const (
		pPID    = 1
		wExited = 4
		wNoWait = 0x01000000
	)
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info[0])), wExited|wNoWait, 0, 0)
		if errno != syscall.EINTR {
			return
		}
	}
}
