package dispatch

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
)

// TestUnattendedReviewUsesTheOperatorsSandbox: the unattended review's
// checks and gate run in the backend the operator chose, opened the way
// the command line opens it (its options, the run's id for a container's
// label), never in a default backend the review would open by itself.
// Here the operator's backend cannot run: the review is refused with the
// operator's probe error, and nothing falls back to another bwrap.
func TestUnattendedReviewUsesTheOperatorsSandbox(t *testing.T) {
	st, err := bus.Open(context.Background(), bus.Options{DataRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, tc := range []struct{ chosen, opened string }{
		{"", sandbox.BackendAuto},
		{sandbox.BackendDocker, sandbox.BackendDocker},
		{sandbox.BackendBwrap, sandbox.BackendBwrap},
	} {
		var opened []string
		closed := 0
		probe := errors.New("bwrap: /opt/operator/bwrap: no such file (the operator's CONDUCTOR_BWRAP)")
		u := Unattended{
			Policy: func(context.Context, string, string) (*policy.Policy, error) {
				return policy.Load(roles.FS, "")
			},
			Forge: func() (forge.Settings, error) {
				t.Fatal("a refused review opened the forge")
				return forge.Settings{}, nil
			},
			RunsDir: func(id string) string { return t.TempDir() },
			Sandbox: tc.chosen,
			Sandboxes: Sandboxes{
				Open: func(name, runID string) (sandbox.Sandbox, error) {
					opened = append(opened, name+" "+runID)
					return sandbox.Unavailable(probe), nil
				},
				Close: func(sandbox.Sandbox) { closed++ },
			},
		}
		_, err := u.Run(context.Background(), st, runrec.Result{RunID: "r-u1", Repo: t.TempDir()}, 0)
		var rf *refusal.Refusal
		if !errors.As(err, &rf) || rf.Code != "sandbox-unavailable" || !strings.Contains(err.Error(), probe.Error()) {
			t.Fatalf("sandbox %q: Run = %v, want the refusal sandbox-unavailable naming the operator's probe error", tc.chosen, err)
		}
		if want := tc.opened + " r-u1"; len(opened) != 1 || opened[0] != want {
			t.Errorf("sandbox %q: opened %q, want [%q]", tc.chosen, opened, want)
		}
		if closed != 1 {
			t.Errorf("sandbox %q: closed %d times, want 1", tc.chosen, closed)
		}
	}
}
