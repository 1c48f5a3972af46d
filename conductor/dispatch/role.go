package dispatch

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"

	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/roles"
	"github.com/conductor-dev/conductor/runtask"
)

// DefaultRole is the role of a task that names none.
const DefaultRole = "implementer"

// LoadRole loads the effective role contract of task: the defaults merged
// with rolesDir (the operator's --roles DIR) when set, else with the
// workspace repository's roles/ folder.
//
// A roles folder found in the repository is the repository's, not the
// operator's: it may not set a role's sandbox to none (policy.LoadRepo);
// rolesDir, --sandbox and WORKER_SANDBOX are the operator's.
func LoadRole(rolesDir string, opts runtask.Options, task runtask.Task) (*policy.Role, error) {
	dir := rolesDir
	load := policy.Load
	if dir != "" {
		if sub := filepath.Join(dir, "roles"); isDir(sub) {
			dir = sub
		} else if !isDir(dir) {
			return nil, fmt.Errorf("roles folder %s: not a folder", dir)
		}
	} else if g, err := runtask.ResolveRepo(opts.Repo, task.Workspace, opts.Config); err == nil && g.WorkTree != "" {
		if sub := filepath.Join(g.WorkTree, "roles"); isDir(sub) {
			dir, load = sub, policy.LoadRepo
		}
	}
	pol, err := load(roles.FS, dir)
	if err != nil {
		return nil, err
	}
	role, err := pol.Role(cmp.Or(task.Role, DefaultRole))
	if err != nil {
		return nil, fmt.Errorf("task %s: role: %w", task.ID, err)
	}
	return role, nil
}

// Sandboxes opens and releases the sandbox of one run. Open gets the
// backend name (the operator's, else the role's, else auto) and the run id
// (a docker backend labels its container with it).
type Sandboxes struct {
	Open  func(name, runID string) (sandbox.Sandbox, error)
	Close func(sandbox.Sandbox)
}

// Prepare loads the task's role and opens its sandbox into opts: what every
// dispatch path (run-task, the queue worker, review's redispatch) needs
// before runtask.Run. backend is the operator's choice ("" = the role's).
// The caller releases opts.Sandbox with sbs.Close.
func Prepare(rolesDir, backend string, sbs Sandboxes, opts *runtask.Options) error {
	role, err := LoadRole(rolesDir, *opts, opts.Task)
	if err != nil {
		return err
	}
	opts.Role = role
	sb, err := sbs.Open(cmp.Or(backend, role.SandboxBackend(), sandbox.BackendAuto), opts.RunID)
	if err != nil {
		return err
	}
	opts.Sandbox = sb
	return nil
}

func (s Sandboxes) close(sb sandbox.Sandbox) {
	if s.Close != nil && sb != nil {
		s.Close(sb)
	}
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
