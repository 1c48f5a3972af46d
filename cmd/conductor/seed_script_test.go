package main

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/conductor/forge/fakegitea"
	"github.com/conductor-dev/conductor/conductor/testenv"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// TestScriptSeed runs the seed system's own payloads (testdata/script/seed):
// the role_dispatch job, the doc-writer example and the worker task
// template, each through `conductor enqueue` onto a real Redis and
// `conductor worker --once` with the scripted model. $SEED_REDIS_URL is one
// private redis-server for the suite; each script uses its own queue key.
func TestScriptSeed(t *testing.T) {
	url := testenv.Redis(t)
	p := scriptParams("seed", map[string]func(*testscript.TestScript, bool, []string){
		"fakellm":   fakellm.ScriptCmd,
		"fakegitea": fakegitea.ScriptCmd,
	})
	setup := p.Setup
	p.Setup = func(env *testscript.Env) error {
		env.Setenv("SEED_REDIS_URL", url)
		return setup(env)
	}
	testscript.Run(t, p)
}
