package web

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"
)

// entry is one transcript line as the run page shows it.
type entry struct {
	Type    string // system, user, model, tool_call, tool_result, note, stop, resume, trim, or "invalid"
	Time    time.Time
	Step    int
	Title   string // tool name, finish reason, status…
	Text    string
	Calls   []string // tool calls a model turn asked for: name(arguments)
	IsError bool
	Cut     bool // the text was shortened
}

// transcriptLine mirrors the fields of runtask's transcript.jsonl lines
// that the page shows (unknown fields are ignored: the page reads what a
// newer worker writes).
type transcriptLine struct {
	Type         string    `json:"type"`
	Time         time.Time `json:"time"`
	Step         int       `json:"step"`
	Text         string    `json:"text"`
	FinishReason string    `json:"finishReason"`
	Tool         string    `json:"tool"`
	Arguments    string    `json:"arguments"`
	Content      string    `json:"content"`
	IsError      bool      `json:"isError"`
	Status       string    `json:"status"`
	NoteID       int64     `json:"noteId"`
	Message      *struct {
		Role      string `json:"role"`
		Content   string `json:"content"`
		ToolCalls []struct {
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"message"`
	Usage *struct {
		TotalTokens int64 `json:"totalTokens"`
	} `json:"usage"`
}

func parseEntry(b []byte) entry {
	var l transcriptLine
	if err := json.Unmarshal(b, &l); err != nil {
		e := entry{Type: "invalid", Title: "unreadable line"}
		e.Text, e.Cut = clip(string(b))
		return e
	}
	e := entry{Type: l.Type, Time: l.Time, Step: l.Step, IsError: l.IsError}
	text := l.Text
	switch l.Type {
	case "model":
		if l.Message != nil {
			text = l.Message.Content
			for _, c := range l.Message.ToolCalls {
				call, _ := clip(c.Function.Name + "(" + c.Function.Arguments + ")")
				e.Calls = append(e.Calls, call)
			}
		}
		e.Title = l.FinishReason
		if l.Usage != nil && l.Usage.TotalTokens > 0 {
			e.Title = strings.TrimSpace(fmt.Sprintf("%s · %d tokens", l.FinishReason, l.Usage.TotalTokens))
		}
	case "tool_call":
		e.Title = l.Tool
		text = l.Arguments
	case "tool_result":
		e.Title = l.Tool
		text = l.Content
	case "stop":
		e.Title = l.Status
	case "note":
		if l.NoteID > 0 {
			e.Title = fmt.Sprintf("note %d", l.NoteID)
		}
	}
	if text == "" && l.Message != nil && l.Type != "model" {
		text = l.Message.Content
	}
	e.Text, e.Cut = clip(text)
	return e
}

// clip shortens text for the page.
func clip(s string) (string, bool) {
	if len(s) <= maxEntryText {
		return s, false
	}
	s = s[:maxEntryText]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s, true
}

// diffLine is one line of a patch with its kind, for highlighting.
type diffLine struct {
	Kind string // file, meta, hunk, add, del, ctx
	Text string
	// Segs, when set, is the line highlighted for its file's language
	// (its first segment is the +, - or space prefix).
	Segs []seg
}

func readDiff(path string) ([]diffLine, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDiff+1))
	if err != nil {
		return nil, false
	}
	cut := len(b) > maxDiff
	if cut {
		b = b[:maxDiff]
	}
	return parseDiff(b), cut
}

// parseDiff classifies and highlights the lines of a patch.
func parseDiff(b []byte) []diffLine {
	var out []diffLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), maxDiff)
	inHeader := false
	var cur lang
	known := false
	for sc.Scan() {
		t := sc.Text()
		k := "ctx"
		switch {
		case strings.HasPrefix(t, "diff --git "):
			k, inHeader = "file", true
			cur, known = langOf(fileOfDiffHeader(t))
		case strings.HasPrefix(t, "@@"):
			k, inHeader = "hunk", false
		case inHeader:
			k = "meta"
		case strings.HasPrefix(t, "+"):
			k = "add"
		case strings.HasPrefix(t, "-"):
			k = "del"
		case strings.HasPrefix(t, `\`):
			k = "meta"
		}
		dl := diffLine{Kind: k, Text: t}
		if known && (k == "add" || k == "del" || k == "ctx") && t != "" && len(t) <= 2000 {
			dl.Segs = append([]seg{{Text: t[:1]}}, highlight(cur, t[1:])...)
		}
		out = append(out, dl)
	}
	return out
}
