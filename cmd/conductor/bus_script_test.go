package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/testenv"
)

// TestScriptBus runs testdata/script/bus: the decision and runs commands on
// the embedded store and, where PostgreSQL is installed, on PostgreSQL
// ([postgres] scripts get a fresh database in $BUS_PG_URL).
func TestScriptBus(t *testing.T) {
	pgErr := testenv.PostgresAvailable()
	if pgErr != nil && os.Getenv("CI") == "true" {
		t.Fatalf("PostgreSQL is required under CI=true: %v", pgErr)
	}
	p := scriptParams("bus", map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"readenv":    cmdReadEnv,
		"putrun":     cmdPutRun,
		"schemabump": cmdSchemaBump,
		"pgdatabase": cmdPGDatabase,
		"putlanding": cmdPutLanding,
		"putstate":   cmdPutState,
	})
	p.Condition = func(cond string) (bool, error) {
		if cond == "postgres" {
			return pgErr == nil, nil
		}
		return false, errors.New("unknown condition " + cond)
	}
	testscript.Run(t, p)
}

// readenv NAME FILE: set NAME to FILE's content, trimmed.
func cmdReadEnv(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: readenv NAME FILE")
	}
	ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile(args[1])))
}

// pgdatabase NAME: create a fresh PostgreSQL database and put its URL in NAME.
func cmdPGDatabase(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: pgdatabase NAME")
	}
	url, err := testenv.NewPostgresDatabase()
	ts.Check(err)
	ts.Setenv(args[0], url)
}

func scriptStore(ts *testscript.TestScript) bus.Store {
	s, err := bus.Open(context.Background(), bus.Options{
		DataRoot: ts.Getenv("CONDUCTOR_HOME"), DatabaseURL: ts.Getenv("DATABASE_URL"),
	})
	ts.Check(err)
	return s
}

// putrun ID STATUS [TASK [STARTED-RFC3339 [TOTAL-TOKENS]]]: record a run in
// the store, as run-task would.
func cmdPutRun(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: putrun ID STATUS [TASK [STARTED [TOKENS]]]")
	}
	r := bus.Run{ID: args[0], Status: args[1], Session: "worker-1", ModelAlias: "local", Steps: 3,
		StartedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	if len(args) > 2 {
		r.TaskID = args[2]
	}
	if len(args) > 3 {
		t, err := time.Parse(time.RFC3339, args[3])
		ts.Check(err)
		r.StartedAt = t
	}
	if len(args) > 4 {
		n, err := strconv.ParseInt(args[4], 10, 64)
		ts.Check(err)
		r.TotalTokens = &n
	}
	s := scriptStore(ts)
	defer s.Close()
	ts.Check(s.PutRun(context.Background(), r))
}

// schemabump: mark the embedded store as migrated by a newer conductor.
func cmdSchemaBump(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: schemabump")
	}
	s := scriptStore(ts)
	s.Close()
	db, err := sql.Open("sqlite", filepath.Join(ts.Getenv("CONDUCTOR_HOME"), bus.FileName))
	ts.Check(err)
	defer db.Close()
	_, err = db.Exec(`INSERT INTO conductor_schema (version, name, applied_at) VALUES (?, 'from the future', 1)`,
		bus.SchemaVersion+1)
	ts.Check(err)
}

// putlanding DECISION COMMIT: record that the decision landed, as land would.
func cmdPutLanding(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: putlanding DECISION COMMIT")
	}
	s := scriptStore(ts)
	defer s.Close()
	ts.Check(s.PutLanding(context.Background(), bus.Landing{
		DecisionID: args[0], Commit: args[1], Target: "main", PatchID: "feedface", Gate: "2 commands ok",
		LandedAt: time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC),
	}))
}

// putstate RUN STEP NOTES: a checkpoint at STEP touching two files, and
// NOTES pending operator notes, as run-task and `conductor note` would.
func cmdPutState(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: putstate RUN STEP NOTES")
	}
	step, err := strconv.Atoi(args[1])
	ts.Check(err)
	n, err := strconv.Atoi(args[2])
	ts.Check(err)
	s := scriptStore(ts)
	defer s.Close()
	ctx := context.Background()
	// One checkpoint per step, the last at 00:00:30, in workspace demo on
	// the task's work branch.
	for i := 1; i <= step; i++ {
		ts.Check(s.PutCheckpoint(ctx, bus.Checkpoint{RunID: args[0], Step: i, History: []byte("[]"),
			Files:     []bus.FileHash{{Path: "a.go", Hash: "h1"}, {Path: "b.go", Hash: ""}},
			Workspace: "demo", Branch: "refs/heads/work/t-" + args[0],
			CreatedAt: time.Date(2026, 1, 1, 0, 0, 30-step+i, 0, time.UTC)}))
	}
	for i := range n {
		_, err := s.AddNote(ctx, bus.Note{RunID: args[0], Text: fmt.Sprint("note ", i)})
		ts.Check(err)
	}
}
