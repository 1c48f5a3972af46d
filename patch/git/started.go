package git

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// Started is a git process started before its input is known: its start-up
// (a millisecond or two, most of a small command's time) overlaps the
// caller's other work. Send hands it its whole input and closes its
// standard input; a Started that is never sent anything is Abandoned: it
// reads an empty input, which for the commands used this way (`update-ref
// --stdin`, `diff-tree --stdin`) means doing nothing.
type Started struct {
	args   []string
	ctx    context.Context
	cancel context.CancelFunc
	ready  chan struct{} // closed once the process started (or failed to)
	cmd    *exec.Cmd
	cmdCtx context.Context // the process's own (bounded by its deadline)
	in     io.WriteCloser
	out    *bufio.Reader
	stderr bytes.Buffer
	err    error // the start's error
	sent   bool
	waited bool
	result error // Wait's
}

// Start starts git with args in the background and returns at once. The
// caller must end it with Run, Send and Wait, or Abandon.
func (g Git) Start(ctx context.Context, args ...string) *Started {
	ctx, cancel := context.WithCancel(ctx)
	s := &Started{args: args, ctx: ctx, cancel: cancel, ready: make(chan struct{})}
	s.cmd, s.cmdCtx = g.command(ctx, args...)
	s.cmd.Stderr = &s.stderr
	go func() {
		defer close(s.ready)
		var stdout io.ReadCloser
		if s.in, s.err = s.cmd.StdinPipe(); s.err == nil {
			stdout, s.err = s.cmd.StdoutPipe()
		}
		if s.err == nil {
			s.err = s.cmd.Start()
		}
		if s.err != nil {
			s.err = &GitError{Args: args, Err: s.err}
			return
		}
		s.out = bufio.NewReaderSize(stdout, 64<<10)
	}()
	return s
}

// Send writes input and closes the process's standard input; its output
// is then read from Stdout, and Wait ends it. Send may be called once.
func (s *Started) Send(input string) error {
	<-s.ready
	if s.err != nil {
		return s.err
	}
	if s.sent {
		return fmt.Errorf("git %s: input sent twice", strings.Join(s.args, " "))
	}
	s.sent = true
	_, err := io.WriteString(s.in, input)
	if cerr := s.in.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// git exited early (it refused its arguments): Wait says why.
		return s.Wait()
	}
	return nil
}

// Stdout is the process's standard output (after a successful Send).
func (s *Started) Stdout() *bufio.Reader { return s.out }

// Wait waits for the process and returns a *GitError (with its standard
// error) when it failed. Output not read yet is discarded first.
func (s *Started) Wait() error {
	<-s.ready
	if s.err != nil || s.waited {
		return cmp.Or(s.err, s.result)
	}
	s.waited = true
	defer s.cancel()
	if !s.sent {
		s.sent = true
		s.in.Close()
	}
	io.Copy(io.Discard, s.out)
	if err := s.cmd.Wait(); err != nil {
		s.result = &GitError{Args: s.args, Stderr: s.stderr.Bytes(), Err: killedErr(s.cmdCtx, err)}
	}
	return s.result
}

// Kill stops the process (a consumer that gave up on its output); Wait
// still reaps it.
func (s *Started) Kill() { s.cancel() }

// Run sends input, waits, and returns the standard output: RunInput with
// the start already paid.
func (s *Started) Run(input string) ([]byte, error) {
	if err := s.Send(input); err != nil {
		return nil, err
	}
	out, rerr := io.ReadAll(s.out)
	if err := s.Wait(); err != nil {
		if ge, ok := err.(*GitError); ok {
			ge.Stdout = out
		}
		return out, err
	}
	return out, rerr
}

// Abandon ends a process that was never sent its input (it reads an
// empty one); it is a no-op after Wait.
func (s *Started) Abandon() { s.Wait() }
