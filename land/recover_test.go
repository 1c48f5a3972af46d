package land

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
)

// unrecorded is a store whose PutLanding fails: the landing's commit is on
// the target but its row is missing, as after a kill between the two.
type unrecorded struct{ Store }

func (unrecorded) PutLanding(context.Context, bus.Landing) error { return errors.New("store down") }

// landUnrecorded lands id with its row lost and returns the landed commit.
func landUnrecorded(t *testing.T, f *fixture, id string) string {
	t.Helper()
	before := f.rev("refs/heads/main")
	_, err := f.land(id, func(o *Options) { o.Store = unrecorded{f.store} })
	if err == nil || !strings.Contains(err.Error(), "store down") {
		t.Fatalf("land with the store down: %v", err)
	}
	c := f.rev("refs/heads/main")
	if c == before {
		t.Fatal("main did not move")
	}
	return c
}

// TestRecoverVerifiesReceipt: crash recovery ("already landed") accepts only
// a commit on the target whose receipt verifies, never a commit that merely
// carries the decision's trailer.
func TestRecoverVerifiesReceipt(t *testing.T) {
	ctx := context.Background()
	t.Run("genuine unrecorded landing is recovered", func(t *testing.T) {
		f := newFixture(t)
		id, _ := f.approved("a", change)
		c := landUnrecorded(t, f, id)
		out, err := f.land(id, nil)
		if err != nil || out.Status != StatusAlreadyLanded || out.Commit != c {
			t.Fatalf("land again: %+v, %v; want already-landed %s", out, err, c)
		}
		if l, err := f.store.GetLanding(ctx, id); err != nil || l.Commit != c {
			t.Fatalf("landing row: %+v, %v", l, err)
		}
	})
	t.Run("genuine unrecorded landing under a later commit is recovered", func(t *testing.T) {
		f := newFixture(t)
		id, _ := f.approved("a", change)
		c := landUnrecorded(t, f, id)
		f.commit("refs/heads/main", "", map[string]string{"src/later.txt": "later\n"}, "later")
		out, err := f.land(id, nil)
		if err != nil || out.Status != StatusAlreadyLanded || out.Commit != c {
			t.Fatalf("land again: %+v, %v; want already-landed %s", out, err, c)
		}
	})
	for _, tc := range []struct {
		name  string
		forge func(f *fixture, id, approved string)
	}{
		{"forged trailer, work ref moved", func(f *fixture, id, approved string) {
			f.commit("refs/heads/main", "", map[string]string{"src/evil.txt": "evil\n"}, "evil\n\nDecision-Id: "+id)
			f.commit("refs/heads/work/a", approved, map[string]string{"lib/late.go": "package lib\n"}, "late")
		}},
		{"forged trailers copied from the approved commit's change, no receipt", func(f *fixture, id, approved string) {
			pid := f.patchID(f.rev("refs/heads/main"), approved)
			files := map[string]string{}
			for k, v := range change {
				files[k] = v
			}
			f.commit("refs/heads/main", "", files, "same change\n\nDecision-Id: "+id+"\nReviewed-Commit: "+approved+"\nPatch-Id: "+pid+"\nRun-Id: run-a\nModel: fake")
		}},
		{"genuine message and receipt copied onto another tree", func(f *fixture, id, approved string) {
			landed := landUnrecorded(t, f, id)
			parent := f.rev(landed + "^")
			msg := f.git("log", "-1", "--format=%B", landed)
			files := map[string]string{"src/evil.txt": "evil\n"}
			for k, v := range change {
				files[k] = v
			}
			f.git("update-ref", "refs/heads/main", parent)
			forged := f.commit("refs/heads/main", parent, files, msg)
			note := f.git("notes", "--ref="+NotesRef, "list", landed)
			f.git("notes", "--ref="+NotesRef, "add", "-f", "-C", note, forged)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			id, approved := f.approved("a", change)
			tc.forge(f, id, approved)
			main, notes := f.rev("refs/heads/main"), f.rev(NotesRef)
			out, err := f.land(id, nil)
			var rf *refusal.Refusal
			if !errors.As(err, &rf) || rf.Code != "landed-receipt-invalid" {
				t.Fatalf("land: %+v, %v; want refusal landed-receipt-invalid", out, err)
			}
			t.Log(rf.Reason)
			if got := f.rev("refs/heads/main"); got != main {
				t.Errorf("main moved: %s -> %s", main, got)
			}
			if got := f.rev(NotesRef); got != notes {
				t.Errorf("notes moved: %q -> %q", notes, got)
			}
			if _, err := f.store.GetLanding(ctx, id); !errors.Is(err, bus.ErrNotFound) {
				t.Errorf("landing recorded: %v", err)
			}
		})
	}
}
