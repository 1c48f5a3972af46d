package runtask

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor/runrec"
)

// TestContextWindowTrimsOldToolResults: a session that reads big files
// would outgrow a small context window; old tool results are replaced by
// stubs so every request stays under the window, the newest results stay
// whole, and the trim is recorded.
func TestContextWindowTrimsOldToolResults(t *testing.T) {
	f := newFixture(t)
	const window = 6000 // tokens: about 24 KB of conversation
	m := &scriptModel{}
	for i := 0; i < 14; i++ {
		// A different file each step (the same call three times is a
		// stuck loop).
		name := string(rune('a'+i)) + ".txt"
		m.turns = append(m.turns, call(ToolWriteFile, map[string]any{"path": name, "content": strings.Repeat(string(rune('a'+i)), 3000) + "\n"}))
		m.turns = append(m.turns, call(ToolReadFile, map[string]any{"path": name}))
	}
	m.turns = append(m.turns, finalTurn("done"))
	o := f.opts(testTask("ctx"), m)
	o.ContextWindow = window
	o.Task.MaxSteps = 100
	res, err := Run(context.Background(), o)
	if err != nil || res.Status != runrec.StatusSucceeded {
		t.Fatalf("%v %+v", err, res)
	}
	reqs := m.requests()
	for i, req := range reqs {
		if est := estimateTokens(req.Messages); est > window {
			t.Errorf("request %d: ~%d tokens, over the %d-token window", i, est, window)
		}
	}
	last := reqs[len(reqs)-1].Messages
	if !strings.Contains(last[len(last)-1].Content, strings.Repeat("n", 3000)) {
		t.Errorf("the newest tool result was trimmed: %.80q", last[len(last)-1].Content)
	}
	stubs := 0
	for _, msg := range last {
		if strings.HasPrefix(msg.Content, elidedMark) {
			stubs++
		}
	}
	if stubs == 0 {
		t.Fatal("no tool result was elided")
	}
	tr, err := os.Open(filepath.Join(f.data, "runs", res.RunID, runrec.TranscriptFile))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	trims := 0
	sc := bufio.NewScanner(tr)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l transcriptLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Type == lineTrim {
			trims++
		}
	}
	if trims == 0 {
		t.Fatal("no trim line in the transcript")
	}
}
