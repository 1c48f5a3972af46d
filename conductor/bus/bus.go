// Package bus is the shared state of the protocol: runs, checkpoints,
// verdicts, decisions, landings, operator notes, backlog claims and the
// embedded job queue. One Store interface, two implementations behind one
// schema: an embedded single-file database under the data root (default) and
// PostgreSQL when a database URL is given.
//
// bus stores what happened; it never stores a credential or a file body.
package bus

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned (wrapped) when a record does not exist.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned (wrapped) when a write would contradict what is
// stored (resolving a decision twice, an option the decision does not offer).
var ErrConflict = errors.New("conflict")

// Options selects and configures the backend.
type Options struct {
	DataRoot    string // embedded store file lives at DataRoot/bus.db
	DatabaseURL string // non-empty selects PostgreSQL
	Now         func() time.Time
}

// Run is one worker run as the store knows it (the run folder holds the
// full record).
type Run struct {
	ID               string    `json:"id"`
	TaskID           string    `json:"taskId"`
	Session          string    `json:"session"`
	Role             string    `json:"role"`
	Status           string    `json:"status"` // running|succeeded|failed|timeout|budget|stuck|cancelled
	ModelAlias       string    `json:"modelAlias"`
	HarnessAlias     string    `json:"harnessAlias,omitempty"` // the seed's harness alias (a job's, else the role's harness)
	Model            string    `json:"model"`
	PromptTokens     *int64    `json:"promptTokens"` // nil: the server did not say
	CompletionTokens *int64    `json:"completionTokens"`
	TotalTokens      *int64    `json:"totalTokens"`
	Steps            int       `json:"steps"`
	Repo             string    `json:"repo"` // git dir of the workspace
	BaseCommit       string    `json:"baseCommit"`
	Worktree         string    `json:"worktree"`
	Branch           string    `json:"branch"`
	PatchID          string    `json:"patchId"`
	StartedAt        time.Time `json:"startedAt"`
	FinishedAt       time.Time `json:"finishedAt,omitzero"`
	Outcome          string    `json:"outcome"` // free text: error or summary
}

// RunFilter narrows ListRuns; zero values match everything.
type RunFilter struct {
	TaskID  string
	Session string
	Status  string
	Limit   int
}

// Checkpoint is the resumable state of a run after a step.
type Checkpoint struct {
	RunID     string     `json:"runId"`
	Step      int        `json:"step"`
	History   []byte     `json:"history"` // bounded tool history, JSON
	Files     []FileHash `json:"files"`   // files touched: path + content hash
	Worktree  string     `json:"worktree"`
	Branch    string     `json:"branch"`    // the work branch, when the run has one
	Workspace string     `json:"workspace"` // the run's workspace ("" before schema 5)
	// HarnessAlias is the run's harness alias ("" before schema 6).
	HarnessAlias string    `json:"harnessAlias,omitempty"`
	CreatedAt    time.Time `json:"createdAt"`
}

// FileHash is a touched file and the hash of its content ("" when deleted).
type FileHash struct {
	Path string `json:"path"`
	Hash string `json:"hash"`
}

// Verdict values.
const (
	VerdictApprove        = "approve"
	VerdictRequestChanges = "request-changes"
)

// Verdict is a review's decision bound to a commit and its patch-id.
type Verdict struct {
	ID        int64     `json:"id"`
	RunID     string    `json:"runId"`
	WorkRef   string    `json:"workRef"`
	Commit    string    `json:"commit"`
	PatchID   string    `json:"patchId"`
	Verdict   string    `json:"verdict"`
	Reviewer  string    `json:"reviewer"`
	Findings  []string  `json:"findings"`
	CreatedAt time.Time `json:"createdAt"`
}

// Decision kinds and options.
const (
	KindMergeProtected = "git.merge.protected"
	OptionMerge        = "merge"
	OptionReject       = "reject"
)

// Decision is a question raised to a person and, once resolved, the answer.
type Decision struct {
	ID      string   `json:"id"`
	Kind    string   `json:"kind"`
	Options []string `json:"options"` // the options the raise offers

	// The raise.
	RaisedBy string    `json:"raisedBy"`
	Repo     string    `json:"repo"` // git dir the work ref lives in
	WorkRef  string    `json:"workRef"`
	Commit   string    `json:"commit"`
	Target   string    `json:"target"`
	RunID    string    `json:"runId,omitempty"`
	Issue    int64     `json:"issue,omitempty"` // forge issue to close on landing
	RaisedAt time.Time `json:"raisedAt"`

	// The resolution (empty while open).
	Option     string    `json:"option,omitempty"`
	ResolvedBy string    `json:"resolvedBy,omitempty"`
	ResolvedAt time.Time `json:"resolvedAt,omitzero"`
}

// Open reports whether the decision is still unresolved.
func (d Decision) Open() bool { return d.Option == "" }

// Landing records a decision landed as a commit.
type Landing struct {
	DecisionID string    `json:"decisionId"`
	Commit     string    `json:"commit"` // the commit created on the target
	Target     string    `json:"target"`
	PatchID    string    `json:"patchId"`
	Gate       string    `json:"gate"` // gate result summary
	LandedAt   time.Time `json:"landedAt"`
}

