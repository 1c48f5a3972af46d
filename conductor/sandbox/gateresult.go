package sandbox

import (
	"cmp"
	"encoding/json"
	"strings"
	"time"
)

// The status of a gate command.
const (
	GatePass = "pass"
	GateFail = "fail"
)

// GateOutputLimit is how much output RunGate keeps of a gate command (head
// and tail); GateTailBytes is how much of that a GateResult keeps.
const (
	GateOutputLimit = 1 << 20
	GateTailBytes   = 4096
)

// GateResult is one gate command's outcome: what review reports for each
// gate command and what a landing records in its receipt. One JSON shape
// for both.
type GateResult struct {
	Name     string        `json:"name"`
	Argv     []string      `json:"argv"`
	Status   string        `json:"status"`   // GatePass or GateFail
	ExitCode int           `json:"exitCode"` // -1 when killed, never started or not recorded
	TimedOut bool          `json:"timedOut,omitempty"`
	Duration time.Duration `json:"durationNs"`
	// OutputTail is the end of the command's output (Tail) when it failed,
	// or why it could not run.
	OutputTail string `json:"outputTail,omitempty"`
}

// OK reports whether the command passed.
func (g GateResult) OK() bool { return g.Status == GatePass }

// GateResultOf is the result of gate command name (argv joined when name
// is empty) from what RunGate returned: it passed when it exited 0 within
// its timeout; a failure keeps the tail of its output.
func GateResultOf(name string, argv []string, r Result) GateResult {
	g := GateResult{Name: cmp.Or(name, strings.Join(argv, " ")), Argv: argv, Status: GateFail,
		ExitCode: r.ExitCode, TimedOut: r.TimedOut, Duration: r.Duration}
	if r.ExitCode == 0 && !r.TimedOut {
		g.Status = GatePass
	} else {
		g.OutputTail = Tail(string(r.Output), GateTailBytes)
	}
	return g
}

// Tail returns about the last n bytes of a command's output, cut at a line
// start, "…" on a line of its own first when something was cut.
func Tail(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "…\n" + s
}

// LastLines returns the last n lines of s (trailing newlines dropped), "…"
// first when lines were cut.
func LastLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append([]string{"…"}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// UnmarshalJSON also reads the shape land's receipts had before version 2
// (ok, seconds, tail), so a landing's note written then still decodes.
func (g *GateResult) UnmarshalJSON(b []byte) error {
	type plain GateResult
	var v struct {
		plain
		OK      *bool   `json:"ok"`
		Seconds float64 `json:"seconds"`
		Tail    string  `json:"tail"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*g = GateResult(v.plain)
	if v.OK != nil && g.Status == "" { // receipt version 1
		g.Status, g.OutputTail = GateFail, v.Tail
		if *v.OK {
			g.Status = GatePass
		} else if g.ExitCode == 0 {
			g.ExitCode = -1 // not recorded
		}
		g.Duration = time.Duration(v.Seconds * float64(time.Second))
	}
	return nil
}
