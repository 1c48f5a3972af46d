package main

import (
	"fmt"
	"os/exec"
	"strings"
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
		"fakellm":    fakellm.ScriptCmd,
		"containers": containersCmd,
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

// containersCmd is the script command "containers": it prints the sandbox
// containers (running or not) of this script's worktrees and gate trees,
// those whose worktree label lies under $WORK (scripts run in parallel on
// one engine), as "containers: N NAME…".
func containersCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: containers")
	}
	out, err := exec.Command("docker", "--host", ts.Getenv("DOCKER_HOST"), "ps", "--all",
		"--filter", "label=dev.conductor.sandbox=1",
		"--format", `{{.Names}} {{.Label "dev.conductor.worktree"}}`).CombinedOutput()
	if err != nil {
		ts.Fatalf("docker ps: %v %s", err, out)
	}
	work := ts.Getenv("WORK")
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, dir, _ := strings.Cut(line, " ")
		if strings.HasPrefix(dir, work+"/") {
			names = append(names, name)
		}
	}
	fmt.Fprintf(ts.Stdout(), "containers: %d %s\n", len(names), strings.Join(names, " "))
}
