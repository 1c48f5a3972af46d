package sandbox

// toolConfigEnv tells the toolchains a sandboxed command may start to
// ignore per-user and system configuration files. HOME inside the sandbox
// is a scratch folder that the worker's own commands can write and that
// persists across a session's commands, so a file planted there by one
// command ($HOME/.config/go/env with GOFLAGS=-toolexec=…, ~/.npmrc with
// script-shell=…, a user site-packages .pth file) would otherwise steer
// the next allowlisted command. The repository's own configuration (its
// Makefile, package.json, .npmrc, go.mod, conftest.py) is the worker's
// code and runs as such: these variables do not change that.
var toolConfigEnv = []string{
	"GOENV=off",                   // go: no $HOME/.config/go/env (GOFLAGS, CC, GOTOOLCHAIN…)
	"GIT_CONFIG_GLOBAL=/dev/null", // git (started by go for VCS stamping): no ~/.gitconfig
	"GIT_CONFIG_NOSYSTEM=1",
	"NPM_CONFIG_USERCONFIG=/dev/null", // npm: no ~/.npmrc
	"NPM_CONFIG_SCRIPT_SHELL=/bin/sh", // over a project .npmrc's script-shell too (environment wins)
	"PYTHONNOUSERSITE=1",              // python: no user site-packages (.pth files run at start-up)
	"PIP_CONFIG_FILE=/dev/null",       // pip: no ~/.config/pip/pip.conf
}

// ToolConfigEnv returns the variables every sandboxed command gets so that
// configuration files in its HOME are ignored (GOENV=off,
// NPM_CONFIG_USERCONFIG=/dev/null, PYTHONNOUSERSITE=1, …). runtask adds
// them to worker commands, GateEnv to review checks and landing gates.
func ToolConfigEnv() []string { return append([]string(nil), toolConfigEnv...) }
