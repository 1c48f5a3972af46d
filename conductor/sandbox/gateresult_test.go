package sandbox

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestGateResultJSON(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     GateResult
	}{
		{"current", `{"name":"unit","argv":["go","test"],"status":"fail","exitCode":2,"timedOut":true,"durationNs":1500000000,"outputTail":"FAIL"}`,
			GateResult{Name: "unit", Argv: []string{"go", "test"}, Status: GateFail, ExitCode: 2, TimedOut: true, Duration: 1500 * time.Millisecond, OutputTail: "FAIL"}},
		{"receipt v1 passed", `{"name":"unit","argv":["go","test"],"ok":true,"seconds":2.5}`,
			GateResult{Name: "unit", Argv: []string{"go", "test"}, Status: GatePass, Duration: 2500 * time.Millisecond}},
		{"receipt v1 failed", `{"name":"unit","argv":["false"],"ok":false,"seconds":0.25,"timedOut":true,"tail":"boom"}`,
			GateResult{Name: "unit", Argv: []string{"false"}, Status: GateFail, ExitCode: -1, TimedOut: true, Duration: 250 * time.Millisecond, OutputTail: "boom"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got GateResult
			if err := json.Unmarshal([]byte(tc.in), &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			var again GateResult
			if err := json.Unmarshal(b, &again); err != nil || !reflect.DeepEqual(again, got) {
				t.Fatalf("round trip %s: %+v %v", b, again, err)
			}
			if strings.Contains(string(b), `"ok"`) || strings.Contains(string(b), `"seconds"`) {
				t.Errorf("old fields written: %s", b)
			}
		})
	}
}

func TestGateResultOf(t *testing.T) {
	long := strings.Repeat("line of output\n", 1000) + "FAIL last\n"
	g := GateResultOf("", []string{"go", "test"}, Result{ExitCode: 1, Output: []byte(long), Duration: time.Second})
	if g.Name != "go test" || g.OK() || g.ExitCode != 1 || len(g.OutputTail) > GateTailBytes+len("…\n") ||
		!strings.HasPrefix(g.OutputTail, "…\nline of output\n") || !strings.HasSuffix(g.OutputTail, "FAIL last") {
		t.Fatalf("failed: %+v", g)
	}
	if g := GateResultOf("unit", []string{"true"}, Result{Output: []byte("ok\n")}); !g.OK() || g.OutputTail != "" || g.Name != "unit" {
		t.Fatalf("passed: %+v", g)
	}
	if g := GateResultOf("unit", []string{"sleep"}, Result{TimedOut: true, ExitCode: -1}); g.OK() || !g.TimedOut {
		t.Fatalf("timed out: %+v", g)
	}
	if got := LastLines("a\nb\nc\n\n", 2); got != "…\nb\nc" {
		t.Errorf("LastLines = %q", got)
	}
	if got := LastLines("a\nb", 5); got != "a\nb" {
		t.Errorf("LastLines = %q", got)
	}
}
