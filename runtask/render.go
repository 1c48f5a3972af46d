package runtask

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/runrec"
)

// RenderOptions shape a transcript for a person.
type RenderOptions struct {
	// Lines is how many lines of each tool result and message are shown
	// before the rest is folded (0: 3; -1: everything).
	Lines int
	// Follow keeps reading a live run's transcript until its result.json
	// says it ended (or ctx ends), polling every Poll (default 500 ms).
	Follow bool
	Poll   time.Duration
}

// RenderTranscript writes a run's transcript.jsonl for a person: the
// prompts, each model turn with its usage and text, each tool call and its
// result folded to a few lines, notes, resumes and the end. Unknown lines
// are skipped; a line cut short by a live writer waits for its end.
func RenderTranscript(ctx context.Context, w io.Writer, dir runrec.Dir, o RenderOptions) error {
	if o.Lines == 0 {
		o.Lines = 3
	}
	if o.Poll <= 0 {
		o.Poll = 500 * time.Millisecond
	}
	f, err := os.Open(dir.Path(runrec.TranscriptFile))
	if err != nil {
		return fmt.Errorf("transcript: %w", err)
	}
	defer f.Close()
	rd := bufio.NewReaderSize(f, 64<<10)
	var partial []byte
	for {
		line, err := rd.ReadBytes('\n')
		partial = append(partial, line...)
		if err == nil {
			renderLine(w, partial, o)
			partial = partial[:0]
			continue
		}
		if err != io.EOF {
			return fmt.Errorf("transcript: %w", err)
		}
		if !o.Follow || runEnded(dir) {
			if len(partial) > 0 {
				renderLine(w, partial, o)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(o.Poll):
		}
	}
}

// runEnded reports whether result.json says the run is over.
func runEnded(dir runrec.Dir) bool {
	res, err := dir.ReadResult()
	return err == nil && res.Status != runrec.StatusRunning
}

func renderLine(w io.Writer, b []byte, o RenderOptions) {
	var l transcriptLine
	if json.Unmarshal(b, &l) != nil {
		return
	}
	step := "        "
	if l.Step > 0 {
		step = fmt.Sprintf("step %-3d", l.Step)
	}
	switch l.Type {
	case lineSystem:
		fmt.Fprintf(w, "system   %s\n", fold(l.Text, o.Lines, "         "))
	case lineUser:
		fmt.Fprintf(w, "user     %s\n", fold(l.Text, o.Lines, "         "))
	case lineModel:
		usage := "usage unknown"
		if l.Usage != nil {
			usage = fmt.Sprintf("%d+%d tokens", l.Usage.PromptTokens, l.Usage.CompletionTokens)
		}
		fmt.Fprintf(w, "%s model  %s", step, usage)
		if len(l.Quirks) > 0 {
			fmt.Fprintf(w, " (repaired: %s)", strings.Join(l.Quirks, ", "))
		}
		fmt.Fprintln(w)
		if l.Message != nil {
			if t := strings.TrimSpace(l.Message.Content); t != "" {
				fmt.Fprintf(w, "         %s\n", fold(t, o.Lines, "         "))
			}
		}
	case lineToolCall:
		fmt.Fprintf(w, "         → %s %s\n", l.Tool, fold(l.Arguments, 1, ""))
	case lineToolResult:
		mark := "←"
		if l.IsError {
			mark = "✗"
		}
		fmt.Fprintf(w, "         %s %s\n", mark, fold(l.Content, o.Lines, "           "))
	case lineNote:
		fmt.Fprintf(w, "%s note   %s\n", step, fold(l.Text, o.Lines, "         "))
	case lineResume, lineTrim:
		fmt.Fprintf(w, "%s %-6s %s\n", step, l.Type, fold(l.Text, 1, ""))
	case lineStop:
		fmt.Fprintf(w, "end      %s %s\n", l.Status, fold(l.Text, 1, ""))
	}
}

// fold keeps the first n lines of s (all when n < 0), each after the first
// indented, and says how many were left out.
func fold(s string, n int, indent string) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	more := 0
	if n >= 0 && len(lines) > n {
		more = len(lines) - n
		lines = lines[:n]
	}
	for i := range lines {
		lines[i] = clip(lines[i], 200)
	}
	out := strings.Join(lines, "\n"+indent)
	switch {
	case more == 1:
		out += " … (1 more line)"
	case more > 1:
		out += fmt.Sprintf(" … (%d more lines)", more)
	}
	return out
}
