package runtask

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/conductor-dev/conductor/conductor/jsonstrict"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/policy"
)

// Tool names, canonical form: the role contracts' names (package policy).
const (
	ToolReadFile   = policy.ToolReadFile
	ToolWriteFile  = policy.ToolWriteFile
	ToolEditFile   = policy.ToolEditFile
	ToolGrep       = policy.ToolGrep
	ToolListDir    = policy.ToolListDir
	ToolRunCommand = policy.ToolRunCommand
)

// CanonicalTools lists every tool the conductor executes, in a stable order.
var CanonicalTools = policy.Tools()

// toolAliases maps the seed convention (read/write/edit/bash) onto canonical
// tools. "read" grants every read-only tool: reading files, grep and listing.
var toolAliases = map[string][]string{
	"read":  {ToolReadFile, ToolGrep, ToolListDir},
	"write": {ToolWriteFile},
	"edit":  {ToolEditFile},
	"bash":  {ToolRunCommand},
}

// Task is a worker task file (taskVersion 1).
type Task struct {
	TaskVersion    int          `json:"taskVersion"`
	ID             string       `json:"id"`
	Prompt         string       `json:"prompt"`
	Workspace      string       `json:"workspace"`
	Capabilities   Capabilities `json:"capabilities"`
	Session        string       `json:"session"`
	TimeoutSeconds int          `json:"timeoutSeconds"`

	Role        string `json:"role,omitempty"`        // role contract name (default: the CLI's default role)
	Model       string `json:"model,omitempty"`       // model alias; --model wins
	Base        string `json:"base,omitempty"`        // commit-ish the worktree starts at (default HEAD)
	Brief       string `json:"brief,omitempty"`       // markdown file appended to the role prompt
	Harness     string `json:"harness,omitempty"`     // informational: the seed's harness alias
	MaxSteps    int    `json:"maxSteps,omitempty"`    // tool rounds; 0: role, else WORKER_MAX_TOOL_STEPS
	TokenBudget int64  `json:"tokenBudget,omitempty"` // total tokens; 0: role's budget, else unlimited
	PR          PRWhen `json:"pr,omitempty"`          // when the unattended path opens a draft PR: "on-success" (or true), "never" (or false); absent: the role's
	Issue       int    `json:"issue,omitempty"`       // forge issue the task resolves
	Runtime     string `json:"runtime,omitempty"`     // who drives the session: builtin (default) or pi
}

// Capabilities is the task's requested tool set.
type Capabilities struct {
	Tools []string `json:"tools"`
}

// FieldError is a task-file error naming the field path.
type FieldError struct {
	File  string // file name as given ("task.json")
	Field string // field path, e.g. capabilities.tools[2]; empty for the whole document
	Msg   string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// LoadTask reads and validates a task file.
func LoadTask(path string) (Task, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Task{}, fmt.Errorf("task file: %w", err)
	}
	return ParseTask(path, b)
}

type fieldSpec struct {
	required bool
	dst      any
}