// Note is an operator note for a running session.
type Note struct {
	ID          int64     `json:"id"`
	RunID       string    `json:"runId"`
	Text        string    `json:"text"`
	CreatedAt   time.Time `json:"createdAt"`
	DeliveredAt int       `json:"deliveredAtStep"` // 0: not yet delivered
}

// Completion closes a backlog claim.
type Completion struct {
	TaskID           string `json:"taskId"`
	Claimant         string `json:"claimant"`
	RunID            string `json:"runId"`
	Outcome          string `json:"outcome"`
	ModelAlias       string `json:"modelAlias"`
	HarnessAlias     string `json:"harnessAlias,omitempty"`
	PromptTokens     *int64 `json:"promptTokens"`
	CompletionTokens *int64 `json:"completionTokens"`
	TotalTokens      *int64 `json:"totalTokens"`
	// Reason says why a claim ended without a run's own verdict (a dead
	// letter's error); empty otherwise.
	Reason string `json:"reason,omitempty"`
}

// Claim is a backlog item's claim state.
type Claim struct {
	TaskID      string      `json:"taskId"`
	Claimant    string      `json:"claimant"`
	ClaimedAt   time.Time   `json:"claimedAt"`
	Completion  *Completion `json:"completion,omitempty"`
	CompletedAt time.Time   `json:"completedAt,omitzero"`
}

// Job is an entry of the embedded job queue (used when no Redis is set).
type Job struct {
	ID       int64     `json:"id"`
	Queue    string    `json:"queue"`
	Payload  []byte    `json:"payload"`
	Attempts int       `json:"attempts"`
	TakenBy  string    `json:"takenBy,omitempty"`
	Created  time.Time `json:"created"`
	// LastError is the error of the last failed attempt; DeadAt is set
	// when the job was dead-lettered.
	LastError string    `json:"lastError,omitempty"`
	DeadAt    time.Time `json:"deadAt,omitzero"`
}

// JobEnd is how a consumer ends its hold of a job.
type JobEnd int

const (
	// JobDone removes the finished job.
	JobDone JobEnd = iota
	// JobRetry returns a failed job to the queue, counting the attempt.
	JobRetry
	// JobRelease returns an interrupted job to the queue, not counting it.
	JobRelease
	// JobDead keeps the job as a dead letter: listed, never taken again.
	JobDead
)

// Store is the bus store. Every method is safe for concurrent use by many
// goroutines and many processes.
type Store interface {
	Close() error
	// Backend names the implementation: "embedded" or "postgres".
	Backend() string

	PutRun(ctx context.Context, r Run) error // insert or replace by ID
	GetRun(ctx context.Context, id string) (Run, error)
	ListRuns(ctx context.Context, f RunFilter) ([]Run, error) // newest first

	PutCheckpoint(ctx context.Context, c Checkpoint) error
	LatestCheckpoint(ctx context.Context, runID string) (Checkpoint, error)

	PutVerdict(ctx context.Context, v Verdict) (Verdict, error) // assigns ID and time
	LatestVerdict(ctx context.Context, workRef string) (Verdict, error)

	RaiseDecision(ctx context.Context, d Decision) (Decision, error) // assigns ID, options default to merge/reject
	ResolveDecision(ctx context.Context, id, option, by string) (Decision, error)
	GetDecision(ctx context.Context, id string) (Decision, error)
	ListDecisions(ctx context.Context, openOnly bool) ([]Decision, error)

	PutLanding(ctx context.Context, l Landing) error // ErrConflict if the decision already landed
	GetLanding(ctx context.Context, decisionID string) (Landing, error)

	AddNote(ctx context.Context, n Note) (Note, error)
	PendingNotes(ctx context.Context, runID string) ([]Note, error) // oldest first
	MarkNoteDelivered(ctx context.Context, id int64, step int) error

	// ClaimTask claims a backlog item atomically: exactly one claimant wins.
	// A claim that was completed with an outcome other than succeeded is
	// released: it may be claimed again (the task is retried).
	ClaimTask(ctx context.Context, taskID, claimant string) (bool, error)
	CompleteTask(ctx context.Context, c Completion) error
	GetClaim(ctx context.Context, taskID string) (Claim, error)

	// The embedded queue. Enqueue appends. TakeJob takes the oldest job
	// that is free or whose lease expired (not renewed for lease; 0: leases
	// never expire), atomically; a job taken back from an expired lease
	// counts the lost delivery as an attempt. RenewJobs renews the leases of
	// every job consumer holds. FinishJob ends consumer's hold of a job as
	// end says; ErrConflict when consumer does not hold it (its lease
	// expired and another consumer took it).
	Enqueue(ctx context.Context, queue string, payload []byte) (Job, error)
	TakeJob(ctx context.Context, queue, consumer string, lease time.Duration) (Job, bool, error)
	RenewJobs(ctx context.Context, queue, consumer string) (int, error)
	FinishJob(ctx context.Context, id int64, consumer string, end JobEnd, errText string) error
	// Dead letters of the embedded queue, oldest first; ReviveJob returns
	// one to the queue with its attempts reset, DropJob deletes it.
	DeadJobs(ctx context.Context, queue string) ([]Job, error)
	ReviveJob(ctx context.Context, id int64) error
	DropJob(ctx context.Context, id int64) error
}
