package runtask

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/conductor-dev/conductor/conductor/runrec"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func appendLine(t *testing.T, path string, l transcriptLine) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, _ := json.Marshal(l)
	f.Write(append(b, '\n'))
}

func TestRenderTranscriptFollow(t *testing.T) {
	dir := runrec.Dir(t.TempDir())
	if err := dir.WriteResult(runrec.Result{RunID: "r-1", Status: runrec.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	tr := dir.Path(runrec.TranscriptFile)
	appendLine(t, tr, transcriptLine{Type: lineUser, Text: "fix it"})
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- RenderTranscript(context.Background(), &out, dir, RenderOptions{Follow: true, Poll: 10 * time.Millisecond})
	}()
	waitFor := func(s string) {
		t.Helper()
		for !strings.Contains(out.String(), s) {
			select {
			case err := <-done:
				t.Fatalf("returned before %q appeared: %v\n%s", s, err, out.String())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	waitFor("user     fix it")
	// A line written while the renderer follows appears; a result folded
	// to its first lines says how many more there were.
	appendLine(t, tr, transcriptLine{Type: lineModel, Step: 1, Usage: &Usage{PromptTokens: 10, CompletionTokens: 2},
		Message: &openai.ChatCompletionMessage{Content: "looking"}})
	appendLine(t, tr, transcriptLine{Type: lineToolCall, Step: 1, Tool: "read_file", Arguments: `{"path":"a.go"}`})
	appendLine(t, tr, transcriptLine{Type: lineToolResult, Step: 1, Content: "1\n2\n3\n4\n5"})
	waitFor("← 1")
	appendLine(t, tr, transcriptLine{Type: lineStop, Step: 1, Status: runrec.StatusSucceeded})
	if err := dir.WriteResult(runrec.Result{RunID: "r-1", Status: runrec.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"step 1   model  10+2 tokens", "looking", `→ read_file {"path":"a.go"}`, "… (2 more lines)", "end      succeeded"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}
