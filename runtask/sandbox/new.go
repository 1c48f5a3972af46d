package sandbox

import (
	"fmt"
	"os"
	"runtime"
)

// Backend names accepted by New.
const (
	BackendAuto   = "auto"
	BackendBwrap  = "bwrap"
	BackendNone   = "none"
	BackendDocker = "docker"
)

// New returns the named backend with the options from the environment
// (OptionsFromEnv(os.Getenv)). See NewWithOptions.
func New(name string) (Sandbox, error) {
	o, err := OptionsFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	return NewWithOptions(name, o)
}

// NewWithOptions returns a backend:
//
//   - "bwrap": bubblewrap; checked by running one command in it now.
//   - "auto" (or ""): bwrap when it works, else an error wrapping
//     ErrUnavailable. It never falls back to none.
//   - "none": no isolation; warns on o.Warn on every run. Only when asked
//     for by name.
//   - "docker": not built; always ErrUnavailable, saying whether an engine
//     is reachable.
//
// An unknown name is an error that does not wrap ErrUnavailable.
func NewWithOptions(name string, o Options) (Sandbox, error) {
	o = o.withDefaults()
	switch name {
	case BackendAuto, "", BackendBwrap:
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
	case BackendNone:
		return &noneBackend{opts: o}, nil
	case BackendDocker:
		d := probeDocker()
		return nil, fmt.Errorf("%w: docker: the docker backend is not built in this version (%s); use bwrap", ErrUnavailable, d.Detail)
	}
	return nil, fmt.Errorf("unknown sandbox backend %q (want auto, bwrap, none or docker)", name)
}
