package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/review"
	"github.com/conductor-dev/conductor/conductor/sandbox"
)

func TestRenderReview(t *testing.T) {
	t.Parallel()
	rep := review.Report{RunID: "r-1", TaskID: "t-demo", WorkRef: "refs/heads/work/t-demo",
		Commit: strings.Repeat("c", 40), Parent: strings.Repeat("p", 40), Base: strings.Repeat("b", 40), PatchID: strings.Repeat("9", 40),
		Files: []review.FileStat{{Status: "M", Path: "pkg/a.go", Added: 2, Deleted: 1}, {Status: "A", Path: "img.png", Binary: true}},
		Checks: []review.Check{{Name: "paths", Status: review.StatusPass, Summary: "ok"},
			{Name: "syntax", Status: review.StatusFail, Summary: "1 file", Findings: []string{"pkg/a.go:1: bad\nsecond line"}}},
		Gate: []sandbox.GateResult{{Name: "unit", Argv: []string{"go", "test"}, Status: sandbox.GateFail, ExitCode: 1,
			Duration: 1500 * time.Millisecond, OutputTail: "l1\nl2\nFAIL\n"}},
		Findings: []string{"x", "y"},
		Verdict:  &bus.Verdict{ID: 7, Verdict: bus.VerdictRequestChanges, Reviewer: "alice"},
	}
	var out bytes.Buffer
	if err := renderReview(&out, rep, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"review of run r-1 (task t-demo, model -)\n",
		"  commit    " + rep.Commit + " (parent pppppppppppp, base bbbbbbbbbbbb)\n",
		"diffstat:\n  M pkg/a.go  +2 -1\n  A img.png   binary\n  2 file(s) changed, 2 insertion(s), 1 deletion(s)\n",
		"  PASS  paths   ok\n  FAIL  syntax  1 file\n          pkg/a.go:1: bad\n          second line\n",
		"  FAIL  gate    unit: go test (exit 1 in 1.5s)\n          output tail:\n          | l1\n          | l2\n          | FAIL\n",
		"verdict: request-changes (#7) by alice on refs/heads/work/t-demo at cccccccccccc, patch-id " + rep.PatchID + "\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	if err := renderReview(&out, rep, true); err != nil {
		t.Fatal(err)
	}
	var back review.Report
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.RunID != "r-1" || len(back.Gate) != 1 {
		t.Errorf("JSON report %v: %s", err, out.String())
	}

	out.Reset()
	rep.Verdict, rep.Clean, rep.Gate, rep.GateNotRun = nil, true, nil, ""
	if err := renderReview(&out, rep, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"  SKIP  gate    no gate command in the policy\n", "result: clean (no verdict recorded"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
