package runtask

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/runtask/fakellm/modelscript"
	"github.com/conductor-dev/conductor/runtask/modelproxy"
)

// The pi runtime drives the pi coding agent (npm @mariozechner/pi-coding-agent)
// headless, as one sandboxed command per round: pi, node and its tools
// (whose bash runs what the model asks, like run_command) all run inside
// the sandbox as the unprivileged uid, with no network and no credential.
// pi reaches the model through the run's model proxy (modelproxy), which
// holds the key, the token budget and the step limit, and counts the usage.
// Everything around the round (worktree, run record, extraction, review,
// landing) is the built-in runtime's.

// PiVersion is the pi release this conductor is tested with; pi installs of
// the same minor version are accepted.
const PiVersion = "0.73.1"

const piPackage = "@mariozechner/pi-coding-agent"

// piInsideDir is where the worktree appears inside the sandbox: pi records
// its working directory in the session and reopens it there next round.
const piInsideDir = "/work"

// piProxyPort is the loopback port the launcher forwards to the proxy: the
// sandbox has a network namespace of its own, so no other process shares it.
const piProxyPort = "11435"

//go:embed pi_launch.mjs
var piLauncher []byte

// PiInstall is a usable pi: its npm prefix, CLI entry point and version,
// and the node that runs it.
type PiInstall struct {
	Prefix  string
	CLI     string
	Version string
	Node    string
}

// ErrRuntimeUnavailable is wrapped when a task's runtime cannot run here.
var ErrRuntimeUnavailable = errors.New("runtime unavailable")

