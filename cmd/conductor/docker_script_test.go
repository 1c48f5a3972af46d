package main

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/conductor/testenv"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// TestScriptDocker runs testdata/script/docker: doctor, run-task and review
// with the docker sandbox against a real dockerd the harness starts on a
// private socket ($DOCKER_HOST). Without dockerd it skips locally and fails
// when CI=true.
func TestScriptDocker(t *testing.T) {
	host := testenv.Docker(t)
	t.Cleanup(testenv.StopDocker)
	p := scriptParams("docker", map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"fakellm": fakellm.ScriptCmd,
	})
	setup := p.Setup
	p.Setup = func(env *testscript.Env) error {
		if err := setup(env); err != nil {
			return err
		}
		env.Setenv("DOCKER_HOST", host)
		return nil
	}
	testscript.Run(t, p)
}
