// Package runrec owns the run record: one folder per run holding the task as
// dispatched, result.json, stderr.txt, transcript.jsonl and patch.diff. Every
// file is written atomically (temp file in the same folder, fsync, rename);
// the transcript is append-only and fsynced per line. A crash never leaves
// half a record.
//
// runrec never writes a credential: callers pass only what the worker saw.
package runrec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// File names inside a run folder.
const (
	TaskFile       = "task.json"
	ResultFile     = "result.json"
	StderrFile     = "stderr.txt"
	TranscriptFile = "transcript.jsonl"
	PatchFile      = "patch.diff"
)

// Status values of a run.
const (
	StatusRunning   = "running"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusTimeout   = "timeout"
	StatusBudget    = "budget"
	StatusStuck     = "stuck"
	StatusCancelled = "cancelled"
)

// Final reports whether a status ends a run for good (the session may
// continue only with a follow-up); running, cancelled and drift runs are
// resumable.
func Final(status string) bool {
	switch status {
	case StatusSucceeded, StatusFailed, StatusTimeout, StatusBudget, StatusStuck:
		return true
	}
	return false
}

// Result is result.json: the receipt of one run.
type Result struct {
	RunID            string    `json:"runId"`
	TaskID           string    `json:"taskId"`
	Session          string    `json:"session"`
	Role             string    `json:"role"`
	Workspace        string    `json:"workspace"`
	Status           string    `json:"status"`
	ModelAlias       string    `json:"modelAlias"`
	HarnessAlias     string    `json:"harnessAlias,omitempty"` // the seed's harness alias: the task's, else the role's harness
	Model            string    `json:"model"`
	PromptTokens     *int64    `json:"promptTokens"` // null: the server did not report usage
	CompletionTokens *int64    `json:"completionTokens"`
	TotalTokens      *int64    `json:"totalTokens"`
	Steps            int       `json:"steps"`
	StartedAt        time.Time `json:"startedAt"`
	FinishedAt       time.Time `json:"finishedAt,omitzero"`
	Repo             string    `json:"repo"` // git dir of the workspace repository
	BaseCommit       string    `json:"baseCommit"`
	Worktree         string    `json:"worktree,omitempty"`
	Branch           string    `json:"branch,omitempty"`
	PatchID          string    `json:"patchId"`
	FilesChanged     []string  `json:"filesChanged"`
	// Hazards are what the host found in the worktree and removed or left
	// out before any host git touched it (nested repositories, special
	// files, unsafe names). Review refuses a run that has any.
	Hazards []Hazard `json:"hazards,omitempty"`
	Error   string   `json:"error,omitempty"`
	// Resumable marks a failed run whose cause was outside it (the model
	// server unreachable or overloaded, the disk): `run-task resume RUN
	// [--model ALIAS]` continues it. A refusal is never resumable.
	Resumable bool `json:"resumable,omitempty"`
}

// Hazard codes: each is also a review refusal code (docs/refusals.md).
const (
	HazardNestedRepo  = "nested-repository" // a .git file or folder below the worktree's top
	HazardSpecialFile = "special-file"      // a FIFO, socket or device file
	HazardUnsafeName  = "unsafe-path-name"  // control characters or invalid UTF-8 in a name
)

// Hazard is one thing in a worktree the host refused to let git see.
type Hazard struct {
	Code   string `json:"code"`
	Path   string `json:"path"` // slash-separated, relative to the worktree; escaped if unsafe
	Detail string `json:"detail,omitempty"`
}

// Dir is one run's folder.
type Dir string

// Path returns the path of a file in the run folder.
func (d Dir) Path(name string) string { return filepath.Join(string(d), name) }

// ReadResult reads result.json.
func (d Dir) ReadResult() (Result, error) {
	var r Result
	b, err := os.ReadFile(d.Path(ResultFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return r, fmt.Errorf("run record %s: no %s: %w", d, ResultFile, err)
		}
		return r, fmt.Errorf("run record %s: %w", d, err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("run record %s: %s: %w", d, ResultFile, err)
	}
	return r, nil
}

// WriteResult writes result.json atomically.
func (d Dir) WriteResult(r Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(d.Path(ResultFile), append(b, '\n'), 0o644)
}

// WriteFileAtomic writes data to a temp file beside path, fsyncs it, renames
// it over path and fsyncs the folder: the one atomic write of the tree
// (ReplaceFile is its variant for a file rewritten after every step).
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return WriteAtomic(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteAtomic is WriteFileAtomic for content written by write (a diff
// streamed from git). When write fails, path is left as it was.
func WriteAtomic(path string, perm os.FileMode, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Log is an append-only JSON-lines file: Append fsyncs each line; Write and
// Sync group the lines of one step into one fsync.
type Log struct {
	mu    sync.Mutex
	f     *os.File
	dirty bool // lines written by Write, not yet fsynced
}

// OpenLog opens (creating or appending to) a JSON-lines log.
func OpenLog(path string) (*Log, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Log{f: f}, nil
}

// Append writes v as one JSON line and fsyncs it (with any line Write
// left unsynced).
func (l *Log) Append(v any) error {
	if err := l.Write(v); err != nil {
		return err
	}
	return l.Sync()
}

// Write writes v as one JSON line without fsyncing it: a group commit's
// member. The line is in the file at once (a killed process loses nothing
// it wrote); Sync makes every line written so far durable against a crash
// of the machine.
func (l *Log) Write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		return err
	}
	l.dirty = true
	return nil
}

// Sync fsyncs the lines Write wrote since the last Sync (none: nothing to
// do).
func (l *Log) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.dirty {
		return nil
	}
	if err := l.f.Sync(); err != nil {
		return err
	}
	l.dirty = false
	return nil
}

// Close fsyncs what Write left unsynced and closes the log.
func (l *Log) Close() error {
	serr := l.Sync()
	if err := l.f.Close(); err != nil {
		return err
	}
	return serr
}
