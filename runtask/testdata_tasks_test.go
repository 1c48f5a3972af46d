package runtask

import (
	"path/filepath"
	"testing"
)

// The example task files in testdata/tasks stay valid.
func TestExampleTasks(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "tasks", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example tasks: %v", err)
	}
	for _, f := range files {
		if _, err := LoadTask(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
