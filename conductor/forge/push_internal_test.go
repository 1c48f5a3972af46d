package forge

import (
	"strings"
	"testing"
)

func TestPushFailure(t *testing.T) {
	for _, c := range []struct{ msg, want string }{
		// A temporary directory whose digits spell 401 (the clean-clone CI
		// run that misread this as a refused credential).
		{"To /tmp/TestScriptForge4011838/001/forge/acme/widget.git\n!\trefs/heads/main:refs/heads/main\t[rejected] (non-fast-forward)\nDone", "rejected"},
		{"error: failed to push some refs to 'x'\nhint: Updates were rejected because the remote contains work that you do\nhint: (e.g., 'git pull ...') before pushing again.\n !\trefs/heads/main:refs/heads/main\t[rejected] (fetch first)", "rejected"},
		{"fatal: unable to access 'http://gitea.example/acme/widget.git/': The requested URL returned error: 401", "unauthorized"},
		{"fatal: could not read Username for 'http://gitea.example': terminal prompts disabled", "unauthorized"},
		{"remote: Unauthorized\nfatal: Authentication failed for 'http://gitea.example/acme/widget.git/'", "unauthorized"},
		{"To /srv/git/401/widget.git\nerror: remote unpack failed: index-pack abnormal exit", ""},
		{"fatal: '/tmp/x4013/none.git' does not appear to be a git repository", ""},
		// Real Gitea 1.27: a read-only token scope, and a user without
		// write access (declined by the server's hook, not HTTP).
		{"remote: \nfatal: unable to access 'http://127.0.0.1:3000/acme/widget.git/': The requested URL returned error: 403", "forbidden"},
		{"remote: error: User permission denied for writing.\n ! [remote rejected] work/t-1 -> work/t-1 (pre-receive hook declined)", "declined"},
		{" ! [remote rejected] work/t-1 -> work/t-1 (failed to update ref)", ""},
	} {
		if got := pushFailure(c.msg); got != c.want {
			t.Errorf("pushFailure(%q) = %q, want %q", c.msg, got, c.want)
		}
	}
}

// FuzzPushFailure: git's push output is outside input. Classifying it and
// taking the reason out of "[remote rejected] (why)" never panics, and the
// reason is one line.
func FuzzPushFailure(f *testing.F) {
	for _, s := range []string{
		"[remote rejected] (pre-receive hook declined)", "[remote rejected] (", "[remote rejected]", "(x)",
		"returned error: 403", "[rejected] (non-fast-forward)", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		switch pushFailure(msg) {
		case "", "rejected", "unauthorized", "forbidden", "declined":
		default:
			t.Fatalf("pushFailure(%q) = %q", msg, pushFailure(msg))
		}
		why := declinedReason(msg)
		if !strings.HasPrefix(why, "remote rejected") {
			t.Fatalf("declinedReason(%q) = %q", msg, why)
		}
		if strings.Contains(why, "\n") {
			t.Fatalf("declinedReason(%q) = %q spans lines", msg, why)
		}
	})
}
