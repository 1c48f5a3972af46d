package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/conductor/termtext"
	"github.com/urfave/cli/v2"
)

// progressSandbox shows on a terminal what a long sandboxed step is doing:
// review's checks and gate and land's gate run for seconds to minutes, and
// a person should not watch silence. One line on stderr, rewritten every
// second ("gate: make test … 12s"), cleared when the command ends; stdout
// is untouched. Everything else is the wrapped backend's.
type progressSandbox struct {
	sandbox.Sandbox
	w     io.Writer
	every time.Duration // how often the line is rewritten (default 1s)
	mu    sync.Mutex    // one command's line at a time
}

// withProgress wraps sb when w is a terminal; sb as it is otherwise (a
// pipe, a file, --json) and when it is nil.
func withProgress(sb sandbox.Sandbox, w io.Writer, quiet bool) sandbox.Sandbox {
	if sb == nil || quiet || !isTerminal(w) {
		return sb
	}
	return &progressSandbox{Sandbox: sb, w: w}
}

// Close releases what the wrapped backend holds (the docker backend's
// containers): closeSandbox reaches it through the wrapper.
func (p *progressSandbox) Close() error { return sandbox.Close(p.Sandbox) }

func (p *progressSandbox) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	what := termtext.Line(strings.Join(spec.Argv, " "))
	if len(what) > 60 {
		what = what[:59] + "…"
	}
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(cmp.Or(p.every, time.Second))
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				fmt.Fprintf(p.w, "\r\033[K  running: %s … %s", what, now.Sub(start).Round(time.Second))
			}
		}
	}()
	res, err := p.Sandbox.Run(ctx, spec)
	close(done)
	wg.Wait()
	if d := time.Since(start); d >= cmp.Or(p.every, time.Second) {
		fmt.Fprintf(p.w, "\r\033[K  ran: %s (%s)\n", what, d.Round(100*time.Millisecond))
	}
	return res, err
}

// gateSandboxFor is the sandbox review's checks and land's gate run in,
// with the operator's options: the named backend (the sandbox knobs), else,
// when a gate will run, auto. When auto works nowhere sandbox.Unavailable
// lets the domain refuse with its own words. quiet (--json, --quiet) shows no progress.
func gateSandboxFor(c *cli.Context, d *deps, name string, needed bool, quiet bool) (sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	var err error
	switch {
	case name != "":
		if sb, err = d.openSandbox(c, name, ""); err != nil {
			return nil, err
		}
	case needed:
		if sb, err = sandbox.NewWithOptions(sandbox.BackendAuto, sandbox.OptionsFrom(d.config(c).SandboxLimits)); err != nil {
			return sandbox.Unavailable(err), nil // the domain refuses with its own words when its gate comes
		}
	}
	// The line's own carriage return and erase are conductor's: written
	// raw; the command shown is escaped (termtext) above.
	return withProgress(sb, cmp.Or[io.Writer](d.RawStderr, d.Stderr), quiet), nil
}
