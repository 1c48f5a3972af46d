package web

import (
	"slices"
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
		ops, err := parseTokens(strings.NewReader(body), "tokens")
		if err != nil {
			// (An error names an operator: a token that is also part of
			// some operator's name in the file is shown as that name.)
			lines := strings.Split(body, "\n")
			var names []string
			for _, line := range lines {
				if name, _, ok := strings.Cut(line, ":"); ok {
					names = append(names, name)
				}
			}
			for _, line := range lines {
				_, tok, ok := strings.Cut(line, ":")
				tok = strings.TrimSpace(tok)
				inName := slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, tok) })
				// Fixed words of a message are short and spaced: a token of 16
				// or more characters without a space is never one of them.
				if ok && len(tok) >= 16 && !strings.ContainsAny(tok, " \t") && !inName && strings.Contains(err.Error(), tok) {
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

func TestHighlight(t *testing.T) {
	for _, tc := range []struct {
		file, code, want string
	}{
		{"a.go", `return "x" // done`, `[kw:return][ ][str:"x"][ ][com:// done]`},
		{"a.go", "s := `raw` + 0x1f", "[s := ][str:`raw`][ + ][num:0x1f]"},
		{"a.py", `def f(): # note`, `[kw:def][ f(): ][com:# note]`},
		{"a.js", `const x = 'it\'s'`, `[kw:const][ x = ][str:'it\'s']`},
		{"README.md", `return`, ``},
	} {
		l, ok := langOf(tc.file)
		got := ""
		if ok {
			for _, s := range highlight(l, tc.code) {
				if s.Kind != "" {
					got += "[" + s.Kind + ":" + s.Text + "]"
				} else {
					got += "[" + s.Text + "]"
				}
			}
		}
		if got != tc.want {
			t.Errorf("%s %q: %s, want %s", tc.file, tc.code, got, tc.want)
		}
	}
}

// FuzzDiff: any patch.diff is split into highlighted segments that put
// every line back together byte for byte.
func FuzzDiff(f *testing.F) {
	f.Add("diff --git a/x.go b/x.go\n--- a/x.go\n+++ b/x.go\n@@ -1 +1 @@\n-return \"<b>\"\n+return `</pre><script>`\n")
	f.Add("diff --git a/x.py b/x.py\n@@ -1 +1 @@\n+# '\n+'unterminated\n")
	f.Fuzz(func(t *testing.T, diff string) {
		lines := parseDiff([]byte(diff))
		for _, l := range lines {
			if l.Segs == nil {
				continue
			}
			var b strings.Builder
			for _, s := range l.Segs {
				b.WriteString(s.Text)
			}
			if b.String() != l.Text {
				t.Fatalf("segments %q do not make the line %q", b.String(), l.Text)
			}
		}
	})
}
