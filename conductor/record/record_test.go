package record

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/refusal"
)

var entry = Entry{Decision: "d-abcdefgh", Commit: strings.Repeat("a", 40), Target: "main", PatchID: strings.Repeat("9", 40),
	RunID: "r-1", Model: "fake", Issue: 4, LandedAt: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}

func TestAppendLine(t *testing.T) {
	t.Parallel()
	log, already := appendLine(nil, entry)
	if already || !strings.HasPrefix(string(log), buildLogHead) {
		t.Fatalf("new log %q (already %v)", log, already)
	}
	want := "- 2026-12-01T10:00:00Z landed d-abcdefgh as " + entry.Commit + " on main (run r-1, patch-id " + entry.PatchID + ", model fake, issue #4)\n"
	if !strings.HasSuffix(string(log), want) {
		t.Errorf("line:\n%s\nwant suffix:\n%s", log, want)
	}
	again, already := appendLine(log, entry)
	if !already || string(again) != string(log) {
		t.Errorf("second append changed the log (already %v)", already)
	}
	// A log without a final newline gets one before the line.
	other := entry
	other.Commit = strings.Repeat("b", 40)
	out, _ := appendLine([]byte("# mine\n- x"), other)
	if !strings.HasPrefix(string(out), "# mine\n- x\n- ") || countLines(out) != 1 {
		t.Errorf("appended to a hand-kept log: %q (count %d)", out, countLines(out))
	}
}

func TestUpdateStatus(t *testing.T) {
	t.Parallel()
	first, err := updateStatus(nil, entry, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(first), "# Current\n\n"+StatusStart+"\n") || !strings.HasSuffix(string(first), StatusEnd+"\n") {
		t.Errorf("new status file:\n%s", first)
	}
	// The people's text around the section is kept; the section replaced.
	cur := "# Current\n\nintro\n\n" + StatusStart + "\nold\n" + StatusEnd + "\n\nfooter\n"
	out, err := updateStatus([]byte(cur), entry, 7)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if !strings.Contains(s, "intro\n\n"+StatusStart) || !strings.Contains(s, StatusEnd+"\n\nfooter\n") || strings.Contains(s, "old") ||
		!strings.Contains(s, "Landings recorded: 7.") || !strings.Contains(s, "Issue #4: closed by this landing.") {
		t.Errorf("updated:\n%s", s)
	}
	for name, bad := range map[string]string{
		"start only":   "x\n" + StatusStart + "\n",
		"end only":     StatusEnd + "\n",
		"reversed":     StatusEnd + "\n" + StatusStart + "\n",
		"two sections": StatusStart + StatusEnd + StatusStart + StatusEnd,
	} {
		_, err := updateStatus([]byte(bad), entry, 1)
		if r, ok := errors.AsType[*refusal.Refusal](err); !ok || r.Code != refusal.RecordStatusMalformed {
			t.Errorf("%s: %v, want refusal %s", name, err, refusal.RecordStatusMalformed)
		}
	}
}

// Worker-influenced text never reaches the files unchecked: a model name
// that could close the status section or start a line is dropped.
func TestHostileNamesAreDropped(t *testing.T) {
	t.Parallel()
	for _, m := range []string{"x\n- forged line", "<!-- conductor:status:end -->", "a b", ""} {
		if modelName.MatchString(m) {
			t.Errorf("model name %q accepted", m)
		}
	}
	if !modelName.MatchString("qwen2.5-coder:7b") || !modelName.MatchString("org/model@rev") {
		t.Error("ordinary model names refused")
	}
	for _, r := range []string{"main", "release/1.2"} {
		if !safeRef(r) {
			t.Errorf("target %q refused", r)
		}
	}
	for _, r := range []string{"a..b", "x\ny", "-x", "a b"} {
		if safeRef(r) {
			t.Errorf("target %q accepted", r)
		}
	}
}

func TestTrailer(t *testing.T) {
	t.Parallel()
	msg := "Add Sub\n\nDecision-Id: d-old\nbody\n\nDecision-Id: d-abcdefgh\nModel: fake\n"
	if got := trailer(msg, "Decision-Id"); got != "d-abcdefgh" {
		t.Errorf("Decision-Id %q", got)
	}
	if got := trailer(msg, "Run-Id"); got != "" {
		t.Errorf("Run-Id %q", got)
	}
}

func TestRepoKey(t *testing.T) {
	t.Parallel()
	a, b := repoKey("/srv/a/repo/.git"), repoKey("/srv/b/repo/.git")
	if a == b || !strings.HasPrefix(a, "repo-") || strings.ContainsAny(repoKey("/x/../y/we ird\n/.git"), " \n/") {
		t.Errorf("keys %q %q", a, b)
	}
}
