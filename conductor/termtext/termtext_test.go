package termtext

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct {
		name, in, line, text string
	}{
		{"plain", "pkg/a.go", "pkg/a.go", "pkg/a.go"},
		{"unicode", "docs/naïve — ok.md", "docs/naïve — ok.md", "docs/naïve — ok.md"},
		{"osc 52 clipboard", "x\x1b]52;c;ZXZpbA==\x07y", `x\x1b]52;c;ZXZpbA==\x07y`, `x\x1b]52;c;ZXZpbA==\x07y`},
		{"title", "\x1b]0;pwned\x1b\\", `\x1b]0;pwned\x1b\`, `\x1b]0;pwned\x1b\`},
		{"clear screen", "\x1b[2J\x1b[H", `\x1b[2J\x1b[H`, `\x1b[2J\x1b[H`},
		{"c1 csi as utf-8", "a\u009b2Jb", `a\u009b2Jb`, `a\u009b2Jb`},
		{"c1 osc as utf-8", "\u009d52;c;x\u009c", `\u009d52;c;x\u009c`, `\u009d52;c;x\u009c`},
		{"raw 8-bit csi", "a\x9b2J", `a\x9b2J`, `a\x9b2J`},
		{"invalid utf-8", "a\xffb\xc3", `a\xffb\xc3`, `a\xffb\xc3`},
		{"newline and tab", "a\nb\tc", `a\nb\tc`, "a\nb\tc"},
		{"carriage return", "ok\rFAIL", `ok\rFAIL`, `ok\rFAIL`},
		{"crlf", "a\r\nb\r", `a\r\nb\r`, "a\nb\\r"},
		{"backspace, bell, nul, del", "\b\a\x00\x7f", `\x08\x07\x00\u007f`, `\x08\x07\x00\u007f`},
		{"bidi override", "a\u202eb", `a\u202eb`, `a\u202eb`},
		{"bidi isolate", "\u2066x\u2069", `\u2066x\u2069`, `\u2066x\u2069`},
		{"empty", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Line(tc.in); got != tc.line {
				t.Errorf("Line(%q) = %q, want %q", tc.in, got, tc.line)
			}
			if got := Text(tc.in); got != tc.text {
				t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.text)
			}
			var b bytes.Buffer
			fmt.Fprint(Writer(&b), tc.in)
			if b.String() != tc.text {
				t.Errorf("Writer: %q, want %q", b.String(), tc.text)
			}
		})
	}
}

func TestWriterUnwrap(t *testing.T) {
	var b bytes.Buffer
	w := Writer(&b)
	if Writer(w) != w {
		t.Error("Writer wraps its own writer again")
	}
	if u, ok := w.(interface{ Unwrap() io.Writer }); !ok || u.Unwrap() != &b {
		t.Errorf("Unwrap: %v", ok)
	}
}

// Whatever goes in, nothing a terminal acts on comes out: no C0 but \n and
// \t (Text), no DEL, no C1, valid UTF-8.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"a", "\x1b]52;c;x\x07", "\u009b", "\xc2\x9b", "\xc2", "a\nb", "\u202e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, out := range []string{Line(s), Text(s)} {
			if !utf8.ValidString(out) {
				t.Fatalf("%q -> invalid UTF-8 %q", s, out)
			}
			for _, r := range out {
				if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r <= 0x9f) || unsafeRune(r) {
					t.Fatalf("%q -> %q keeps %U", s, out, r)
				}
			}
		}
		if strings.ContainsAny(Line(s), "\n\t") {
			t.Fatalf("Line(%q) keeps a newline or tab", s)
		}
	})
}

// JSON written through Writer is still JSON, with the same value, and
// carries nothing a terminal acts on.
func FuzzWriterKeepsJSON(f *testing.F) {
	for _, s := range []string{"a", "\x1b]52;c;x\x07", "\u009b2J", "\x7f", "\u202e", "\xff", "a\nb\tc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(map[string]any{"name": s, "list": []string{s, "x"}})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if _, err := Writer(&b).Write(want); err != nil {
			t.Fatal(err)
		}
		var got, orig any
		if err := json.Unmarshal(b.Bytes(), &got); err != nil {
			t.Fatalf("%q -> invalid JSON %s: %v", s, b.Bytes(), err)
		}
		json.Unmarshal(want, &orig)
		g, _ := json.Marshal(got)
		o, _ := json.Marshal(orig)
		if !bytes.Equal(g, o) {
			t.Fatalf("%q: value changed: %s -> %s", s, o, g)
		}
		if Text(b.String()) != b.String() {
			t.Fatalf("%q: output still needs escaping: %q", s, b.String())
		}
	})
}
