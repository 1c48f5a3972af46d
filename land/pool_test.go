package land

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/runtask"
)

// TestLandGateInPooledWorktree lends the gate a warm worktree of the
// worker pool (as the CLI does): the gate runs there on exactly the landed
// tree without a .git link, the worktree goes back to the pool clean, and
// the landing is the same as with a scratch worktree.
func TestLandGateInPooledWorktree(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	marker := filepath.Join(t.TempDir(), "gate.log")
	f.rules.gate = []policy.GateCommand{{Name: "where", NeedsFiles: true, Argv: []string{"sh", "-c",
		`test ! -e .git && test -f lib/new.go && echo "$(pwd) $CONDUCTOR_LAND_TREE" >> ` + marker + ` && touch build-artifact`}}}
	pool := runtask.NewPool(filepath.Join(t.TempDir(), "pool"), f.g, nil)
	// Warm one slot.
	lease, err := pool.Acquire(ctx, f.rev("refs/heads/main"), "warm")
	if err != nil {
		t.Fatal(err)
	}
	slotDir := lease.Dir()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	checkout := func(ctx context.Context, commit string) (*Checkout, error) {
		l, err := pool.Acquire(ctx, commit, "land")
		if err != nil {
			return nil, err
		}
		return &Checkout{Git: l.Git, Release: l.Release}, nil
	}
	id, _ := f.approved("a", change)
	out, err := f.land(id, func(o *Options) { o.Checkout = checkout })
	if err != nil || out.Status != StatusLanded || out.Mode != ModeWorktree {
		t.Fatalf("%+v %v", out, err)
	}
	log := string(mustRead(t, marker))
	if !strings.HasPrefix(log, slotDir+" "+f.rev("refs/heads/main^{tree}")) {
		t.Fatalf("gate did not run in the pooled worktree %s on the landed tree: %q", slotDir, log)
	}
	st, err := pool.Status(ctx)
	if err != nil || len(st) != 1 || st[0].State != runtask.SlotFree || st[0].InUse {
		t.Fatalf("pool after landing: %+v %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(slotDir, "build-artifact")); !os.IsNotExist(err) {
		t.Fatal("the gate's files survived the release")
	}
	if _, err := os.Stat(filepath.Join(slotDir, ".git")); err != nil {
		t.Fatalf("pooled worktree lost its .git link: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(f.dataRoot, "land", "*", "scratch", "*")); len(left) > 0 {
		t.Fatalf("scratch left: %v", left)
	}
}
