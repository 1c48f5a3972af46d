package bus

import "strings"

// SchemaVersion is the newest schema this binary knows. A store whose
// schema is newer is refused (CodeSchemaTooNew); an older one is migrated
// forward when opened.
const SchemaVersion = 8

// migration is one step of the schema. Statements are written once for both
// backends; the dialect fills the few type names that differ.
type migration struct {
	version int
	name    string
	stmts   []string
}

// Times are stored as int64 Unix nanoseconds (0 = unset) in both backends so
// that a value round-trips exactly and compares the same everywhere.
var migrations = []migration{
	{version: 1, name: "initial schema", stmts: []string{
		`CREATE TABLE runs (
			id                TEXT PRIMARY KEY,
			task_id           TEXT NOT NULL DEFAULT '',
			session           TEXT NOT NULL DEFAULT '',
			role              TEXT NOT NULL DEFAULT '',
			status            TEXT NOT NULL DEFAULT '',
			model_alias       TEXT NOT NULL DEFAULT '',
			model             TEXT NOT NULL DEFAULT '',
			prompt_tokens     BIGINT,
			completion_tokens BIGINT,
			total_tokens      BIGINT,
			steps             BIGINT NOT NULL DEFAULT 0,
			repo              TEXT NOT NULL DEFAULT '',
			base_commit       TEXT NOT NULL DEFAULT '',
			worktree          TEXT NOT NULL DEFAULT '',
			branch            TEXT NOT NULL DEFAULT '',
			patch_id          TEXT NOT NULL DEFAULT '',
			started_at        BIGINT NOT NULL DEFAULT 0,
			finished_at       BIGINT NOT NULL DEFAULT 0,
			outcome           TEXT NOT NULL DEFAULT ''
		)`,
		`CREATE INDEX runs_started ON runs (started_at, id)`,
		`CREATE INDEX runs_task ON runs (task_id)`,
		`CREATE TABLE checkpoints (
			id         {{serial}},
			run_id     TEXT NOT NULL,
			step       BIGINT NOT NULL,
			history    {{blob}},
			files      TEXT NOT NULL DEFAULT '[]',
			worktree   TEXT NOT NULL DEFAULT '',
			branch     TEXT NOT NULL DEFAULT '',
			created_at BIGINT NOT NULL
		)`,
		`CREATE INDEX checkpoints_run ON checkpoints (run_id, step, id)`,
		`CREATE TABLE verdicts (
			id         {{serial}},
			run_id     TEXT NOT NULL DEFAULT '',
			work_ref   TEXT NOT NULL,
			commit_sha TEXT NOT NULL,
			patch_id   TEXT NOT NULL DEFAULT '',
			verdict    TEXT NOT NULL,
			reviewer   TEXT NOT NULL DEFAULT '',
			findings   TEXT NOT NULL DEFAULT '[]',
			created_at BIGINT NOT NULL
		)`,
		`CREATE INDEX verdicts_work_ref ON verdicts (work_ref, id)`,
		`CREATE TABLE decisions (
			seq         {{serial}},
			id          TEXT NOT NULL UNIQUE,
			kind        TEXT NOT NULL,
			options     TEXT NOT NULL,
			raised_by   TEXT NOT NULL DEFAULT '',
			repo        TEXT NOT NULL DEFAULT '',
			work_ref    TEXT NOT NULL DEFAULT '',
			commit_sha  TEXT NOT NULL DEFAULT '',
			target      TEXT NOT NULL DEFAULT '',
			run_id      TEXT NOT NULL DEFAULT '',
			issue       BIGINT NOT NULL DEFAULT 0,
			raised_at   BIGINT NOT NULL,
			chosen      TEXT NOT NULL DEFAULT '',
			resolved_by TEXT NOT NULL DEFAULT '',
			resolved_at BIGINT NOT NULL DEFAULT 0
		)`,
		`CREATE INDEX decisions_open ON decisions (chosen, seq)`,
		`CREATE TABLE landings (
			decision_id TEXT PRIMARY KEY,
			commit_sha  TEXT NOT NULL,
			target      TEXT NOT NULL DEFAULT '',
			patch_id    TEXT NOT NULL DEFAULT '',
			gate        TEXT NOT NULL DEFAULT '',
			landed_at   BIGINT NOT NULL
		)`,
		`CREATE TABLE notes (
			id                {{serial}},
			run_id            TEXT NOT NULL,
			body              TEXT NOT NULL,
			created_at        BIGINT NOT NULL,
			delivered_at_step BIGINT NOT NULL DEFAULT 0
		)`,
		`CREATE INDEX notes_pending ON notes (run_id, delivered_at_step, id)`,
		`CREATE TABLE claims (
			task_id           TEXT PRIMARY KEY,
			claimant          TEXT NOT NULL,
			claimed_at        BIGINT NOT NULL,
			completed_at      BIGINT NOT NULL DEFAULT 0,
			run_id            TEXT NOT NULL DEFAULT '',
			outcome           TEXT NOT NULL DEFAULT '',
			model_alias       TEXT NOT NULL DEFAULT '',
			prompt_tokens     BIGINT,
			completion_tokens BIGINT,
			total_tokens      BIGINT
		)`,
		`CREATE TABLE jobs (
			id          {{serial}},
			queue       TEXT NOT NULL,
			payload     {{blob}},
			attempts    BIGINT NOT NULL DEFAULT 0,
			taken_by    TEXT NOT NULL DEFAULT '',
			taken_at    BIGINT NOT NULL DEFAULT 0,
			created_at  BIGINT NOT NULL,
			dead_at     BIGINT NOT NULL DEFAULT 0,
			last_error  TEXT NOT NULL DEFAULT ''
		)`,
		`CREATE INDEX jobs_ready ON jobs (queue, taken_by, dead_at, id)`,
	}},
	{version: 2, name: "claim reason", stmts: []string{
		`ALTER TABLE claims ADD COLUMN reason TEXT NOT NULL DEFAULT ''`,
	}},
	// Leases let an outside agent (conductor mcp) hold a backlog claim for a
	// while; events are the append-only lifecycle record (agents.go).
	{version: 3, name: "task leases and lifecycle events", stmts: []string{
		`CREATE TABLE task_leases (
			task_id    TEXT PRIMARY KEY,
			run_id     TEXT NOT NULL,
			holder     TEXT NOT NULL,
			token_hash TEXT NOT NULL,
			claimed_at BIGINT NOT NULL,
			expires_at BIGINT NOT NULL
		)`,
		`CREATE INDEX task_leases_run ON task_leases (run_id)`,
		`CREATE TABLE events (
			id         {{serial}},
			created_at BIGINT NOT NULL,
			kind       TEXT NOT NULL,
			run_id     TEXT NOT NULL DEFAULT '',
			task_id    TEXT NOT NULL DEFAULT '',
			actor      TEXT NOT NULL DEFAULT '',
			metadata   TEXT NOT NULL DEFAULT '{}'
		)`,
		`CREATE INDEX events_run ON events (run_id, id)`,
	}},
	// The per-alias model semaphore shared by every worker (slots.go) and
	// the workers' heartbeats (workers.go).
	{version: 4, name: "model slots and worker heartbeats", stmts: []string{
		`CREATE TABLE model_slots (
			name        TEXT NOT NULL,
			slot        BIGINT NOT NULL,
			holder      TEXT NOT NULL,
			max_slots   BIGINT NOT NULL,
			acquired_at BIGINT NOT NULL,
			expires_at  BIGINT NOT NULL,
			PRIMARY KEY (name, slot)
		)`,
		`CREATE TABLE worker_heartbeats (
			consumer    TEXT PRIMARY KEY,
			host        TEXT NOT NULL DEFAULT '',
			pid         BIGINT NOT NULL DEFAULT 0,
			queue       TEXT NOT NULL DEFAULT '',
			concurrency BIGINT NOT NULL DEFAULT 0,
			in_flight   BIGINT NOT NULL DEFAULT 0,
			started_at  BIGINT NOT NULL,
			seen_at     BIGINT NOT NULL,
			ttl         BIGINT NOT NULL,
			stopped_at  BIGINT NOT NULL DEFAULT 0
		)`,
	}},
	// Checkpoints are scoped to the run's workspace (issue 20.6); rows
	// written before carry an empty workspace.
	{version: 5, name: "checkpoint workspace", stmts: []string{
		`ALTER TABLE checkpoints ADD COLUMN workspace TEXT NOT NULL DEFAULT ''`,
	}},
	// The seed's harness alias (a job's harnessAlias, else the role's
	// harness) on the run, its claim and its checkpoints.
	{version: 6, name: "harness alias", stmts: []string{
		`ALTER TABLE runs ADD COLUMN harness_alias TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE claims ADD COLUMN harness_alias TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE checkpoints ADD COLUMN harness_alias TEXT NOT NULL DEFAULT ''`,
	}},
	// A worker's jobs beside its lanes: finishing, and taken ahead of a
	// lane (in_flight is the lanes in use).
	{version: 7, name: "worker heartbeat occupancy", stmts: []string{
		`ALTER TABLE worker_heartbeats ADD COLUMN finishing BIGINT NOT NULL DEFAULT 0`,
		`ALTER TABLE worker_heartbeats ADD COLUMN waiting BIGINT NOT NULL DEFAULT 0`,
	}},
	// The model semaphore's waiters, served in the order they came
	// (TryAcquireSlot): seq orders them, seen_until is when a waiter that
	// stopped asking loses its place.
	{version: 8, name: "model slot waiters", stmts: []string{
		`CREATE TABLE model_slot_waiters (
			name       TEXT NOT NULL,
			holder     TEXT NOT NULL,
			seq        BIGINT NOT NULL,
			seen_until BIGINT NOT NULL,
			PRIMARY KEY (name, holder)
		)`,
	}},
}

// versionTable records every migration applied: version, name, time.
const versionTable = `CREATE TABLE IF NOT EXISTS conductor_schema (
	version    BIGINT PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at BIGINT NOT NULL
)`

// dialect is what differs between the backends' SQL.
type dialect struct {
	serial     string // auto-increment primary key column type
	blob       string // byte string column type
	skipLocked string // row-lock clause for "take the oldest free row"
}

var (
	sqliteDialect = dialect{
		serial: "INTEGER PRIMARY KEY AUTOINCREMENT",
		blob:   "BLOB",
	}
	postgresDialect = dialect{
		serial:     "BIGSERIAL PRIMARY KEY",
		blob:       "BYTEA",
		skipLocked: " FOR UPDATE SKIP LOCKED",
	}
)

func (d dialect) ddl(stmt string) string {
	return strings.NewReplacer("{{serial}}", d.serial, "{{blob}}", d.blob).Replace(stmt)
}
