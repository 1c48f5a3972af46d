package queue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Job is a queue payload mapped onto what a worker runs.
type Job struct {
	// Task is a task file body (taskVersion 1), ready for runtask.ParseTask.
	Task json.RawMessage
	// RunID makes delivery idempotent: a redelivered job with the same run
	// id resumes (or no-ops when finished) instead of running twice.
	RunID string
	// Resume asks to continue RunID from its latest checkpoint.
	Resume bool
	// PR asks the automation path to open a draft PR after an approved review.
	PR bool // "pr": true or "on-success" (the task carries it too)
	// Shape is "task" or "seed": which payload form was given.
	Shape string
}

// SeedJob is the seed orchestrator's job shape. Both camelCase and
// snake_case names are accepted.
//
// Mapping onto a task file (see docs/queue.md):
//
//	taskId | task_id          → id (default "t-<role>-<payload id>")
//	type                      → "role_dispatch" (or absent); any other type is refused
//	roleId | role_id | role   → role ("role-implementer" → implementer)
//	briefPath | brief_path    → brief (the brief is appended to the role prompt)
//	harness | harnessAlias    → harness, kept as named; a doc alias (doc, docs, doc-writer…)
//	                            grants read/write/edit, any other read/write/edit/bash
//	modelAlias | model_alias  → model
//	resume | resumeFromCheckpoint → resume the run from its checkpoint
//	runId | run_id            → the run id (default "r-job-<payload id>")
//	workspace                 → workspace (default "default")
//	session                   → session (default: the task id)
//	prompt                    → prompt (default: "Carry out the brief.")
//	timeoutSeconds            → timeoutSeconds (default 1800)
//	pr                        → pr: "on-success" (or true) opens a draft PR when review approves, "never" (or false) never
type SeedJob struct {
	// Type is the orchestrator's job type: "role_dispatch" (or absent).
	Type           string `json:"type"`
	TaskID         string `json:"taskId"`
	RoleID         string `json:"roleId"`
	BriefPath      string `json:"briefPath"`
	Harness        string `json:"harness"`
	ModelAlias     string `json:"modelAlias"`
	Resume         bool   `json:"resume"`
	RunID          string `json:"runId"`
	Workspace      string `json:"workspace"`
	Session        string `json:"session"`
	Prompt         string `json:"prompt"`
	TimeoutSeconds int    `json:"timeoutSeconds"`
	// PR is passed to the task as given (true, false, "on-success",
	// "never"); the task file's decoding judges it.
	PR json.RawMessage `json:"pr"`
}

var seedAliases = map[string]string{
	"task_id": "taskId", "role_id": "roleId", "role": "roleId", "brief_path": "briefPath", "brief": "briefPath",
	"harness_alias": "harness", "harnessAlias": "harness", "model_alias": "modelAlias", "model": "modelAlias",
	"run_id": "runId", "timeout_seconds": "timeoutSeconds",
	"resumeFromCheckpoint": "resume", "resume_from_checkpoint": "resume",
}

// Envelope is what `conductor enqueue` pushes: a task with a fresh run id.
type Envelope struct {
	RunID  string          `json:"runId"`
	Task   json.RawMessage `json:"task"`
	Resume bool            `json:"resume,omitempty"`
}

// ParseJob accepts an Envelope, a task file body (it has "taskVersion") or
// the seed's job shape. Anything else is an error naming what is wrong.
func ParseJob(payload []byte) (Job, error) { return ParseJobWith(payload, nil) }

