package runtask

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/termtext"
)

// StatusDrift ends a resumed run whose worktree no longer matches its
// checkpoint (files changed by someone else): never continued silently.
const StatusDrift = "drift"

// NewRunID returns a fresh run id: r-<UTC time>-<random>.
func NewRunID(now time.Time) string {
	var b [4]byte
	rand.Read(b[:])
	return "r-" + now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// Transcript line types.
const (
	lineSystem     = "system"
	lineUser       = "user"
	lineModel      = "model"
	lineToolCall   = "tool_call"
	lineToolResult = "tool_result"
	lineNote       = "note"
	lineStop       = "stop"
	lineResume     = "resume"
	lineTrim       = "trim"
)

// transcriptLine is one line of transcript.jsonl.
type transcriptLine struct {
	Type         string                        `json:"type"`
	Time         time.Time                     `json:"time"`
	Step         int                           `json:"step"`
	Text         string                        `json:"text,omitempty"`
	Message      *openai.ChatCompletionMessage `json:"message,omitempty"`
	FinishReason string                        `json:"finishReason,omitempty"`
	Usage        *Usage                        `json:"usage,omitempty"`
	UsageUnknown bool                          `json:"usageUnknown,omitempty"`
	Quirks       []string                      `json:"quirks,omitempty"` // server quirks repaired in this turn
	CallID       string                        `json:"callId,omitempty"`
	Tool         string                        `json:"tool,omitempty"`
	Arguments    string                        `json:"arguments,omitempty"`
	Content      string                        `json:"content,omitempty"`
	IsError      bool                          `json:"isError,omitempty"`
	OutputFile   string                        `json:"outputFile,omitempty"`
	NoteID       int64                         `json:"noteId,omitempty"`
	Status       string                        `json:"status,omitempty"`
	// Sources (the system line) are the files the prompt came from.
	Sources []PromptSource `json:"sources,omitempty"`
}

// Event is one progress event (JSONL with --json).
type Event struct {
	Event  string    `json:"event"` // start|stream|step|tool|note|resume|stop|result
	Time   time.Time `json:"time"`
	RunID  string    `json:"runId"`
	Step   int       `json:"step,omitempty"`
	Tool   string    `json:"tool,omitempty"`
	Tokens *int64    `json:"tokens,omitempty"`
	Status string    `json:"status,omitempty"`
	Text   string    `json:"text,omitempty"`
	// Result is set on the final event.
	Result *runrec.Result `json:"result,omitempty"`
}

// emitter writes progress events: JSON lines or one short line per event.
type emitter struct {
	mu   sync.Mutex
	w    io.Writer
	json bool
}

func (e *emitter) emit(ev Event) {
	if e == nil || e.w == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.json {
		b, _ := json.Marshal(ev)
		e.w.Write(append(b, '\n'))
		return
	}
	tok := "-"
	if ev.Tokens != nil {
		tok = fmt.Sprint(*ev.Tokens)
	}
	// For people, one line per event: tool names, notes and texts may be
	// the model's, so they are escaped (no terminal escape sequence, no
	// newline starting a line of its own).
	text, tool := termtext.Line(ev.Text), termtext.Line(ev.Tool)
	switch ev.Event {
	case "start":
		fmt.Fprintf(e.w, "run %s: %s\n", ev.RunID, text)
	case "step":
		fmt.Fprintf(e.w, "step %-3d %-12s tokens %s\n", ev.Step, "model", tok)
	case "tool":
		fmt.Fprintf(e.w, "step %-3d %-12s %s\n", ev.Step, tool, text)
	case "stream":
		fmt.Fprintf(e.w, "step %-3d %-12s %s\n", ev.Step, "receiving", text)
	case "note", "resume", "trim":
		fmt.Fprintf(e.w, "step %-3d %-12s %s\n", ev.Step, ev.Event, text)
	case "stop":
		fmt.Fprintf(e.w, "run %s: %s after %d steps, tokens %s\n", ev.RunID, ev.Status, ev.Step, tok)
	}
}

// sessionState is the persisted conversation and worktree of one session
// (sessions/<workspace>/<session>/state.json under the data root), written
// atomically after every model turn and every tool result. It holds what the
// model saw — never a credential or an environment.
type sessionState struct {
	Version    int    `json:"version"`
	Workspace  string `json:"workspace"`
	Session    string `json:"session"`
	TaskID     string `json:"taskId"`
	Repo       string `json:"repo"` // common git dir
	PoolDir    string `json:"poolDir"`
	Slot       string `json:"slot,omitempty"` // worktree slot held (empty once released)
	Worktree   string `json:"worktree,omitempty"`
	BaseCommit string `json:"baseCommit"`
	// LastPatch is the patch of the last finished run: a session whose
	// worktree was released re-creates it from base + this patch.
	LastPatch string `json:"lastPatch,omitempty"`

	RunID   string    `json:"runId"`
	Status  string    `json:"status"` // running or the last run's final status
	Step    int       `json:"step"`   // tool rounds of the current run
	Started time.Time `json:"started"`

	ModelAlias string     `json:"modelAlias"`
	Model      string     `json:"model"`
	Tokens     tokenCount `json:"tokens"`

	Messages []openai.ChatCompletionMessage `json:"messages"`
	// Repeats counts (call, result) pairs for the stuck-loop stop.
	Repeats map[string]int `json:"repeats,omitempty"`
	// Files are the paths the worker changed with their content hashes as of
	// the last persisted point.
	Files []bus.FileHash `json:"files,omitempty"`
	// History is the bounded tool history checkpoints carry.
	History []historyItem `json:"history,omitempty"`
	// DeliveredNotes are operator notes already in Messages.
	DeliveredNotes []int64 `json:"deliveredNotes,omitempty"`
}

// historyItem is one tool call in a checkpoint's bounded history.
type historyItem struct {
	Step    int    `json:"step"`
	Tool    string `json:"tool"`
	Args    string `json:"args"`   // capped
	Result  string `json:"result"` // capped
	IsError bool   `json:"isError,omitempty"`
}

const (
	historyMax       = 40
	historyArgsMax   = 300
	historyResultMax = 300
)

func (s *sessionState) addHistory(h historyItem) {
	h.Args = clip(h.Args, historyArgsMax)
	h.Result = clip(h.Result, historyResultMax)
	s.History = append(s.History, h)
	if len(s.History) > historyMax {
		s.History = s.History[len(s.History)-historyMax:]
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// tokenCount sums usage over a run's turns.
type tokenCount struct {
	Prompt     int64 `json:"prompt"`
	Completion int64 `json:"completion"`
	Total      int64 `json:"total"`
	Reported   int   `json:"reported"`   // turns with usage
	Unreported int   `json:"unreported"` // turns without
	Estimated  int64 `json:"estimated"`  // estimate for unreported turns (budget only)
}

// known reports the totals, or nils when any turn's usage is unknown: a
// partial sum is not recorded as if it were the whole.
func (t tokenCount) known() (p, c, tot *int64) {
	if t.Unreported > 0 || t.Reported == 0 {
		return nil, nil, nil
	}
	p, c, tot = new(int64), new(int64), new(int64)
	*p, *c, *tot = t.Prompt, t.Completion, t.Total
	return
}

// used is what the budget counts: reported totals plus estimates.
func (t tokenCount) used() int64 { return t.Total + t.Estimated }

// sessionDir is where a session's state lives.
func sessionDir(cfg conductor.Config, workspace, session string) string {
	return filepath.Join(cfg.DataRoot, "sessions", workspace, session)
}

// loadState reads a session's state and the number of its last save (0
// for a state written before saves were numbered); nil when the session
// has none.
func loadState(dir string) (*sessionState, int64, error) {
	b, seq, err := runrec.ReadVersioned(filepath.Join(dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("session state %s: %w", dir, err)
	}
	var s sessionState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, 0, fmt.Errorf("session state %s: %w", dir, err)
	}
	return &s, seq, nil
}

// stateFile is the session state's file in its folder; its sibling
// ".state.json.next" holds the save before (runrec.WriteVersioned).
const stateFile = "state.json"

// writeState makes save seq of the session state (b) durable: one fsync
// (runrec.WriteVersioned). A variable: the tests hold it back or fail it.
var writeState = func(dir string, seq int64, b []byte) error {
	return runrec.WriteVersioned(filepath.Join(dir, stateFile), seq, b, 0o600)
}
