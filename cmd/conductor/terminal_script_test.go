package main

import (
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/conductor-dev/conductor/conductor/termtext"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// TestScriptTerminal runs testdata/script/terminal: a hostile worker puts
// terminal escape sequences in file names, tool names, its messages and
// its gate's output; none reaches the operator's terminal raw.
func TestScriptTerminal(t *testing.T) {
	testscript.Run(t, scriptParams("terminal", map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"fakellm": fakellm.ScriptCmd,
		"noctl":   noctlCmd,
	}))
}

// noctlCmd is the script command "noctl [-crlf] stdout|stderr|FILE": it
// fails when the last command's stdout or stderr (or FILE) holds anything a
// terminal acts on: a C0 control character other than newline and tab, DEL,
// a C1 control (raw or UTF-8 encoded) or a byte that is not valid UTF-8.
// -crlf also allows the carriage return of a CRLF line end (what a pty
// makes of a newline).
func noctlCmd(ts *testscript.TestScript, neg bool, args []string) {
	crlf := len(args) == 2 && args[0] == "-crlf"
	if crlf {
		args = args[1:]
	}
	if neg || len(args) != 1 {
		ts.Fatalf("usage: noctl [-crlf] stdout|stderr|FILE")
	}
	s := ts.ReadFile(args[0])
	if crlf {
		s = strings.ReplaceAll(s, "\r\n", "\n")
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			ts.Fatalf("%s: byte %#x at %d is not valid UTF-8: %q", args[0], s[i], i, around(s, i))
		case (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r <= 0x9f):
			ts.Fatalf("%s: control character %U at %d: %q", args[0], r, i, around(s, i))
		}
		i += size
	}
}

func around(s string, i int) string {
	return s[max(0, i-40):min(len(s), i+40)]
}

// deps.Stderr is a termtext writer: run-task must still see the terminal
// under it (progress on a TTY).
func TestFileOfSeesThroughTermtext(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, ok := fileOf(termtext.Writer(f)); !ok || got != f {
		t.Fatalf("fileOf(termtext.Writer(f)) = %v, %v", got, ok)
	}
	if _, ok := fileOf(termtext.Writer(&strings.Builder{})); ok {
		t.Fatal("fileOf found a file under a strings.Builder")
	}
}
