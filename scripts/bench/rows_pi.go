package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
	"github.com/conductor-dev/conductor/runtask"
)

// piTool is how the pi agent names a step's tool and arguments.
func piTool(s toolStep) (string, map[string]any) {
	switch s.tool {
	case runtask.ToolListDir:
		return "ls", map[string]any{"path": s.args["path"]}
	case runtask.ToolReadFile:
		return "read", map[string]any{"path": s.args["path"]}
	case runtask.ToolEditFile:
		return "edit", map[string]any{"path": s.args["path"], "edits": []any{map[string]any{"oldText": s.args["old_string"], "newText": s.args["new_string"]}}}
	default:
		return "write", map[string]any{"path": s.args["path"], "content": s.args["content"]}
	}
}

// rowPi: the overhead row's 20 tool steps driven by the real pi agent (in
// bwrap, through the run's model proxy, the steps replayed from a script)
// against the built-in runtime doing the same steps with a zero-latency
// model; both from a warm pool. pi's start-up (node, ~1.5 s of CPU) is the
// known cost; the factor is reported, not asserted.
func (b *bench) rowPi() error {
	r := row{name: "pi runtime per task, 20 tool steps, vs the built-in runtime (warm pool)", goal: "reported", oursLabel: "pi", floorLabel: "builtin"}
	piDir := cmp.Or(os.Getenv("CONDUCTOR_PI_DIR"), "/opt/conductor/pi")
	if _, err := runtask.FindPi(piDir); err != nil {
		r.oursCell, r.floorCell, r.ratioCell = "—", "—", "—"
		r.note = "not measured: " + err.Error()
		b.rows = append(b.rows, r)
		return nil
	}
	sbOpts, err := sandbox.OptionsFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	sb, err := sandbox.NewWithOptions(sandbox.BackendBwrap, sbOpts)
	if err != nil {
		return fmt.Errorf("the pi runtime runs only sandboxed: %w", err)
	}
	pol, err := policy.Load(roles.FS, "")
	if err != nil {
		return err
	}
	role, err := pol.Role("implementer")
	if err != nil {
		return err
	}
	steps, err := b.overheadSteps()
	if err != nil {
		return err
	}
	// The sandbox's uid must reach the worktrees.
	dataRoot := filepath.Join(b.tmp, "pi-data")
	for _, d := range []string{b.tmp, dataRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
	}
	var turns []any
	for i, s := range steps {
		name, args := piTool(s)
		turns = append(turns, map[string]any{"toolCalls": []any{map[string]any{"id": fmt.Sprintf("call_%d", i), "name": name, "arguments": args}},
			"usage": map[string]any{"promptTokens": 100, "completionTokens": 10}})
	}
	turns = append(turns, map[string]any{"content": "done", "usage": map[string]any{"promptTokens": 100, "completionTokens": 10}})
	script, _ := json.Marshal(map[string]any{"model": "bench", "mode": "history", "turns": turns})
	scriptFile := filepath.Join(b.tmp, "pi-script.json")
	if err := os.WriteFile(scriptFile, script, 0o644); err != nil {
		return err
	}
	reg, err := runtask.LoadRegistry("", envWith(nil))
	if err != nil {
		return err
	}
	task := func(session, runtime string) runtask.Task {
		return runtask.Task{TaskVersion: 1, ID: "t-bench-pi", Prompt: "Edit five files and add five.", Workspace: "bench",
			Capabilities: runtask.Capabilities{Tools: []string{"read_file", "write_file", "edit_file", "list_dir"}},
			Session:      session, TimeoutSeconds: 600, Base: b.base, MaxSteps: 30, Runtime: runtime}
	}
	run := func(session, runtime string) (time.Duration, error) {
		opts := runtask.Options{Task: task(session, runtime), Config: conductor.Config{DataRoot: dataRoot, PiDir: piDir, PoolSize: poolOf(1).PoolSize}, Repo: b.repo,
			Role: role, Sandbox: sb, Getenv: envWith(nil), Stderr: io.Discard}
		if runtime == runtask.RuntimePi {
			opts.Registry, opts.ModelAlias = reg, runtask.ReplayPrefix+scriptFile
		} else {
			opts.Model, opts.ModelName, opts.ModelAlias = &zeroModel{steps: steps}, "bench", "bench"
		}
		var res runrec.Result
		d, err := timed(func() (err error) {
			res, err = runtask.Run(b.ctx, opts)
			return err
		})
		if err != nil {
			return 0, err
		}
		if res.Status != runrec.StatusSucceeded || res.Steps < 20 || len(res.FilesChanged) != 10 {
			return 0, fmt.Errorf("%s run %s: status %s, %d steps, %d files changed (%s)", runtime, res.RunID, res.Status, res.Steps, len(res.FilesChanged), res.Error)
		}
		return d, nil
	}
	if _, err := run("pi-fill", runtask.RuntimeBuiltin); err != nil { // fills the pool
		return err
	}
	for i := 0; i < b.sz.fastRuns; i++ {
		f, err := run(fmt.Sprintf("pi-builtin-%d", i), runtask.RuntimeBuiltin)
		if err != nil {
			return err
		}
		o, err := run(fmt.Sprintf("pi-pi-%d", i), runtask.RuntimePi)
		if err != nil {
			return err
		}
		r.floor, r.ours = append(r.floor, f), append(r.ours, o)
	}
	r.note = "runtask.Run with \"runtime\": \"pi\": real pi in bwrap (one sandboxed command per round), the steps replayed through the run's model proxy; floor = the built-in runtime with a zero-latency model, same steps, same pool"
	b.rows = append(b.rows, r)
	return nil
}
