package runtask

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor/runrec"
)

// TestCheckpointsAreWorkspaceScoped: a checkpoint records the task's
// workspace and its work branch when the repository has one (a refinement
// round after review); a checkpoint of another workspace is not resumed.
func TestCheckpointsAreWorkspaceScoped(t *testing.T) {
	for _, withBranch := range []bool{false, true} {
		name := map[bool]string{false: "no work branch", true: "work branch"}[withBranch]
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.env["WORKER_CHECKPOINT_EVERY_N_STEPS"] = "1"
			if withBranch {
				git(t, f.repo, "branch", "work/t-test")
			}
			store := newMemStore()
			ctx, cancel := context.WithCancel(context.Background())
			m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
				call(ToolWriteFile, map[string]any{"path": "a.txt", "content": "A\n"}),
				func(ModelRequest) (ModelReply, error) { cancel(); return ModelReply{}, ctx.Err() },
			}}
			o := f.opts(testTask("scoped"), m)
			o.Store = store
			res, err := Run(ctx, o)
			if err != nil || res.Status != runrec.StatusCancelled {
				t.Fatalf("%v %+v", err, res)
			}
			cp, err := store.LatestCheckpoint(context.Background(), res.RunID)
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			if withBranch {
				want = "refs/heads/work/t-test"
			}
			if cp.Workspace != "demo" || cp.Branch != want {
				t.Fatalf("checkpoint workspace %q branch %q, want demo and %q", cp.Workspace, cp.Branch, want)
			}
		})
	}
	t.Run("another workspace's checkpoint", func(t *testing.T) {
		f := newFixture(t)
		f.env["WORKER_CHECKPOINT_EVERY_N_STEPS"] = "1"
		store := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		m := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){
			call(ToolWriteFile, map[string]any{"path": "a.txt", "content": "A\n"}),
			func(ModelRequest) (ModelReply, error) { cancel(); return ModelReply{}, ctx.Err() },
		}}
		o := f.opts(testTask("scoped"), m)
		o.Store = store
		res, err := Run(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		store.mu.Lock()
		for i := range store.cps {
			store.cps[i].Workspace = "other-repo"
		}
		store.mu.Unlock()
		// The session folder is lost: only the store's checkpoint is left.
		if err := os.RemoveAll(filepath.Join(f.data, "sessions")); err != nil {
			t.Fatal(err)
		}
		m2 := &scriptModel{turns: []func(ModelRequest) (ModelReply, error){finalTurn("done")}}
		o2 := f.opts(Task{}, m2)
		o2.Store = store
		_, err = Resume(context.Background(), o2, res.RunID)
		if err == nil || !strings.Contains(err.Error(), `workspace "other-repo", not the task's "demo"`) {
			t.Fatalf("resume of another workspace's checkpoint: %v", err)
		}
		if len(m2.requests()) != 0 {
			t.Fatalf("the model was asked %d times", len(m2.requests()))
		}
	})
}
