package sandbox

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

const crashHelperEnv = "CONDUCTOR_CRASH_HELPER_TOKEN"

// TestConductorKilledTakesItsSandboxes kills a conductor (a helper process
// running a long sandboxed command that left children behind) with
// SIGKILL: nothing of the sandbox may keep running.
func TestConductorKilledTakesItsSandboxes(t *testing.T) {
	if os.Getenv(crashHelperEnv) != "" {
		t.Skip("helper process")
	}
	bwrapBox(t, nil) // skip (or fail in CI) without bwrap
	tok := token(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.v", "-test.count=1")
	_, et := escapeTool(t)
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+tok, escapeToolEnv+"="+et)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// Wait until the sandboxed command has started its children.
	deadline := time.Now().Add(30 * time.Second)
	for len(processesWith(tok)) < 3 {
		if time.Now().After(deadline) {
			rest, _ := bufio.NewReader(out).ReadString(0)
			t.Fatalf("the helper's sandbox never started its children:\n%s", rest)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline = time.Now().Add(30 * time.Second)
	for {
		pids := processesWith(tok)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ESCAPE: sandboxed processes outlived their killed conductor: %v", pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCrashHelper is the conductor killed above.
func TestCrashHelper(t *testing.T) {
	tok := os.Getenv(crashHelperEnv)
	if tok == "" {
		t.Skip("runs only as TestConductorKilledTakesItsSandboxes' helper")
	}
	sb := bwrapBox(t, nil)
	_, et := escapeTool(t)
	res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "orphans", tok}, Timeout: time.Minute})
	t.Fatalf("the helper should have been killed: %v %s", err, strings.TrimSpace(string(res.Output)))
}
