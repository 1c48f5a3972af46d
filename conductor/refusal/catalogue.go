package refusal

import "slices"

// The catalogue: every code conductor can refuse with, in the order of
// docs/refusals.md (which says, for each, its cause and its fix).
// TestCatalogue keeps the two equal and TestEveryEmittedCodeIsCatalogued
// keeps the sources from refusing with a code that is not here.
const (
	// Landing (`conductor land`)
	DecisionIDInvalid     Code = "decision-id-invalid"
	DecisionNotFound      Code = "decision-not-found"
	DecisionNotResolved   Code = "decision-not-resolved"
	DecisionNotMerge      Code = "decision-not-merge"
	TargetInvalid         Code = "target-invalid"
	WorkRefInvalid        Code = "work-ref-invalid"
	TargetSymbolic        Code = "target-symbolic"
	NotesRefInvalid       Code = "notes-ref-invalid"
	TargetNotFound        Code = "target-not-found"
	NoApproval            Code = "no-approval"
	VerdictStale          Code = "verdict-stale"
	WorkRefMoved          Code = "work-ref-moved"
	LandedReceiptInvalid  Code = "landed-receipt-invalid"
	TargetNotAllowed      Code = "target-not-allowed"
	AddsRootFile          Code = "adds-root-file"
	AddsTopLevelDir       Code = "adds-top-level-dir"
	ForbiddenPath         Code = "forbidden-path"
	PolicyChange          Code = "policy-change"
	UnsafePathName        Code = "unsafe-path-name"
	Conflict              Code = "conflict"
	PatchIDMismatch       Code = "patch-id-mismatch"
	TargetCheckedOutDirty Code = "target-checked-out-dirty"
	GateFailed            Code = "gate-failed"
	TargetMoved           Code = "target-moved"

	// Audit (`conductor audit`)
	AuditMismatch Code = "audit-mismatch"

	// Review (`conductor review`)
	ReviewFailed         Code = "review-failed"
	RoleWriteDenied      Code = "role-write-denied"
	NestedRepository     Code = "nested-repository"
	SpecialFile          Code = "special-file"
	WorkBranchCheckedOut Code = "work-branch-checked-out"

	// Role contracts (`conductor policy`, the worker's tools)
	PolicyInvalid      Code = "policy-invalid"
	ToolNotAllowed     Code = "tool-not-allowed"
	ToolsNotAllowed    Code = "tools-not-allowed"
	CommandNotAllowed  Code = "command-not-allowed"
	ArgumentNotAllowed Code = "argument-not-allowed"
	WriteNotAllowed    Code = "write-not-allowed"

	// Worker sessions (`conductor run-task`)
	SandboxUnavailable  Code = "sandbox-unavailable"
	RuntimeUnavailable  Code = "runtime-unavailable"
	SessionUnknown      Code = "session-unknown"
	SessionRepoMismatch Code = "session-repo-mismatch"
	SessionUnfinished   Code = "session-unfinished"
	SessionFinished     Code = "session-finished"

	// Forge (`conductor pr open`, `conductor push`, `conductor land --close-issue`)
	IssueNotFound  Code = "issue-not-found"
	ForgeForbidden Code = "forge-forbidden"

	// Bus store (`conductor decision`, any command opening the store)
	DecisionAlreadyResolved  Code = "decision-already-resolved"
	DecisionOptionNotOffered Code = "decision-option-not-offered"
	DecisionAlreadyLanded    Code = "decision-already-landed"
	StoreSchemaTooNew        Code = "store-schema-too-new"

	// Agent lifecycle (`conductor mcp`)
	TaskNotFound      Code = "task-not-found"
	TaskClaimed       Code = "task-claimed"
	TaskCompleted     Code = "task-completed"
	NotLeaseHolder    Code = "not-lease-holder"
	RunNotLeased      Code = "run-not-leased"
	CompletionDiffers Code = "completion-differs"
	RunNotRunning     Code = "run-not-running"
	PatchDoesNotApply Code = "patch-does-not-apply"
	ListenNeedsToken  Code = "listen-needs-token"

	// Record (`conductor record`, `conductor land --record`)
	RecordNotLanded       Code = "record-not-landed"
	RecordStatusMalformed Code = "record-status-malformed"
)

// Catalogue lists every code, in the order of docs/refusals.md.
var Catalogue = []Code{
	DecisionIDInvalid,
	DecisionNotFound,
	DecisionNotResolved,
	DecisionNotMerge,
	TargetInvalid,
	WorkRefInvalid,
	TargetSymbolic,
	NotesRefInvalid,
	TargetNotFound,
	NoApproval,
	VerdictStale,
	WorkRefMoved,
	LandedReceiptInvalid,
	TargetNotAllowed,
	AddsRootFile,
	AddsTopLevelDir,
	ForbiddenPath,
	PolicyChange,
	UnsafePathName,
	Conflict,
	PatchIDMismatch,
	TargetCheckedOutDirty,
	GateFailed,
	TargetMoved,
	AuditMismatch,
	ReviewFailed,
	RoleWriteDenied,
	NestedRepository,
	SpecialFile,
	WorkBranchCheckedOut,
	PolicyInvalid,
	ToolNotAllowed,
	ToolsNotAllowed,
	CommandNotAllowed,
	ArgumentNotAllowed,
	WriteNotAllowed,
	SandboxUnavailable,
	RuntimeUnavailable,
	SessionUnknown,
	SessionRepoMismatch,
	SessionUnfinished,
	SessionFinished,
	IssueNotFound,
	ForgeForbidden,
	DecisionAlreadyResolved,
	DecisionOptionNotOffered,
	DecisionAlreadyLanded,
	StoreSchemaTooNew,
	TaskNotFound,
	TaskClaimed,
	TaskCompleted,
	NotLeaseHolder,
	RunNotLeased,
	CompletionDiffers,
	RunNotRunning,
	PatchDoesNotApply,
	ListenNeedsToken,
	RecordNotLanded,
	RecordStatusMalformed,
}

// Known reports whether c is in the catalogue.
func Known(c Code) bool { return slices.Contains(Catalogue, c) }