// ParseTask decodes a task file strictly: unknown fields, wrong types,
// missing required fields and unsupported versions are errors naming the
// field path. name labels errors (usually the file path).
func ParseTask(name string, data []byte) (Task, error) {
	var t Task
	ferr := func(field, format string, args ...any) error {
		return &FieldError{File: name, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	top, err := decodeObject(data)
	if err != nil {
		return t, ferr("", "%v", err)
	}
	fields := map[string]fieldSpec{
		"taskVersion":    {true, &t.TaskVersion},
		"id":             {true, &t.ID},
		"prompt":         {true, &t.Prompt},
		"workspace":      {true, &t.Workspace},
		"capabilities":   {true, nil},
		"session":        {true, &t.Session},
		"timeoutSeconds": {true, &t.TimeoutSeconds},
		"role":           {false, &t.Role},
		"model":          {false, &t.Model},
		"base":           {false, &t.Base},
		"brief":          {false, &t.Brief},
		"harness":        {false, &t.Harness},
		"maxSteps":       {false, &t.MaxSteps},
		"tokenBudget":    {false, &t.TokenBudget},
		"pr":             {false, &t.PR},
		"issue":          {false, &t.Issue},
		"runtime":        {false, &t.Runtime},
	}
	if err := checkKeys(top, fields, "", ferr); err != nil {
		return t, err
	}
	// taskVersion first: a future version's other fields are not ours to judge.
	if err := decodeField(top["taskVersion"], &t.TaskVersion); err != nil {
		return t, ferr("taskVersion", "%v", err)
	}
	if t.TaskVersion != 1 {
		return t, ferr("taskVersion", "unsupported version %d (this conductor reads taskVersion 1)", t.TaskVersion)
	}
	for _, k := range sortedKeys(top) {
		spec := fields[k]
		if spec.dst == nil {
			continue
		}
		if err := decodeField(top[k], spec.dst); err != nil {
			return t, ferr(k, "%v", err)
		}
	}
	caps, err := decodeObject(top["capabilities"])
	if err != nil {
		return t, ferr("capabilities", "%v", err)
	}
	if err := checkKeys(caps, map[string]fieldSpec{"tools": {true, nil}}, "capabilities.", ferr); err != nil {
		return t, err
	}
	var rawTools []json.RawMessage
	if err := decodeField(caps["tools"], &rawTools); err != nil {
		return t, ferr("capabilities.tools", "%v", err)
	}
	t.Capabilities.Tools = make([]string, len(rawTools))
	for i, r := range rawTools {
		if err := decodeField(r, &t.Capabilities.Tools[i]); err != nil {
			return t, ferr(fmt.Sprintf("capabilities.tools[%d]", i), "%v", err)
		}
	}
	if err := t.Validate(); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			fe.File = name
		}
		return t, err
	}
	return t, nil
}

func checkKeys(obj map[string]json.RawMessage, fields map[string]fieldSpec, prefix string, ferr func(string, string, ...any) error) error {
	for _, k := range sortedKeys(obj) {
		if _, ok := fields[k]; !ok {
			return ferr(prefix+k, "unknown field")
		}
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if _, ok := obj[k]; fields[k].required && !ok {
			return ferr(prefix+k, "required field missing")
		}
	}
	return nil
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// decodeObject decodes one JSON object, rejecting duplicates and trailing
// data; a syntax error names its line and column.
func decodeObject(data []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	invalid := func(key string, err error) error {
		off := dec.InputOffset()
		var se *json.SyntaxError
		if errors.As(err, &se) {
			off = se.Offset
		}
		line, col := jsonstrict.LineCol(data, off)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = errors.New("unexpected end of the file (an object or array is not closed)")
		}
		prefix := ""
		if key != "" {
			prefix = key + ": "
		}
		return fmt.Errorf("%sline %d, column %d: not valid JSON: %v", prefix, line, col, strings.TrimPrefix(err.Error(), "json: "))
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, invalid("", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("want a JSON object, got %s", describeToken(tok))
	}
	obj := map[string]json.RawMessage{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, invalid("", err)
		}
		key := kt.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, invalid(key, err)
		}
		if _, dup := obj[key]; dup {
			return nil, fmt.Errorf("%s: duplicate field", key)
		}
		obj[key] = raw
	}
	if _, err := dec.Token(); err != nil {
		return nil, invalid("", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		line, col := jsonstrict.LineCol(data, dec.InputOffset())
		return nil, fmt.Errorf("line %d, column %d: trailing data after the JSON object", line, col)
	}
	return obj, nil
}

func describeToken(tok any) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			return "an array"
		}
		return string(v)
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

// decodeField decodes one value with a message that names the JSON type.
func decodeField(raw json.RawMessage, dst any) error {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return errors.New("must not be null")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("wrong type: want %s, got %s", goTypeName(te.Type.String()), te.Value)
		}
		return err
	}
	return nil
}

func goTypeName(t string) string {
	switch t {
	case "int", "int64":
		return "an integer"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "[]json.RawMessage", "[]string":
		return "an array"
	}
	return t
}

