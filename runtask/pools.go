package runtask

import (
	"context"
	"errors"
	"fmt"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	pgit "github.com/conductor-dev/conductor/patch/git" // git names a test helper in this package
)

// PoolsOptions selects the pools `conductor pool status|prune` works on.
type PoolsOptions struct {
	Config conductor.Config // the worktree base and the pool bounds
	Repo   string           // only this repository's pool; "" every pool under the worktree base
}

// PoolReport is one pool as `conductor pool status` shows it.
type PoolReport struct {
	Dir   string       `json:"dir"`
	Repo  string       `json:"repo"`
	Slots []SlotStatus `json:"slots"`
}

// PoolStatus lists the slots of the pools o selects.
func PoolStatus(ctx context.Context, o PoolsOptions) ([]PoolReport, error) {
	pools, err := o.open()
	if err != nil {
		return nil, err
	}
	out := []PoolReport{}
	for _, p := range pools {
		st, err := p.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("pool %s: %w", p.Dir, err)
		}
		if st == nil {
			st = []SlotStatus{}
		}
		out = append(out, PoolReport{Dir: p.Dir, Repo: p.Repo.GitDir, Slots: st})
	}
	return out, nil
}

// PruneOptions says what `conductor pool prune` discards.
type PruneOptions struct {
	PoolsOptions
	All     bool // every free worktree, not only those beyond the bounds
	Orphans bool // also worktrees kept for sessions whose process is gone, and their docker containers
}

// PruneReport is what a prune removed.
type PruneReport struct {
	Slots      []string // the slots removed
	Containers []string // the orphan docker sandbox containers removed
	// ContainersNotChecked says why orphan containers were not looked for
	// (the engine is down); nil when they were or no docker is installed.
	ContainersNotChecked error
}

// PrunePools prunes every pool o selects (Pool.Prune), then, with
// Orphans, reaps the docker sandbox containers of conductor processes that
// are gone. It stops at the first pool that fails, reporting what was
// removed until then.
func PrunePools(ctx context.Context, o PruneOptions) (PruneReport, error) {
	var rep PruneReport
	pools, err := o.open()
	if err != nil {
		return rep, err
	}
	for _, p := range pools {
		removed, err := p.Prune(ctx, o.All, o.Orphans)
		rep.Slots = append(rep.Slots, removed...)
		if err != nil {
			return rep, fmt.Errorf("pool %s: %w", p.Dir, err)
		}
	}
	if o.Orphans {
		names, err := sandbox.ReapOrphanContainers(ctx, sandbox.OptionsFrom(o.Config.SandboxLimits))
		rep.Containers = names
		if err != nil && !errors.Is(err, sandbox.ErrNoDocker) {
			rep.ContainersNotChecked = err // the next start reaps them
		}
	}
	return rep, nil
}

func (o PoolsOptions) open() ([]*Pool, error) {
	if o.Repo != "" {
		g, err := pgit.OpenRepo(o.Repo)
		if err != nil {
			return nil, err
		}
		return []*Pool{NewPool(o.Config.WorktreeBase, g, o.Config)}, nil
	}
	return OpenPools(o.Config.WorktreeBase, o.Config)
}
