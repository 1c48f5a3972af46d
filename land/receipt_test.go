package land

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/sandbox"
)

// TestReceiptVersion1StillDecodes: a note written before the gate result
// became sandbox.GateResult (version 1: ok, seconds, tail) reads into the
// same fields as a version 2 note.
func TestReceiptVersion1StillDecodes(t *testing.T) {
	v1 := `{"version":1,"decision":"d-1","target":"main","workRef":"work/x","reviewedCommit":"abc","patchId":"p",
		"tokens":{"prompt":null,"completion":null,"total":null},"verdict":{"id":1,"verdict":"approve","commit":"abc","patchId":"p"},
		"gate":[{"name":"unit","argv":["go","test"],"ok":true,"seconds":1.5},{"name":"vet","argv":["go","vet"],"ok":false,"seconds":0.5,"tail":"boom"}]}`
	var rc Receipt
	if err := json.Unmarshal([]byte(v1), &rc); err != nil {
		t.Fatal(err)
	}
	want := []sandbox.GateResult{
		{Name: "unit", Argv: []string{"go", "test"}, Status: sandbox.GatePass, Duration: 1500 * time.Millisecond},
		{Name: "vet", Argv: []string{"go", "vet"}, Status: sandbox.GateFail, ExitCode: -1, Duration: 500 * time.Millisecond, OutputTail: "boom"},
	}
	if rc.Version != 1 || rc.Decision != "d-1" || len(rc.Gate) != 2 {
		t.Fatalf("receipt: %+v", rc)
	}
	for i, g := range rc.Gate {
		if g.Name != want[i].Name || g.Status != want[i].Status || g.ExitCode != want[i].ExitCode ||
			g.Duration != want[i].Duration || g.OutputTail != want[i].OutputTail || g.OK() != (i == 0) {
			t.Errorf("gate %d = %+v, want %+v", i, g, want[i])
		}
	}
	if gateSummary(rc.Gate) != "passed: unit ok 1.5s; vet failed 0.5s" {
		t.Errorf("summary %q", gateSummary(rc.Gate))
	}
}
