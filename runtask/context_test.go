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

// TestTranscriptRecordsQuirks: each model line of the transcript says which
// server quirks were repaired in that turn, and a thinking block is kept as
// reasoning, not as the answer.
func TestTranscriptRecordsQuirks(t *testing.T) {
	f := newFixture(t)
	srv := startFake(t, `{"turns":[{"toolCalls":[{"name":"list_dir","arguments":{"path":"."}}],"quirks":["arguments-object","missing-ids"]}],
		"final":{"content":"<think>is it done?</think>done"}}`)
	o := f.opts(testTask("quirks"), newTestClient(t, testSpec(t, srv.URL()), nil))
	res, err := Run(context.Background(), o)
	if err != nil || res.Status != runrec.StatusSucceeded {
		t.Fatalf("%v %+v", err, res)
	}
	tr, err := os.ReadFile(filepath.Join(f.data, "runs", res.RunID, runrec.TranscriptFile))
	if err != nil {
		t.Fatal(err)
	}
	var models []transcriptLine
	for _, raw := range strings.Split(strings.TrimSpace(string(tr)), "\n") {
		var l transcriptLine
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatal(err)
		}
		if l.Type == lineModel {
			models = append(models, l)
		}
	}
	if len(models) != 2 {
		t.Fatalf("%d model lines", len(models))
	}
	if q := strings.Join(models[0].Quirks, ","); !strings.Contains(q, FixArgumentsObject) || !strings.Contains(q, FixMissingID) {
		t.Errorf("first turn quirks %q", q)
	}
	last := models[1]
	if !strings.Contains(strings.Join(last.Quirks, ","), FixThinkInContent) || last.Message.Content != "done" || last.Message.ReasoningContent != "is it done?" {
		t.Errorf("last turn: quirks %v, content %q, reasoning %q", last.Quirks, last.Message.Content, last.Message.ReasoningContent)
	}
	// The reasoning is not sent back to the server.
	for i, r := range srv.Requests() {
		if strings.Contains(r.RawText, "reasoning_content") {
			t.Errorf("request %d sends reasoning back", i)
		}
	}
}
