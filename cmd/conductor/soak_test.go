package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/runtask/fakellm"
)

// soakSteps is the scripted session of the soak: ten tool steps that read,
// create and edit files, then a final answer. Every turn edits or reads
// something the later turns depend on, so a resume that loses or repeats a
// step changes the final diff.
var soakSteps = []string{
	`{"name": "list_dir", "arguments": {"path": "."}}`,
	`{"name": "read_file", "arguments": {"path": "README.md"}}`,
	`{"name": "write_file", "arguments": {"path": "pkg/a.go", "content": "package pkg\n\nfunc A() int { return 1 }\n"}}`,
	`{"name": "edit_file", "arguments": {"path": "README.md", "old_string": "# repo\n", "new_string": "# repo\n\nSoaked.\n"}}`,
	`{"name": "write_file", "arguments": {"path": "pkg/b.go", "content": "package pkg\n\nfunc B() int { return A() + 1 }\n"}}`,
	`{"name": "read_file", "arguments": {"path": "pkg/a.go"}}`,
	`{"name": "edit_file", "arguments": {"path": "pkg/a.go", "old_string": "return 1", "new_string": "return 41"}}`,
	`{"name": "edit_file", "arguments": {"path": "README.md", "old_string": "Soaked.", "new_string": "Soaked twice."}}`,
	`{"name": "edit_file", "arguments": {"path": "lib/calc.go", "old_string": "a + b", "new_string": "b + a"}}`,
	`{"name": "write_file", "arguments": {"path": "docs/soak.md", "content": "ten steps\n"}}`,
}

// soakScript is the fakellm script in history mode (the reply is chosen by
// the number of assistant turns already in the conversation, so a resumed
// session gets its right next turn). slow is the reply index that waits
// long enough for the test to act while it is in flight (-1: none).
func soakScript(t *testing.T, slow int) fakellm.Script {
	t.Helper()
	lat := func(i int) int {
		if i == slow {
			return 3000
		}
		return 10
	}
	var turns []string
	for i, call := range soakSteps {
		turns = append(turns, fmt.Sprintf(`{"latencyMs": %d, "toolCalls": [%s]}`, lat(i), call))
	}
	s, err := fakellm.Parse([]byte(fmt.Sprintf(`{"mode": "history", "turns": [%s], "final": {"latencyMs": %d, "content": "done"}}`,
		strings.Join(turns, ",\n"), lat(len(soakSteps)))))
	if err != nil {
		t.Fatal(err)
	}
	return *s
}

// holdsNote reports whether any request carries text in a user message.
func holdsNote(reqs []*fakellm.ChatRequest, text string) bool {
	for _, r := range reqs {
		for _, m := range r.Messages {
			if m.Role == "user" && strings.Contains(string(m.Content), text) {
				return true
			}
		}
	}
	return false
}

// soakAsked reports whether srv received a request holding n assistant turns.
func soakAsked(srv *fakellm.Server, n int) bool {
	for _, r := range srv.ChatRequests() {
		a := 0
		for _, m := range r.Messages {
			if m.Role == "assistant" {
				a++
			}
		}
		if a == n {
			return true
		}
	}
	return false
}

// soakCmd is one conductor subprocess.
func soakCmd(env []string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	cmd := exec.Command("conductor", args...)
	var out bytes.Buffer
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &out
	return cmd, &out
}

type soakTranscriptLine struct {
	Type    string `json:"type"`
	Step    int    `json:"step"`
	NoteID  int64  `json:"noteId"`
	Text    string `json:"text"`
	Tool    string `json:"tool"`
	Content string `json:"content"`
}

func soakTranscript(t *testing.T, dataRoot, runID string) []soakTranscriptLine {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dataRoot, "runs", runID, runrec.TranscriptFile))
	if err != nil {
		return nil
	}
	var lines []soakTranscriptLine
	for _, l := range bytes.Split(raw, []byte("\n")) {
		var x soakTranscriptLine
		if json.Unmarshal(l, &x) == nil && x.Type != "" {
			lines = append(lines, x)
		}
	}
	return lines
}