// ParseJobWith is ParseJob with the operator's roleId mappings
// (conductor.Config.RoleIDs): a seed job's roleId found there names that
// role; any other "role-<name>" is the role <name>.
func ParseJobWith(payload []byte, roleIDs map[string]string) (Job, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(payload, &probe); err != nil {
		return Job{}, fmt.Errorf("job payload is not a JSON object: %w", err)
	}
	id := PayloadID(payload)
	if inner, ok := probe["task"]; ok {
		// The envelope `conductor enqueue` pushes: {"runId", "task", "resume"}.
		var env Envelope
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&env); err != nil {
			return Job{}, fmt.Errorf("job payload: envelope: %w", err)
		}
		j, err := ParseJobWith(inner, roleIDs)
		if err != nil {
			return Job{}, err
		}
		if env.RunID != "" {
			j.RunID = env.RunID
		}
		j.Resume = j.Resume || env.Resume
		j.Shape = "envelope"
		return j, nil
	}
	if _, ok := probe["taskVersion"]; ok {
		var meta struct {
			PR json.RawMessage `json:"pr"`
		}
		json.Unmarshal(payload, &meta)
		// A task body: the run id is stable for the payload, so a
		// redelivery resumes the same run.
		return Job{Task: payload, RunID: "r-job-" + id, PR: prOnSuccess(meta.PR), Shape: "task"}, nil
	}
	norm := map[string]json.RawMessage{}
	for k, v := range probe {
		if a, ok := seedAliases[k]; ok {
			k = a
		}
		norm[k] = v
	}
	b, _ := json.Marshal(norm)
	var s SeedJob
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Job{}, fmt.Errorf("job payload: neither a task file (no taskVersion) nor a seed job: %w", err)
	}
	if s.Type != "" && s.Type != "role_dispatch" {
		return Job{}, fmt.Errorf("job payload: seed job: type %q: this worker runs role_dispatch jobs", s.Type)
	}
	if s.RoleID == "" {
		return Job{}, fmt.Errorf("job payload: seed job: roleId is required")
	}
	// The orchestrator names roles "role-<name>" (role-implementer): the
	// contract is <name>.
	if r, ok := roleIDs[s.RoleID]; ok {
		s.RoleID = r // the operator's mapping
	} else {
		s.RoleID = strings.TrimPrefix(s.RoleID, "role-")
	}
	if s.TaskID == "" {
		s.TaskID = "t-" + s.RoleID + "-" + id
	}
	if s.RunID == "" {
		s.RunID = "r-job-" + id
	}
	if s.Workspace == "" {
		s.Workspace = "default"
	}
	if s.Session == "" {
		s.Session = s.TaskID
	}
	if s.Prompt == "" {
		s.Prompt = "Carry out the brief."
	}
	if s.TimeoutSeconds == 0 {
		s.TimeoutSeconds = 1800
	}
	// The seed's resolveHarnessForJob: a doc harness (doc, docs,
	// doc-writer, …) runs no commands; every other alias is a code harness.
	// The alias itself is kept (the task's harness) and recorded by the run.
	tools := []string{"read", "write", "edit", "bash"}
	if h := strings.ToLower(s.Harness); h == "doc" || h == "docs" || strings.HasPrefix(h, "doc-") || strings.HasSuffix(h, "-doc") || strings.HasSuffix(h, "-docs") {
		tools = []string{"read", "write", "edit"}
	} else if s.Harness != "" && !validAlias(s.Harness) {
		return Job{}, fmt.Errorf("job payload: seed job: harnessAlias %q: want letters, digits, '.', '_' or '-'", s.Harness)
	}
	task := map[string]any{
		"taskVersion":    1,
		"id":             s.TaskID,
		"prompt":         s.Prompt,
		"workspace":      s.Workspace,
		"capabilities":   map[string]any{"tools": tools},
		"session":        s.Session,
		"timeoutSeconds": s.TimeoutSeconds,
		"role":           s.RoleID,
	}
	if s.BriefPath != "" {
		task["brief"] = s.BriefPath
	}
	if s.ModelAlias != "" {
		task["model"] = s.ModelAlias
	}
	if s.Harness != "" {
		task["harness"] = s.Harness
	}
	if len(s.PR) > 0 {
		task["pr"] = s.PR
	}
	tb, err := json.Marshal(task)
	if err != nil {
		return Job{}, err
	}
	return Job{Task: tb, RunID: s.RunID, Resume: s.Resume, PR: prOnSuccess(s.PR), Shape: "seed"}, nil
}

// prOnSuccess reports whether a job's "pr" asks for the draft PR.
func prOnSuccess(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s == "true" || s == `"on-success"`
}

// validAlias reports whether a harness alias is a plain name.
func validAlias(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
