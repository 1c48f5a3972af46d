package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/sandbox"
)

// lineWriter records what is written and signals the first "running:".
type lineWriter struct {
	mu      sync.Mutex
	b       strings.Builder
	running chan struct{}
	once    sync.Once
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if strings.Contains(w.b.String(), "running:") {
		w.once.Do(func() { close(w.running) })
	}
	return len(p), nil
}

// slowBox is a sandbox whose command ends only once the progress line has
// been shown: no timing in the test.
type slowBox struct{ shown chan struct{} }

func (slowBox) Name() string { return "bwrap" }
func (b slowBox) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	<-b.shown
	time.Sleep(20 * time.Millisecond) // past one more tick, so the end line is printed
	return sandbox.Result{ExitCode: 0}, nil
}

func TestProgressSandbox(t *testing.T) {
	w := &lineWriter{running: make(chan struct{})}
	p := &progressSandbox{Sandbox: slowBox{shown: w.running}, w: w, every: 5 * time.Millisecond}
	if p.Name() != "bwrap" {
		t.Fatalf("name %q", p.Name())
	}
	res, err := p.Run(context.Background(), sandbox.Spec{Argv: []string{"make", "test", "\x1b]0;x\x07"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	got := w.b.String()
	if !strings.Contains(got, "running: make test \\x1b]0;x\\x07 … ") || !strings.Contains(got, "ran: make test") {
		t.Fatalf("progress %q", got)
	}
	if strings.Contains(got, "\x1b]") {
		t.Fatalf("the worker's escape reached the terminal: %q", got)
	}
	// Not a terminal (a buffer, a pipe): the sandbox is returned as is.
	if sb := withProgress(slowBox{}, &strings.Builder{}, false); sb != (slowBox{}) {
		t.Fatalf("wrapped for a non-terminal: %T", sb)
	}
}
