package mcp

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/runtask"
)

// maxTaskFile bounds one backlog task file.
const maxTaskFile = 1 << 20

// backlogTask is one task file of the backlog folder.
type backlogTask struct {
	File string
	Body []byte
	Task runtask.Task
}

// backlogProblem is a file of the backlog folder that is not a valid task.
type backlogProblem struct {
	File  string `json:"file"`
	Error string `json:"error"`
}

// loadBacklog reads every *.json task file of dir (a missing folder is an
// empty backlog). A file that is not a valid task, or repeats another's id,
// is reported, not fatal: the other tasks stay claimable.
func loadBacklog(dir string) ([]backlogTask, []backlogProblem, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("backlog %s: %w", dir, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("backlog %s: %w", dir, err)
	}
	defer root.Close()
	var (
		tasks    []backlogTask
		problems []backlogProblem
		seen     = map[string]string{}
	)
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") || !e.Type().IsRegular() {
			continue
		}
		body, err := readBounded(root, name, maxTaskFile)
		if err != nil {
			problems = append(problems, backlogProblem{File: name, Error: err.Error()})
			continue
		}
		t, err := runtask.ParseTask(name, body)
		if err != nil {
			problems = append(problems, backlogProblem{File: name, Error: err.Error()})
			continue
		}
		if prev, dup := seen[t.ID]; dup {
			problems = append(problems, backlogProblem{File: name, Error: fmt.Sprintf("task id %q is also the id of %s; ignored", t.ID, prev)})
			continue
		}
		seen[t.ID] = name
		tasks = append(tasks, backlogTask{File: name, Body: body, Task: t})
	}
	slices.SortFunc(tasks, func(a, b backlogTask) int { return strings.Compare(a.Task.ID, b.Task.ID) })
	return tasks, problems, nil
}

// readBounded reads a file of root, refusing more than max bytes.
func readBounded(root *os.Root, name string, max int64) ([]byte, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d allowed", name, fi.Size(), max)
	}
	b := make([]byte, fi.Size())
	n, err := io.ReadFull(f, b)
	return b[:n], err
}

// findTask returns the backlog task with id.
func findTask(dir, id string) (backlogTask, error) {
	tasks, _, err := loadBacklog(dir)
	if err != nil {
		return backlogTask{}, err
	}
	for _, t := range tasks {
		if t.Task.ID == id {
			return t, nil
		}
	}
	return backlogTask{}, refusal.Newf(CodeTaskNotFound,
		"list_tasks shows the backlog; a task is a task file in "+filepath.Clean(dir),
		"no task %q in the backlog", id)
}
