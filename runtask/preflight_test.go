package runtask_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
	"github.com/conductor-dev/conductor/runtask"
)

// A data root the sandbox's uid cannot reach is refused before the run
// starts (what doctor checks), not at the first command.
func TestRunRefusesUnreachableDataRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the sandbox runs as the conductor's own uid when it is not root: everything is reachable")
	}
	sb, err := sandbox.NewWithOptions(sandbox.BackendBwrap, sandbox.Options{})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	private := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(private, "data")
	repo := t.TempDir()
	hostGit(t, repo, "init", "-q")
	hostGit(t, repo, "commit", "-q", "--allow-empty", "-m", "initial")
	pol, err := policy.LoadFS(roles.FS, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	impl, _ := pol.Role("implementer")
	task := runtask.Task{TaskVersion: 1, ID: "t-pre", Prompt: "x", Workspace: "w",
		Capabilities: runtask.Capabilities{Tools: []string{"read", "bash"}}, Session: "s", TimeoutSeconds: 60}
	_, err = runtask.Run(context.Background(), runtask.Options{Task: task, Config: conductor.Config{DataRoot: data},
		Repo: repo, Role: impl, Sandbox: sb, Model: nopModel{}})
	var ref *refusal.Refusal
	if !errors.As(err, &ref) || ref.Code != "sandbox-unavailable" || !strings.Contains(err.Error(), private) {
		t.Fatalf("err %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "runs")); err == nil {
		t.Fatal("a refused run left a run folder")
	}
}

type nopModel struct{}

func (nopModel) Complete(context.Context, runtask.ModelRequest) (runtask.ModelReply, error) {
	return runtask.ModelReply{}, errors.New("not called")
}
