package main

import (
	"context"
	"io"
	"testing"

	"github.com/conductor-dev/conductor/conductor/sandbox"
)

// closingSandbox counts Close calls.
type closingSandbox struct{ closed int }

func (c *closingSandbox) Name() string { return "fake" }
func (c *closingSandbox) Run(context.Context, sandbox.Spec) (sandbox.Result, error) {
	return sandbox.Result{}, nil
}
func (c *closingSandbox) Close() error { c.closed++; return nil }

// The progress wrapper must not hide a backend's Close: a docker backend's
// containers would outlive review and land.
func TestCloseSandboxReachesThroughTheProgressWrapper(t *testing.T) {
	fake := &closingSandbox{}
	d := &deps{Stderr: io.Discard}
	closeSandbox(d, &progressSandbox{Sandbox: fake, w: io.Discard})
	closeSandbox(d, nil)
	if fake.closed != 1 {
		t.Fatalf("Close called %d times through the wrapper, want 1", fake.closed)
	}
}
