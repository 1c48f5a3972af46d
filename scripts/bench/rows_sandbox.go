package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/conductor/testenv"
)

// sandboxScript is the sandbox row's 20 commands: small programs, so the
// row measures the sandbox, not the work.
var sandboxScript = func() [][]string {
	var s [][]string
	for i := 0; i < 5; i++ {
		s = append(s, []string{"true"}, []string{"echo", "x"}, []string{"ls", "-a"}, []string{"pwd"})
	}
	return s
}()

// rowSandbox is the docker backend's cost against bwrap's on the same
// 20-command script (docker: in the job's running container), with the
// per-job container start and removal in the note. A backend that does not
// work here makes the row say so instead of failing the bench.
func (b *bench) rowSandbox() error {
	r := row{name: "sandbox, 20 commands: docker exec in the job's container vs a fresh bwrap sandbox each", goal: "(reported)", oursLabel: "docker", floorLabel: "bwrap"}
	skip := func(why string) error {
		r.oursCell, r.floorCell, r.ratioCell, r.note = "-", "-", "-", "not measured here: "+why
		b.rows = append(b.rows, r)
		return nil
	}
	o, err := sandbox.OptionsFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	bw, err := sandbox.NewWithOptions(sandbox.BackendBwrap, o)
	if err != nil {
		return skip(err.Error())
	}
	dk, err := sandbox.NewWithOptions(sandbox.BackendDocker, o)
	engine := "the engine DOCKER_HOST names"
	if err != nil && o.Docker.Host == "" {
		// No engine running: a private dockerd, as the tests start one
		// (the first warming of its image is in the container's start).
		d, derr := testenv.StartDockerd()
		if derr != nil {
			return skip(fmt.Sprintf("%v; a private dockerd: %v", err, derr))
		}
		defer d.Stop()
		o.Docker.Host, engine = d.Host, "a private dockerd the bench started"
		dk, err = sandbox.NewWithOptions(sandbox.BackendDocker, o)
	}
	if err != nil {
		return skip(err.Error())
	}
	defer sandbox.Close(dk)
	// A folder the sandbox uid can reach ($TMPDIR may be private).
	dir, err := os.MkdirTemp("/tmp", "conductor-bench-sandbox-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	run := func(sb sandbox.Sandbox, argv []string) error {
		res, err := sb.Run(context.Background(), sandbox.Spec{Dir: dir, Argv: argv, Env: []string{"PATH=/usr/bin:/bin"}, Timeout: time.Minute})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("%s %v: exit %d: %s", sb.Name(), argv, res.ExitCode, res.Output)
		}
		return err
	}
	script := func(sb sandbox.Sandbox) (time.Duration, error) {
		t0 := time.Now()
		for _, argv := range sandboxScript {
			if err := run(sb, argv); err != nil {
				return 0, err
			}
		}
		return time.Since(t0), nil
	}
	t0 := time.Now()
	if err := run(dk, []string{"true"}); err != nil { // the job's container
		return err
	}
	start := time.Since(t0)
	for i := 0; i < b.sz.fastRuns; i++ {
		d, err := script(dk)
		if err != nil {
			return err
		}
		f, err := script(bw)
		if err != nil {
			return err
		}
		r.ours, r.floor = append(r.ours, d), append(r.floor, f)
	}
	t0 = time.Now()
	if err := sandbox.Close(dk); err != nil {
		return err
	}
	r.note = fmt.Sprintf("on %s; per job, docker also makes the container on the first command (%s, `true` included) and removes it at the end (%s)", engine, fmtDur(start.Seconds()), fmtDur(time.Since(t0).Seconds()))
	b.rows = append(b.rows, r)
	return nil
}