// soakSummary is one line per transcript entry: type, step, tool or text.
func soakSummary(lines []soakTranscriptLine) string {
	var b strings.Builder
	for _, l := range lines {
		text := l.Text
		if len(text) > 100 {
			text = text[:100] + "…"
		}
		fmt.Fprintf(&b, "%-12s step %2d %s %s\n", l.Type, l.Step, l.Tool, strings.ReplaceAll(text+l.Content, "\n", `\n`))
	}
	return b.String()
}

func countType(lines []soakTranscriptLine, typ string) int {
	n := 0
	for _, l := range lines {
		if l.Type == typ {
			n++
		}
	}
	return n
}

// soakOutcome is what a finished run must agree on with the uninterrupted one.
type soakOutcome struct {
	status, patchID, files string
	diff                   []byte
}

func soakResult(t *testing.T, dataRoot, runID string) soakOutcome {
	t.Helper()
	dir := filepath.Join(dataRoot, "runs", runID)
	raw, err := os.ReadFile(filepath.Join(dir, runrec.ResultFile))
	if err != nil {
		t.Fatalf("run %s: %v", runID, err)
	}
	var res runrec.Result
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("run %s: result.json: %v", runID, err)
	}
	diff, err := os.ReadFile(filepath.Join(dir, runrec.PatchFile))
	if err != nil {
		t.Fatalf("run %s: %v", runID, err)
	}
	return soakOutcome{status: res.Status, patchID: res.PatchID, files: strings.Join(res.FilesChanged, ","), diff: diff}
}

