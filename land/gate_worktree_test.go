package land

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/policy"
)

// TestLandGateWorktreeIsItsOwn (issue 14, item 2): a gate that needs files
// runs in a scratch worktree of the landing's own under the data root,
// never in a worktree lent by the worker pool, and what it plants there (a
// repository in a folder, a named pipe) is removed with it: nothing the
// gate leaves can meet a later task's host git.
func TestLandGateWorktreeIsItsOwn(t *testing.T) {
	f := newFixture(t)
	where := filepath.Join(t.TempDir(), "where")
	f.rules.gate = []policy.GateCommand{{Name: "plant", NeedsFiles: true, Argv: []string{"sh", "-c",
		`pwd > ` + where + ` && mkdir -p vendor/lib/.git/objects lib/nest/.git && mkfifo lib/nest/.git/HEAD && ` +
			`printf '[filter "evil"]\n\tclean = touch /nonexistent\n' > vendor/lib/.git/config`}}}
	id, _ := f.approved("a", change)
	out, err := f.land(id, nil)
	if err != nil || out.Status != StatusLanded || out.Mode != ModeWorktree {
		t.Fatalf("%+v %v", out, err)
	}
	dir := strings.TrimSpace(string(mustRead(t, where)))
	if rel, err := filepath.Rel(f.dataRoot, dir); err != nil || strings.HasPrefix(rel, "..") {
		t.Fatalf("the gate ran in %s, outside the landing's scratch folder under %s", dir, f.dataRoot)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("the gate's worktree %s survived the landing: %v", dir, err)
	}
}