var (
	aliasName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,255}$`)
)

// Validate checks values after decoding.
func (t Task) Validate() error {
	fe := func(field, format string, args ...any) error {
		return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if t.TaskVersion != 1 {
		return fe("taskVersion", "unsupported version %d (this conductor reads taskVersion 1)", t.TaskVersion)
	}
	for _, f := range []struct{ name, v string }{{"id", t.ID}, {"workspace", t.Workspace}, {"session", t.Session}} {
		if !runrec.ValidName(f.v) {
			return fe(f.name, "%q is not a valid name (%s)", f.v, runrec.NameRule)
		}
	}
	if strings.TrimSpace(t.Prompt) == "" {
		return fe("prompt", "must not be empty")
	}
	if t.TimeoutSeconds <= 0 {
		return fe("timeoutSeconds", "must be a positive number of seconds, got %d", t.TimeoutSeconds)
	}
	if len(t.Capabilities.Tools) == 0 {
		return fe("capabilities.tools", "must list at least one tool")
	}
	for i, name := range t.Capabilities.Tools {
		if _, ok := toolAliases[name]; !ok && !slices.Contains(CanonicalTools, name) {
			return fe(fmt.Sprintf("capabilities.tools[%d]", i), "unknown tool %q (known: %s, or read, write, edit, bash)", name, strings.Join(CanonicalTools, ", "))
		}
	}
	if t.Role != "" && !runrec.ValidName(t.Role) {
		return fe("role", "%q is not a valid role name", t.Role)
	}
	if t.Model != "" && !aliasName.MatchString(t.Model) {
		return fe("model", "%q is not a valid model alias", t.Model)
	}
	if t.Base != "" && (strings.HasPrefix(t.Base, "-") || strings.ContainsAny(t.Base, " \t\n\x00") || strings.Contains(t.Base, "..")) {
		return fe("base", "%q is not a commit-ish this conductor accepts (no leading '-', no spaces, no ranges)", t.Base)
	}
	if t.Brief != "" && strings.ContainsRune(t.Brief, 0) {
		return fe("brief", "invalid path")
	}
	if t.MaxSteps < 0 {
		return fe("maxSteps", "must not be negative, got %d", t.MaxSteps)
	}
	if t.TokenBudget < 0 {
		return fe("tokenBudget", "must not be negative, got %d", t.TokenBudget)
	}
	if t.Issue < 0 {
		return fe("issue", "must not be negative, got %d", t.Issue)
	}
	if t.Runtime != "" && !slices.Contains(Runtimes, t.Runtime) {
		return fe("runtime", "unknown runtime %q (known: %s)", t.Runtime, strings.Join(Runtimes, ", "))
	}
	return nil
}

// Tools returns the canonical tool names the task asks for, deduplicated, in
// canonical order.
func (t Task) Tools() []string {
	want := map[string]bool{}
	for _, name := range t.Capabilities.Tools {
		if canon, ok := toolAliases[name]; ok {
			for _, c := range canon {
				want[c] = true
			}
			continue
		}
		want[name] = true
	}
	var out []string
	for _, c := range CanonicalTools {
		if want[c] {
			out = append(out, c)
		}
	}
	return out
}

// When a queued run's draft PR opens (a task's or a role's "pr").
const (
	// PROnSuccess: the run succeeded and its review (checks and gate)
	// approved it: push the work branch and open a draft PR.
	PROnSuccess = "on-success"
	// PRNever: no PR, whatever the role says.
	PRNever = "never"
)

// PRWhen is a task's "pr": "on-success" or "never"; true and false (the
// older form) mean the same. Empty: the role decides.
type PRWhen string

// UnmarshalJSON accepts true, false, "on-success" and "never".
func (p *PRWhen) UnmarshalJSON(b []byte) error {
	switch string(bytes.TrimSpace(b)) {
	case "true", `"on-success"`:
		*p = PROnSuccess
	case "false", `"never"`:
		*p = PRNever
	default:
		return fmt.Errorf("want true, false, \"on-success\" or \"never\", got %s", b)
	}
	return nil
}
