package sandbox

import (
	"fmt"
	"io"
	"runtime"
	"strings"
)

// Backend names accepted by New.
const (
	BackendAuto   = "auto"
	BackendBwrap  = "bwrap"
	BackendNone   = "none"
	BackendDocker = "docker"
)

// NewWithOptions returns a backend:
//
//   - "bwrap": bubblewrap; checked by running one command in it now.
//   - "auto" (or ""): bwrap when it works, else docker when an engine
//     answers, else an error wrapping ErrUnavailable. It never falls back
//     to none.
//   - "none": no isolation; warns on o.Warn on every run. Only when asked
//     for by name.
//   - "docker": one container per job (docker.go); ErrUnavailable when no
//     engine answers. Close (sandbox.Close) removes its containers; New
//     removes those of conductor processes that are gone.
//
// An unknown name is an error that does not wrap ErrUnavailable.
func NewWithOptions(name string, o Options) (Sandbox, error) {
	o = o.withDefaults()
	switch name {
	case BackendAuto, "":
		b, berr := openBwrap(o)
		if berr == nil {
			return b, nil
		}
		d, derr := newDocker(o)
		if derr == nil {
			return d, nil
		}
		return nil, fmt.Errorf("%w: auto: neither bwrap nor docker works here (auto never falls back to none): %v; %v",
			ErrUnavailable, unwrapUnavailable(berr), unwrapUnavailable(derr))
	case BackendBwrap:
		return openBwrap(o)
	case BackendNone:
		return &noneBackend{opts: o}, nil
	case BackendDocker:
		return newDocker(o)
	}
	return nil, fmt.Errorf("unknown sandbox backend %q (want auto, bwrap, none or docker)", name)
}

func openBwrap(o Options) (Sandbox, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("%w: bwrap: bubblewrap needs Linux (this is %s)", ErrUnavailable, runtime.GOOS)
	}
	b, err := newBwrap(o)
	if err != nil {
		return nil, err
	}
	if err := b.selfTest(); err != nil {
		return nil, fmt.Errorf("%w: bwrap: %v", ErrUnavailable, err)
	}
	return b, nil
}

// unwrapUnavailable drops the "sandbox unavailable: " prefix of err's text.
func unwrapUnavailable(err error) string {
	return strings.TrimPrefix(err.Error(), ErrUnavailable.Error()+": ")
}

// Close releases what sb holds beyond one command: the docker backend's
// containers (one per job). Call it when the job (the run, the review, the
// landing) ends; a nil sb or a backend holding nothing is a no-op.
func Close(sb Sandbox) error {
	if c, ok := sb.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
