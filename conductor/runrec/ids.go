package runrec

import (
	"fmt"
	"regexp"
	"strings"
)

// The one rule for the names that become a folder, a branch component or a
// store key: run ids, task ids, workspaces and sessions. Letters, digits,
// '.', '_' and '-', starting with a letter or digit, at most 128, never
// "..". Every reader of outside input (the CLI, the queue, the store's
// folder scans, MCP, the web view) checks with these, so a name accepted in
// one place is accepted in all.

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// NameRule says in words what ValidName accepts (for error messages).
const NameRule = "use letters, digits, '.', '_' or '-', starting with a letter or digit, at most 128, no '..'"

// ValidName reports whether s can name a run, a task, a workspace or a
// session.
func ValidName(s string) bool {
	return namePattern.MatchString(s) && !strings.Contains(s, "..")
}

// ValidRunID checks a run id (it names a folder under the runs folder).
func ValidRunID(id string) error {
	if !ValidName(id) {
		return fmt.Errorf("run id %q: %s", id, NameRule)
	}
	return nil
}

// ValidTaskID checks a task id (it names the work branch work/<task-id>).
func ValidTaskID(id string) error {
	if !ValidName(id) {
		return fmt.Errorf("task id %q: %s", id, NameRule)
	}
	return nil
}