// FindPi checks the pi installed under prefix (an `npm install --prefix`
// folder; default <data root>/pi): the package, its version, and a node in
// a system folder the sandbox binds.
func FindPi(prefix string) (PiInstall, error) {
	in := PiInstall{Prefix: prefix}
	pkgDir := filepath.Join(prefix, "node_modules", filepath.FromSlash(piPackage))
	b, err := os.ReadFile(filepath.Join(pkgDir, "package.json"))
	if err != nil {
		return in, fmt.Errorf("%w: pi is not installed in %s (npm install --prefix %s %s@%s, or make pi): %v", ErrRuntimeUnavailable, prefix, prefix, piPackage, PiVersion, err)
	}
	var pkg struct {
		Version string            `json:"version"`
		Bin     map[string]string `json:"bin"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil || pkg.Bin["pi"] == "" {
		return in, fmt.Errorf("%w: %s/package.json does not describe pi", ErrRuntimeUnavailable, pkgDir)
	}
	in.Version = pkg.Version
	if minorOf(pkg.Version) != minorOf(PiVersion) {
		return in, fmt.Errorf("%w: pi %s in %s; this conductor drives pi %s (npm install --prefix %s %s@%s)", ErrRuntimeUnavailable, pkg.Version, prefix, PiVersion, prefix, piPackage, PiVersion)
	}
	in.CLI = filepath.Join(pkgDir, filepath.FromSlash(pkg.Bin["pi"]))
	if _, err := os.Stat(in.CLI); err != nil {
		return in, fmt.Errorf("%w: %v", ErrRuntimeUnavailable, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return in, fmt.Errorf("%w: node is not on PATH (apt-get install nodejs)", ErrRuntimeUnavailable)
	}
	if node, err = filepath.EvalSymlinks(node); err != nil {
		return in, fmt.Errorf("%w: node: %v", ErrRuntimeUnavailable, err)
	}
	if !strings.HasPrefix(node, "/usr/") && !strings.HasPrefix(node, "/bin/") {
		return in, fmt.Errorf("%w: node is %s, outside the system folders the sandbox binds (/usr, /bin)", ErrRuntimeUnavailable, node)
	}
	in.Node = node
	return in, nil
}

func minorOf(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// piTools maps the canonical tools a run may use onto pi's.
var piTools = map[string]string{
	ToolReadFile: "read", ToolGrep: "grep", ToolListDir: "ls",
	ToolWriteFile: "write", ToolEditFile: "edit", ToolRunCommand: "bash",
}

// PiEventsFile is pi's own event stream of a run, kept in the run folder
// beside the normalised transcript.
const PiEventsFile = "pi-events.jsonl"

// piSession is one pi round of a run.
type piSession struct {
	r       *runner
	proxy   *modelproxy.Proxy // the round's proxy: its usage is the run's
	mode    runMode
	spec    ModelSpec
	key     string
	install PiInstall
	script  *modelscript.Script // the replay script, for replay:FILE
}

func (p *piSession) Runtime() string { return RuntimePi }

// Turn runs pi once: the task's prompt on a new session, the follow-up on a
// refinement round; a crashed round is run again with the same prompt.
func (p *piSession) Turn(ctx context.Context) (string, string) {
	r, st := p.r, p.r.state
	if r.opts.Sandbox == nil {
		return runrec.StatusFailed, "runtime pi: no sandbox configured (pi's tools run commands; it runs only sandboxed)"
	}
	// pi reads project settings and a system prompt from .pi/ in its
	// working directory: a worktree that has one would let the worker
	// steer pi. Refused, never read.
	if _, err := r.root.Lstat(".pi"); err == nil {
		return runrec.StatusFailed, "runtime pi: the worktree has a .pi entry (pi would read it as project settings); remove it from the repository or use the builtin runtime"
	}
	deadline := r.started.Add(r.lim.Timeout)
	remaining := time.Until(deadline)
	if remaining <= 0 {
		return runrec.StatusTimeout, fmt.Sprintf("wall-clock limit of %s reached", r.lim.Timeout)
	}
	prompt := r.task.Prompt
	switch {
	case p.mode == modeFollowUp:
		prompt = r.opts.FollowUp
	case p.mode == modeContinue && r.opts.FollowUp != "":
		prompt = r.opts.FollowUp
	}
	if notes := r.takeNotes(ctx); notes != "" {
		prompt = notes + "\n\n" + prompt
	}
	// A prompt is one positional argument: never an option or an @file.
	if strings.HasPrefix(prompt, "-") || strings.HasPrefix(prompt, "@") {
		prompt = " " + prompt
	}
	sys, err := r.systemPrompt(ctx, r.state.BaseCommit)
	if err != nil {
		return runrec.StatusFailed, err.Error()
	}
	if p.mode == modeNew {
		r.transcript(transcriptLine{Type: lineSystem, Text: sys, Sources: r.promptSources})
	}
	r.transcript(transcriptLine{Type: lineUser, Text: prompt})

	dirs, err := p.prepare()
	if err != nil {
		return runrec.StatusFailed, "runtime pi: " + err.Error()
	}
	defer os.RemoveAll(dirs.base)
	defer os.RemoveAll(dirs.sock)

	proxy, err := p.startProxy(filepath.Join(dirs.sock, "llm.sock"))
	if err != nil {
		return runrec.StatusFailed, "runtime pi: " + err.Error()
	}
	defer proxy.Close()
	p.proxy = proxy

	var tools []string
	for _, t := range r.tools {
		if name, ok := piTools[t]; ok {
			tools = append(tools, name)
		}
	}
	argv := []string{p.install.Node, filepath.Join(dirs.launch, "launch.mjs"),
		filepath.Join(dirs.sock, "llm.sock"), piProxyPort, filepath.Join(dirs.out, "events.jsonl"), p.install.CLI,
		"--mode", "json", "--provider", "conductor", "--model", p.spec.Model,
		"--tools", strings.Join(tools, ","), "--session", filepath.Join(dirs.session, "session.jsonl"),
		"--no-context-files", "--no-extensions", "--no-skills", "--no-prompt-templates", "--no-themes",
	}
	if sys != "" {
		argv = append(argv, "--append-system-prompt", sys)
	}
	argv = append(argv, prompt)
	env := append(append([]string(nil), r.tb.env...),
		"PI_CODING_AGENT_DIR="+dirs.agent, "PI_OFFLINE=1", "NO_COLOR=1", "TERM=dumb")
	if err := makeScratch(r.scratch); err != nil {
		return runrec.StatusFailed, "runtime pi: scratch folder: " + err.Error()
	}
	r.ev.emit(Event{Event: "tool", Time: r.now(), RunID: st.RunID, Step: st.Step, Tool: "pi", Text: "pi " + p.install.Version + " started"})
	eventsPath := filepath.Join(dirs.out, "events.jsonl")
	stop := make(chan struct{})
	type followed struct {
		events []byte
		out    piOutcome
	}
	done := make(chan followed, 1)
	go func() {
		ev, o := p.follow(eventsPath, stop)
		done <- followed{ev, o}
	}()
	res, runErr := r.opts.Sandbox.Run(ctx, sandbox.Spec{
		Dir: r.lease.Dir(), DirInside: piInsideDir, Argv: argv, Env: env, Scratch: r.scratch, ReadOnlyDirs: r.tb.readOnly,
		Timeout: remaining, OutputLimit: fullOutputLimit,
		Mounts: []sandbox.Mount{
			{Path: p.install.Prefix}, {Path: dirs.launch}, {Path: dirs.sock}, {Path: dirs.agent, Writable: true},
			{Path: dirs.out, Writable: true}, {Path: dirs.session, Writable: true},
		},
	})
	close(stop)
	f := <-done
	events, out := f.events, f.out
	if len(events) > 0 {
		if err := runrec.WriteFileAtomic(r.runDir.Path(PiEventsFile), events, 0o644); err != nil {
			r.warnf("pi events: %v", err)
		}
	}
	if len(res.Output) > 0 {
		fmt.Fprintf(r.errFile, "%s", res.Output)
	}
	p.countTokens()
	u := proxy.Usage()
	switch {
	case ctx.Err() != nil:
		return runrec.StatusCancelled, "cancelled"
	case res.TimedOut || res.Outcome == sandbox.OutcomeTimeout:
		return runrec.StatusTimeout, fmt.Sprintf("wall-clock limit of %s reached", r.lim.Timeout)
	case runErr != nil:
		return runrec.StatusFailed, "runtime pi: " + runErr.Error()
	case proxy.Refused() == "insufficient_quota":
		return runrec.StatusBudget, fmt.Sprintf("token budget of %d reached (%d used)", r.lim.TokenBudget, u.TotalTokens)
	case proxy.Refused() == "step_limit":
		return runrec.StatusBudget, fmt.Sprintf("step limit of %d reached", r.lim.MaxSteps)
	case res.ExitCode != 0:
		return runrec.StatusFailed, fmt.Sprintf("pi exited with status %d: %s", res.ExitCode, tail(res.Output, 400))
	case !out.ended:
		return runrec.StatusFailed, "pi ended without finishing its session (no agent_end event): " + tail(res.Output, 400)
	case out.errorMessage != "":
		return runrec.StatusFailed, "model: " + out.errorMessage
	}
	return runrec.StatusSucceeded, ""
}

type piDirs struct {
	base, launch, agent, out, session, sock string
}

// prepare makes the round's folders: the launcher (read-only inside), pi's
// configuration (writable: pi locks its settings file with a folder beside
// it, and reads no settings it cannot lock; rewritten every round), its
// event output, the session folder (kept across rounds, beside the
// session state) and the proxy socket's folder (short: a unix socket path
// has at most 107 bytes).
func (p *piSession) prepare() (piDirs, error) {
	r := p.r
	d := piDirs{base: r.scratch + ".pi", session: filepath.Join(r.sessDir, "pi")}
	d.launch, d.agent, d.out = filepath.Join(d.base, "launch"), filepath.Join(d.base, "agent"), filepath.Join(d.base, "out")
	for _, dir := range []string{d.launch, d.agent, d.out, d.session} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return d, err
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return d, err
		}
	}
	sock, err := os.MkdirTemp("", "conductor-pi-")
	if err != nil {
		return d, err
	}
	d.sock = sock
	if err := os.Chmod(sock, 0o755); err != nil {
		return d, err
	}
	model := map[string]any{"id": p.spec.Model}
	if p.spec.ContextWindow > 0 {
		model["contextWindow"] = p.spec.ContextWindow
	}
	if p.spec.MaxTokens > 0 {
		model["maxTokens"] = p.spec.MaxTokens
	}
	models := map[string]any{"providers": map[string]any{"conductor": map[string]any{
		"baseUrl": "http://127.0.0.1:" + piProxyPort + "/v1",
		"api":     "openai-completions",
		// pi requires a key; the proxy replaces it with the real one.
		"apiKey": "conductor-model-proxy",
		"compat": map[string]any{"supportsDeveloperRole": false, "supportsReasoningEffort": false},
		"models": []any{model},
	}}}
	// conductor's retry policy rules: pi's own retries would multiply
	// requests behind the proxy's back.
	// Compaction is off too: it would summarise the conversation with model
	// calls of its own; an overflow ends the round, visibly.
	settings := map[string]any{"retry": map[string]any{"enabled": false, "provider": map[string]any{"maxRetries": 0}},
		"compaction": map[string]any{"enabled": false}, "quietStartup": true}
	for name, v := range map[string]any{"models.json": models, "settings.json": settings} {
		b, _ := json.MarshalIndent(v, "", "  ")
		if err := os.WriteFile(filepath.Join(d.agent, name), b, 0o644); err != nil {
			return d, err
		}
	}
	if err := os.WriteFile(filepath.Join(d.launch, "launch.mjs"), piLauncher, 0o644); err != nil {
		return d, err
	}
	return d, nil
}

// startProxy starts the round's model proxy: the real server with its key,
// or the replay script answered in memory.
func (p *piSession) startProxy(sock string) (*modelproxy.Proxy, error) {
	r := p.r
	opts := modelproxy.Options{
		Upstream: p.spec.BaseURL, Model: p.spec.Model, APIKey: p.key,
		Budget: r.lim.TokenBudget, MaxRequests: int64(r.lim.MaxSteps),
		IdleTimeout: p.spec.Timeout,
	}
	if p.spec.IsReplay() {
		opts.Upstream = replayBaseURL
		opts.Transport = handlerTransport{modelscript.NewHandler(p.script)}
	} else {
		lim := Limiter(p.spec.Alias)
		lim.SetMax(p.spec.MaxConcurrent)
		opts.Limiter = sharedLimiter{local: lim, slots: r.opts.ModelSlots, alias: p.spec.Alias, max: p.spec.MaxConcurrent}
	}
	return modelproxy.Listen(sock, opts)
}

// piOutcome is what a round's events say.
type piOutcome struct {
	ended        bool   // agent_end seen
	errorMessage string // the last assistant message ended in an error
}

// handle turns one of pi's events into transcript lines (one model line
// per assistant message, a call and a result line per tool execution) and
// progress events, and counts the steps. Lines that are not events (pi's
// own noise) are skipped.
func (p *piSession) handle(line []byte, out *piOutcome) {
	r, st := p.r, p.r.state
	{
		var ev struct {
			Type       string          `json:"type"`
			Message    json.RawMessage `json:"message"`
			ToolCallID string          `json:"toolCallId"`
			ToolName   string          `json:"toolName"`
			Args       json.RawMessage `json:"args"`
			Result     struct {
				Content []piContent `json:"content"`
			} `json:"result"`
			IsError bool `json:"isError"`
		}
		if json.Unmarshal(line, &ev) != nil {
			return
		}
		switch ev.Type {
		case "agent_end":
			out.ended = true
		case "message_end":
			var m struct {
				Role         string      `json:"role"`
				Content      []piContent `json:"content"`
				StopReason   string      `json:"stopReason"`
				ErrorMessage string      `json:"errorMessage"`
				Usage        struct {
					Input  int64 `json:"input"`
					Output int64 `json:"output"`
					Total  int64 `json:"totalTokens"`
				} `json:"usage"`
			}
			if json.Unmarshal(ev.Message, &m) != nil || m.Role != "assistant" {
				return
			}
			st.Step++
			msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant}
			var text []string
			for _, c := range m.Content {
				switch c.Type {
				case "text":
					text = append(text, c.Text)
				case "thinking":
					msg.ReasoningContent += c.Thinking
				case "toolCall":
					msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: c.ID, Type: openai.ToolTypeFunction,
						Function: openai.FunctionCall{Name: c.Name, Arguments: string(c.Arguments)}})
				}
			}
			msg.Content = strings.Join(text, "\n")
			usage := &Usage{PromptTokens: m.Usage.Input, CompletionTokens: m.Usage.Output, TotalTokens: m.Usage.Total}
			finish := m.StopReason
			if m.StopReason == "error" {
				out.errorMessage = cmp.Or(m.ErrorMessage, "the model call failed")
			} else {
				out.errorMessage = ""
			}
			r.transcript(transcriptLine{Type: lineModel, Step: st.Step, Message: &msg, FinishReason: finish, Usage: usage})
			p.countTokens()
			r.emitStep()
		case "tool_execution_start":
			r.transcript(transcriptLine{Type: lineToolCall, Step: st.Step, CallID: ev.ToolCallID, Tool: ev.ToolName, Arguments: string(ev.Args)})
			r.ev.emit(Event{Event: "tool", Time: r.now(), RunID: st.RunID, Step: st.Step, Tool: ev.ToolName, Text: clip(string(ev.Args), 80)})
		case "tool_execution_end":
			var text []string
			for _, c := range ev.Result.Content {
				if c.Type == "text" {
					text = append(text, c.Text)
				}
			}
			r.transcript(transcriptLine{Type: lineToolResult, Step: st.Step, CallID: ev.ToolCallID, Tool: ev.ToolName, Content: strings.Join(text, "\n"), IsError: ev.IsError})
		}
	}
}

// follow reads pi's events as they are written, until stop is closed and
// the file is read to its end: the transcript and the progress events are
// live while pi runs. It returns every event line read.
func (p *piSession) follow(path string, stop <-chan struct{}) ([]byte, piOutcome) {
	var out piOutcome
	var all, partial []byte
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var off int64
	for {
		stopping := false
		select {
		case <-stop:
			stopping = true
		case <-tick.C:
		}
		if f, err := os.Open(path); err == nil {
			f.Seek(off, io.SeekStart)
			chunk, _ := io.ReadAll(io.LimitReader(f, 64<<20))
			f.Close()
			off += int64(len(chunk))
			all = append(all, chunk...)
			partial = append(partial, chunk...)
			for {
				i := bytes.IndexByte(partial, '\n')
				if i < 0 {
					break
				}
				p.handle(partial[:i], &out)
				partial = partial[i+1:]
			}
		}
		if stopping {
			if len(partial) > 0 {
				p.handle(partial, &out)
			}
			return all, out
		}
	}
}

// piContent is one part of a pi message.
type piContent struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// tail is the end of a command's output, for a message.
func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	if s == "" {
		return "(no output)"
	}
	return s
}

// takeNotes delivers the operator's pending notes the way the built-in
// loop does (recorded, marked delivered) and returns their text for the
// round's prompt.
func (r *runner) takeNotes(ctx context.Context) string {
	before := len(r.state.Messages)
	r.deliverNotes(ctx)
	var texts []string
	for _, m := range r.state.Messages[before:] {
		texts = append(texts, m.Content)
	}
	r.state.Messages = r.state.Messages[:before]
	return strings.Join(texts, "\n\n")
}

// countTokens takes the run's token totals from the proxy: the server's
// usage as the proxy counted it, never the runtime's own account.
func (p *piSession) countTokens() {
	if p.proxy == nil {
		return
	}
	u := p.proxy.Usage()
	p.r.state.Tokens = tokenCount{Prompt: u.PromptTokens, Completion: u.CompletionTokens, Total: u.TotalTokens,
		Reported: int(u.Requests - u.Unreported), Unreported: int(u.Unreported)}
}

// emitStep reports the steps and tokens so far.
func (r *runner) emitStep() {
	st := r.state
	var tok *int64
	if st.Tokens.Reported > 0 {
		v := st.Tokens.Total
		tok = &v
	}
	r.ev.emit(Event{Event: "step", Time: r.now(), RunID: st.RunID, Step: st.Step, Tokens: tok})
}

// newPiSession resolves the round's model for pi: the alias's server and
// key (used only by the proxy), or a replay script.
func (r *runner) newPiSession(mode runMode, alias string) (*piSession, error) {
	if r.opts.Registry == nil {
		return nil, errors.New("runtime pi needs the model registry (it talks to the model through the proxy, not a client)")
	}
	spec, err := r.opts.Registry.Lookup(alias)
	if err != nil {
		return nil, err
	}
	if !spec.IsReplay() {
		if err := spec.Validate(); err != nil {
			return nil, err
		}
	}
	var key string
	if spec.APIKeyEnv != "" {
		if key = r.getenv(spec.APIKeyEnv); key == "" {
			return nil, fmt.Errorf("the API key variable %s is not set (set it, or clear apiKeyEnv for a server without keys)", spec.APIKeyEnv)
		}
	}
	ps := &piSession{r: r, mode: mode, spec: spec, key: key, install: r.pi}
	if spec.IsReplay() {
		// Read once, before the run folder exists: a bad script is an error
		// now, and the proxy answers from this one.
		if ps.script, err = loadReplayScript(spec.ReplayFile); err != nil {
			return nil, err
		}
		ps.spec.Model = cmp.Or(ps.script.Model, spec.Model)
	}
	return ps, nil
}
