package bus

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// The embedded store prepares each query once and keeps it: repeated
// reads and writes, in and out of transactions, add no statements; a query
// beyond the bound still runs (unprepared); a bad query still reports its
// own error; a reopened store answers from the same file.
func TestSQLiteStatementCache(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := Open(ctx, Options{DataRoot: dir})
	if err != nil {
		t.Fatal(err)
	}
	s := st.(*sqlStore)
	b := s.b.(*sqliteBackend)
	if _, err := s.AddNote(ctx, Note{RunID: "r-1", Text: "first"}); err != nil {
		t.Fatal(err)
	}
	before := len(b.stmts.m)
	for i := 0; i < 50; i++ {
		notes, err := s.PendingNotes(ctx, "r-1")
		if err != nil || len(notes) != 1 || notes[0].Text != "first" {
			t.Fatalf("pending notes: %v %+v", notes, err)
		}
	}
	if _, err := s.AddNote(ctx, Note{RunID: "r-1", Text: "second"}); err != nil {
		t.Fatal(err)
	}
	grown := len(b.stmts.m)
	for i := 0; i < 20; i++ {
		if _, err := s.AddNote(ctx, Note{RunID: "r-2", Text: fmt.Sprint("n", i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PendingNotes(ctx, "r-2"); err != nil {
			t.Fatal(err)
		}
	}
	if len(b.stmts.m) != grown || grown < before+1 {
		t.Fatalf("statements: %d before, %d after the first note, %d after 20 more: repeated queries must reuse theirs", before, grown, len(b.stmts.m))
	}
	notes, err := s.PendingNotes(ctx, "r-2")
	if err != nil || len(notes) != 20 {
		t.Fatalf("r-2 notes: %d %v", len(notes), err)
	}

	// Beyond the bound: still answered, not kept.
	for i := len(b.stmts.m); i < maxCachedStmts+5; i++ {
		var n int64
		if err := one(ctx, b.db(), fmt.Sprintf("SELECT %d", i), nil, &n); err != nil || n != int64(i) {
			t.Fatalf("query %d beyond the bound: %d %v", i, n, err)
		}
	}
	if len(b.stmts.m) != maxCachedStmts {
		t.Fatalf("%d statements kept, bound %d", len(b.stmts.m), maxCachedStmts)
	}
	// A bad query reports SQLite's error, in and out of a transaction.
	if _, err := b.db().exec(ctx, "SELECT nope FROM nowhere"); err == nil || !strings.Contains(err.Error(), "nowhere") {
		t.Fatalf("bad query: %v", err)
	}
	err = b.tx(ctx, func(q querier) error {
		_, err := q.exec(ctx, "UPDATE nowhere SET x = 1")
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "nowhere") {
		t.Fatalf("bad query in a transaction: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = Open(ctx, Options{DataRoot: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if notes, err := st.PendingNotes(ctx, "r-1"); err != nil || len(notes) != 2 {
		t.Fatalf("reopened: %d notes, %v", len(notes), err)
	}
}