// TestSoakKillAndResume: a scripted ten-step session is SIGKILLed at a
// random step (every third trial: its resume is killed too, at a later
// step), resumed with `conductor run-task resume`, and must end with
// exactly the diff and patch-id of an uninterrupted run. In half of the
// trials an operator note is sent while the killed turn is in flight: it
// must be delivered after the resume, exactly once. CONDUCTOR_SOAK sets the
// number of trials (default 3; `make soak` runs 100); seeds are the trial
// numbers, so a failing trial is replayed with the same kill point.
func TestSoakKillAndResume(t *testing.T) {
	trials := 3
	if v := os.Getenv("CONDUCTOR_SOAK"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("CONDUCTOR_SOAK=%q: want a positive number of trials", v)
		}
		trials = n
	}
	if testing.Short() && os.Getenv("CONDUCTOR_SOAK") == "" {
		t.Skip("kill-and-resume soak (subprocesses)")
	}
	home := t.TempDir()
	dataRoot := filepath.Join(home, "data")
	baseEnv := workerEnv(t, home, "CONDUCTOR_MODEL_OLLAMA_QWEN_MODEL=fake", "WORKER_POOL_SIZE=2")
	repo := filepath.Join(home, "repo")
	for _, f := range []struct{ path, body string }{
		{"README.md", "# repo\n"},
		{"lib/calc.go", "package lib\n\nfunc Add(a, b int) int { return a + b }\n"},
	} {
		p := filepath.Join(repo, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitT(t, home, baseEnv, "init", "-q", "-b", "main", repo)
	gitT(t, repo, baseEnv, "add", "-A")
	gitT(t, repo, baseEnv, "commit", "-qm", "init")

	writeTask := func(name string) string {
		p := filepath.Join(home, "tasks", name+".json")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf(`{"taskVersion":1,"id":"t-soak","prompt":"make the ten edits","workspace":"repo",
 "capabilities":{"tools":["read","write","edit"]},"session":%q,"timeoutSeconds":300,"role":"implementer"}`, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	common := []string{"--model", "ollama-qwen", "--repo", repo, "--sandbox", "none"}
	withLLM := func(s *fakellm.Server, extra ...string) []string {
		return append(append(append([]string(nil), baseEnv...), "CONDUCTOR_MODEL_OLLAMA_QWEN_URL="+s.URL()), extra...)
	}

	// The uninterrupted run every trial must match.
	fast := fakellm.Start(soakScript(t, -1))
	defer fast.Close()
	cmd, out := soakCmd(withLLM(fast), append([]string{"run-task", "run", writeTask("baseline"), "--run-id", "r-soak-baseline"}, common...)...)
	if err := cmd.Run(); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, out)
	}
	want := soakResult(t, dataRoot, "r-soak-baseline")
	if want.status != runrec.StatusSucceeded || want.patchID == "" || len(want.diff) == 0 {
		t.Fatalf("uninterrupted run: %+v", want)
	}
	for _, f := range []string{"README.md", "pkg/a.go", "pkg/b.go", "lib/calc.go", "docs/soak.md"} {
		if !strings.Contains(want.files, f) {
			tr, _ := os.ReadFile(filepath.Join(dataRoot, "runs", "r-soak-baseline", runrec.TranscriptFile))
			t.Fatalf("uninterrupted run changed %s, want %s among them\n%s", want.files, f, tr)
		}
	}

	var afterResume, beforeKill, finishedEarly, doubleCrash, passed int
	first := 0
	if v := os.Getenv("CONDUCTOR_SOAK_TRIAL"); v != "" { // replay one trial
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("CONDUCTOR_SOAK_TRIAL=%q: want a trial number", v)
		}
		first, trials = n, n+1
	}
	for trial := first; trial < trials; trial++ {
		name := fmt.Sprintf("soak-%03d", trial)
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(int64(trial)))
			k := 1 + rng.Intn(len(soakSteps)) // kill once the transcript shows step k (1..10)
			withNote := trial%2 == 0
			every := 1 + rng.Intn(3) // checkpoint cadence: 1, 2 or 3 steps
			delay := time.Duration(rng.Intn(25)) * time.Millisecond
			// Every third trial also kills the first resume, while its model
			// call after a later step is in flight.
			second := 0
			if trial%3 == 1 && k < len(soakSteps) {
				second = k + 1 + rng.Intn(len(soakSteps)-k)
			}
			runID := "r-" + name
			desc := fmt.Sprintf("trial %d (seed %d): kill at step %d (then the resume at step %d), checkpoint every %d, note %v", trial, trial, k, second, every, withNote)

			// With a note, the turn after step k waits 3 s so the note and the
			// kill both land while it is in flight; without, the kill lands
			// 0–25 ms after step k shows, wherever the run is then.
			slow := -1
			if withNote {
				slow = k
			}
			srv := fakellm.Start(soakScript(t, slow))
			defer func() { srv.Close() }() // the last one started
			env := withLLM(srv, fmt.Sprintf("WORKER_CHECKPOINT_EVERY_N_STEPS=%d", every))
			cmd, out := soakCmd(env, append([]string{"run-task", "run", writeTask(name), "--run-id", runID}, common...)...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			deadline := time.Now().Add(60 * time.Second)
			var early bool
			for countType(soakTranscript(t, dataRoot, runID), "tool_result") < k {
				select {
				case <-exited:
					early = true
				default:
				}
				if early {
					break
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					t.Fatalf("%s: step %d never showed:\n%s", desc, k, out)
				}
				time.Sleep(2 * time.Millisecond)
			}
			if early {
				t.Fatalf("%s: the run exited before step %d:\n%s", desc, k, out)
			}
			noteText := fmt.Sprintf("soak note %d: keep going", trial)
			if withNote {
				nc, nout := soakCmd(env, "note", runID, noteText)
				if err := nc.Run(); err != nil {
					cmd.Process.Kill()
					t.Fatalf("%s: note: %v\n%s", desc, err, nout)
				}
			} else {
				time.Sleep(delay)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			noteBeforeKill := holdsNote(srv.ChatRequests(), noteText)
			if err := <-exited; err == nil {
				// It finished in the delay: nothing to resume, the result must
				// still be the uninterrupted one.
				finishedEarly++
			} else {
				if second > 0 {
					// Crash the resume too, while its turn after step
					// `second` is in flight.
					srv.Close()
					srv = fakellm.Start(soakScript(t, second))
					env = withLLM(srv, fmt.Sprintf("WORKER_CHECKPOINT_EVERY_N_STEPS=%d", every))
					rc, rout := soakCmd(env, append([]string{"run-task", "resume", runID}, common...)...)
					if err := rc.Start(); err != nil {
						t.Fatal(err)
					}
					deadline := time.Now().Add(60 * time.Second)
					// Kill while the slow turn is in flight: the request that
					// already holds `second` assistant turns has arrived.
					for !soakAsked(srv, second) {
						if time.Now().After(deadline) {
							rc.Process.Kill()
							rc.Wait()
							t.Fatalf("%s: the first resume never showed step %d:\n%s", desc, second, rout)
						}
						time.Sleep(2 * time.Millisecond)
					}
					rc.Process.Signal(syscall.SIGKILL)
					if err := rc.Wait(); err == nil {
						t.Fatalf("%s: the first resume finished before its kill:\n%s", desc, rout)
					}
					doubleCrash++
				}
				srv.Close()
				srv = fakellm.Start(soakScript(t, -1))
				env = withLLM(srv, fmt.Sprintf("WORKER_CHECKPOINT_EVERY_N_STEPS=%d", every))
				rc, rout := soakCmd(env, append([]string{"run-task", "resume", runID}, common...)...)
				if err := rc.Run(); err != nil {
					t.Fatalf("%s: resume: %v\n%s\nkilled run:\n%s", desc, err, rout, out)
				}
			}
			got := soakResult(t, dataRoot, runID)
			if got.status != runrec.StatusSucceeded {
				t.Fatalf("%s: status %s", desc, got.status)
			}
			if got.patchID != want.patchID || !bytes.Equal(got.diff, want.diff) {
				t.Fatalf("%s: final diff differs from the uninterrupted run\npatch-id %s, want %s\n--- got\n%s\n--- want\n%s\n--- transcript\n%s",
					desc, got.patchID, want.patchID, got.diff, want.diff, soakSummary(soakTranscript(t, dataRoot, runID)))
			}
			if got.files != want.files {
				t.Fatalf("%s: files changed %s, want %s", desc, got.files, want.files)
			}
			if withNote {
				// Exactly once: one delivery line in the transcript and one
				// copy in the conversation the model last saw.
				lines := soakTranscript(t, dataRoot, runID)
				if n := countType(lines, "note"); n != 1 {
					t.Fatalf("%s: the note was delivered %d times (transcript)", desc, n)
				}
				reqs := srv.ChatRequests()
				if len(reqs) == 0 {
					t.Fatalf("%s: the resumed run asked the model nothing", desc)
				}
				last := reqs[len(reqs)-1]
				copies := 0
				for _, m := range last.Messages {
					if m.Role == "user" && strings.Contains(string(m.Content), noteText) {
						copies++
					}
				}
				if copies != 1 {
					t.Fatalf("%s: the model's last request holds the note %d times", desc, copies)
				}
				// Delivered after the resume when the killed run never sent
				// it: then the first turn after the resume carries it.
				if noteBeforeKill {
					beforeKill++
				} else {
					if !holdsNote(reqs[:1], noteText) {
						t.Fatalf("%s: the note was not in the first request after the resume", desc)
					}
					afterResume++
				}
			}
			passed++
		})
	}
	t.Logf("%d kill-and-resume trials (%d also killed during the resume): %d ended with the uninterrupted diff (patch-id %s) and their note delivered once (%d after the resume, %d before the kill); %d runs finished before their kill",
		trials-first, doubleCrash, passed, want.patchID, afterResume, beforeKill, finishedEarly)
	if trials-first >= 2 && afterResume == 0 {
		t.Errorf("no trial delivered its note after the resume: the crash path of notes went untested")
	}
}
