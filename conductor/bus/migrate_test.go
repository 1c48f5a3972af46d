package bus

import (
	"context"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/testenv"
)

// TestCheckpointWorkspaceMigration: a store made by a conductor that knew
// schema 4 (checkpoints without a workspace) is migrated when opened: its
// checkpoints stay readable (workspace empty), new ones carry theirs. On
// sqlite and PostgreSQL.
func TestCheckpointWorkspaceMigration(t *testing.T) {
	ctx := context.Background()
	for _, b := range []struct {
		name string
		opts func(t *testing.T) Options
	}{
		{"embedded", func(t *testing.T) Options { return Options{DataRoot: t.TempDir()} }},
		{"postgres", func(t *testing.T) Options { return Options{DatabaseURL: testenv.Postgres(t)} }},
	} {
		t.Run(b.name, func(t *testing.T) {
			o := b.opts(t)
			old := migrationsBefore(t, ctx, o, "checkpoint workspace")
			s := old.(*sqlStore)
			if _, err := s.b.db().exec(ctx, `INSERT INTO checkpoints (run_id, step, history, files, worktree, branch, created_at)
				VALUES ('r-old', 2, NULL, '[]', '/wt', '', 5)`); err != nil {
				t.Fatal(err)
			}
			old.Close()
			st, err := Open(ctx, o)
			if err != nil {
				t.Fatalf("open migrates: %v", err)
			}
			defer st.Close()
			cp, err := st.LatestCheckpoint(ctx, "r-old")
			if err != nil || cp.Step != 2 || cp.Workspace != "" || cp.Worktree != "/wt" {
				t.Fatalf("old checkpoint after migration: %+v %v", cp, err)
			}
			if err := st.PutCheckpoint(ctx, Checkpoint{RunID: "r-new", Step: 1, Workspace: "stack-repo", Branch: "refs/heads/work/t-1", CreatedAt: time.Unix(9, 0)}); err != nil {
				t.Fatal(err)
			}
			cp, err = st.LatestCheckpoint(ctx, "r-new")
			if err != nil || cp.Workspace != "stack-repo" || cp.Branch != "refs/heads/work/t-1" {
				t.Fatalf("new checkpoint: %+v %v", cp, err)
			}
			sums, err := st.(Views).ListCheckpoints(ctx, "r-new")
			if err != nil || len(sums) != 1 || sums[0].Workspace != "stack-repo" || sums[0].Branch != "refs/heads/work/t-1" {
				t.Fatalf("listed: %+v %v", sums, err)
			}
		})
	}
}

// migrationsBefore makes a store at the schema before the migration
// called name, as an older conductor left it.
func migrationsBefore(t *testing.T, ctx context.Context, o Options, name string) Store {
	t.Helper()
	keep := migrations
	i := 0
	for i < len(keep) && keep[i].name != name {
		i++
	}
	if i == len(keep) {
		t.Fatalf("no migration %q", name)
	}
	// Open with the shorter list: migrate reads the package variable (the
	// bus tests never run in parallel).
	migrations = keep[:i]
	defer func() { migrations = keep }()
	st, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
