package web

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzTranscriptEntry: any transcript line (a worker, and the model behind
// it, write them) parses without panicking and renders escaped.
func FuzzTranscriptEntry(f *testing.F) {
	for _, seed := range []string{
		`{"type":"model","step":1,"message":{"role":"assistant","content":"hi","tool_calls":[{"function":{"name":"read_file","arguments":"{}"}}]},"usage":{"totalTokens":3}}`,
		`{"type":"tool_result","tool":"run_command","content":"<script>alert(1)</script>","isError":true}`,
		`{"type":"stop","status":"succeeded"}`,
		`{"type":"note","noteId":3,"text":"look"}`,
		`not json`,
		`{"type":5}`,
	} {
		f.Add(seed)
	}
	s := &Server{}
	if err := s.parseTemplates(); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line string) {
		e := parseEntry([]byte(line))
		if len(e.Text) > maxEntryText {
			t.Fatalf("text of %d bytes shown", len(e.Text))
		}
		html, err := s.renderEntries([]entry{e})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(strings.ToLower(html), "<script") {
			t.Fatalf("unescaped markup in %q", html)
		}
	})
}

// FuzzTokenFile: a token file never panics the parser, and an error never
// shows a token.
func FuzzTokenFile(f *testing.F) {
	f.Add("alice:0123456789abcdef0123\n")
	f.Add("# c\n\nbob : 0123456789abcdef0123\ncarol:0123456789abcdef0124")
	f.Add("x:y:z")
	f.Fuzz(func(t *testing.T, body string) {
		p := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		ops, err := LoadTokenFile(p)
		if err != nil {
			for _, line := range strings.Split(body, "\n") {
				if _, tok, ok := strings.Cut(line, ":"); ok && len(strings.TrimSpace(tok)) >= 8 && strings.Contains(err.Error(), strings.TrimSpace(tok)) {
					t.Fatalf("the error %q shows a token", err)
				}
			}
			return
		}
		if CheckOperators(ops) != nil {
			t.Fatal("LoadTokenFile returned operators CheckOperators refuses")
		}
	})
}
