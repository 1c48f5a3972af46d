package sandbox

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

const keyringHelperEnv = "CONDUCTOR_KEYRING_HELPER_SECRET"

// TestKeyringsDoNotReachCommands starts a conductor (this test binary)
// whose session keyring holds a secret, as under a login session or a
// systemd service, and checks no command can read it.
func TestKeyringsDoNotReachCommands(t *testing.T) {
	if os.Getenv(keyringHelperEnv) != "" {
		t.Skip("helper process")
	}
	secret := "keyring-secret-" + token(t)
	_, et := escapeTool(t)
	type ret struct {
		out []byte
		err error
	}
	done := make(chan ret, 1)
	go func() {
		// This thread joins a keyring of its own and starts the helper
		// from it; it is never unlocked, so it dies with the goroutine.
		runtime.LockOSThread()
		if err := joinSession("conductor-test-session"); err != nil {
			done <- ret{nil, err}
			return
		}
		if err := addUserKey("conductor-test-key", secret); err != nil {
			done <- ret{nil, err}
			return
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestKeyringHelper$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), keyringHelperEnv+"="+secret, escapeToolEnv+"="+et)
		out, err := cmd.CombinedOutput()
		done <- ret{out, err}
	}()
	r := <-done
	if errno, ok := r.err.(syscall.Errno); ok && errno == syscall.ENOSYS {
		t.Skip("this kernel has no keyrings")
	}
	if r.err != nil || !bytes.Contains(r.out, []byte("--- PASS: TestKeyringHelper")) {
		t.Fatalf("helper: %v\n%s", r.err, r.out)
	}
	if bytes.Contains(r.out, []byte("--- SKIP: TestKeyringHelper")) {
		t.Fatalf("the helper skipped:\n%s", r.out)
	}
}

// TestKeyringHelper runs in the helper process started above.
func TestKeyringHelper(t *testing.T) {
	secret := os.Getenv(keyringHelperEnv)
	if secret == "" {
		t.Skip("runs only as TestKeyringsDoNotReachCommands' helper")
	}
	_, et := escapeTool(t)
	// Control: a process started without the sandbox reads the key, so the
	// probe works.
	out, _ := exec.Command(et, "keys").CombinedOutput()
	if !strings.Contains(string(out), secret) {
		t.Fatalf("control: the key is not readable outside the sandbox (broken probe):\n%s", out)
	}
	backends := []Sandbox{bwrapBox(t, nil)}
	if sb, err := NewWithOptions("none", Options{Warn: io.Discard}); err == nil {
		backends = append(backends, sb)
	}
	for _, sb := range backends {
		res, err := sb.Run(context.Background(), Spec{Dir: worktree(t), Argv: []string{et, "keys"}, Timeout: 20 * time.Second})
		if err != nil {
			t.Fatalf("%s: %v", sb.Name(), err)
		}
		if strings.Contains(string(res.Output), secret) {
			t.Errorf("ESCAPE (%s): the command read the conductor's session keyring:\n%s", sb.Name(), res.Output)
		}
	}
}

func joinSession(name string) error {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	const keyctlJoinSessionKeyring = 1
	if _, _, errno := syscall.Syscall(syscall.SYS_KEYCTL, keyctlJoinSessionKeyring, uintptr(unsafe.Pointer(p)), 0); errno != 0 {
		return errno
	}
	return nil
}

func addUserKey(desc, payload string) error {
	typ, _ := syscall.BytePtrFromString("user")
	d, _ := syscall.BytePtrFromString(desc)
	pl := []byte(payload)
	const sessionKeyring = -3
	ring := int32(sessionKeyring)
	if _, _, errno := syscall.Syscall6(syscall.SYS_ADD_KEY, uintptr(unsafe.Pointer(typ)), uintptr(unsafe.Pointer(d)),
		uintptr(unsafe.Pointer(&pl[0])), uintptr(len(pl)), uintptr(ring), 0); errno != 0 {
		return errno
	}
	return nil
}
