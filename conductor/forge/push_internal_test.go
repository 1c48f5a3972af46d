package forge

import "testing"

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
	} {
		if got := pushFailure(c.msg); got != c.want {
			t.Errorf("pushFailure(%q) = %q, want %q", c.msg, got, c.want)
		}
	}
}
