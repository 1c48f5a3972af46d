package termtext

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Line returns s fit for one line of a terminal: every control character
// (C0 including newline, tab and carriage return, DEL, C1), every byte that
// is not valid UTF-8 and the bidirectional overrides that reorder what is
// shown are replaced by a visible escape (\x1b, \n, \u007f, \u009b,
// \u202e, \xff). Printable text, spaces included, is unchanged.
//
// The escapes are chosen so that JSON stays JSON: encoding/json never
// writes a raw C0 character or invalid UTF-8, and the runes it does leave
// raw (DEL, C1, bidirectional controls) become \uXXXX, which is the same
// string in JSON. So Writer may carry --json output too.
func Line(s string) string { return escape(s, false) }

// Text is Line for multi-line text (gate output, a model's message): it
// keeps newlines and tabs as they are, drops the carriage return of a CRLF
// line end, and escapes everything else Line escapes (a lone carriage
// return too: it would let one line overwrite another).
func Text(s string) string { return escape(s, true) }

// Writer returns a writer that passes everything written to it through
// Text before writing it to w: for reports a domain package formats into an
// io.Writer. A multi-byte character split across two writes is escaped
// byte by byte (safe, if less pretty); fmt's Fprint functions write once per
// call, so that happens only for text that was already broken.
func Writer(w io.Writer) io.Writer {
	if sw, ok := w.(*writer); ok {
		return sw
	}
	return &writer{w: w}
}

type writer struct{ w io.Writer }

// Unwrap returns the writer Writer wraps (to ask whether it is a terminal).
func (sw *writer) Unwrap() io.Writer { return sw.w }

func (sw *writer) Write(p []byte) (int, error) {
	s := string(p)
	e := escape(s, true)
	if e == s {
		return sw.w.Write(p)
	}
	if _, err := io.WriteString(sw.w, e); err != nil {
		return 0, err
	}
	return len(p), nil
}

// escape is the one escaping function. keepLines keeps \n and \t.
func escape(s string, keepLines bool) string {
	if clean(s, keepLines) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r' && keepLines && strings.HasPrefix(s[i+1:], "\n"):
			// a CRLF line end (Windows tools, some test runners): the line
			// ends, nothing to show
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r == 0x7f || unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// clean reports whether s needs no escaping (the common case: no copy).
func clean(s string, keepLines bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			// Decide the non-ASCII rest rune by rune.
			for _, r := range s[i:] {
				if r == utf8.RuneError || unsafeRune(r) || (r < 0x80 && !asciiOK(byte(r), keepLines)) {
					return false
				}
			}
			return utf8.ValidString(s[i:])
		}
		if !asciiOK(c, keepLines) {
			return false
		}
	}
	return true
}

func asciiOK(c byte, keepLines bool) bool {
	if c >= 0x20 && c != 0x7f {
		return true
	}
	return keepLines && (c == '\n' || c == '\t')
}

// unsafeRune: C1 controls (terminals read U+009B as CSI, U+009D as OSC) and
// the bidirectional embeddings, overrides and isolates, which reorder what
// a person sees (Trojan Source); U+FEFF and the line and paragraph
// separators for good measure.
func unsafeRune(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	case r == 0x2028 || r == 0x2029 || r == 0xfeff:
		return true
	}
	return false
}
