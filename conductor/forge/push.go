package forge

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
)

// Pusher pushes branches from a local repository to one remote with the git
// CLI. The token, when the remote is the forge's own HTTP(S) URL, reaches
// only the one git process, through GIT_CONFIG_COUNT/KEY/VALUE environment
// entries scoped to that URL: never argv, never a config file. Remotes on
// other hosts (or the file protocol) get no credential at all.
type Pusher struct {
	Git      patch.Git
	Remote   string // remote name in the local repository (default origin)
	ForgeURL string // the forge's base URL; the credential is scoped to it
	Token    string
	// Timeout bounds the whole push (0: DefaultTimeout). A server that
	// stops answering ends the push with a clear error, never a hang.
	Timeout time.Duration
}

// basicCredential is the HTTP Basic credential Gitea accepts for git over
// HTTP with an access token as the password.
func basicCredential(token string) string {
	return base64.StdEncoding.EncodeToString([]byte("conductor:" + token))
}

// RemoteURL returns the push URL of the remote.
func (p Pusher) RemoteURL(ctx context.Context) (string, error) {
	remote := p.remote()
	if !validRemoteName(remote) {
		return "", fmt.Errorf("remote %q: not a remote name", remote)
	}
	u, err := p.Git.Line(ctx, "remote", "get-url", "--push", remote)
	if err != nil {
		return "", fmt.Errorf("remote %q: not configured in %s", remote, p.Git.GitDir)
	}
	return u, nil
}

func (p Pusher) remote() string {
	if p.Remote == "" {
		return "origin"
	}
	return p.Remote
}

// credentialEnv returns the environment entries that give git the token for
// pushURL, or nil when pushURL is not on the forge.
func (p Pusher) credentialEnv(pushURL string) []string {
	if p.Token == "" || p.ForgeURL == "" {
		return nil
	}
	pu, err := url.Parse(pushURL)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") {
		return nil
	}
	fu, err := url.Parse(p.ForgeURL)
	if err != nil || !strings.EqualFold(fu.Scheme, pu.Scheme) || !strings.EqualFold(fu.Host, pu.Host) {
		return nil
	}
	scope := pu.Scheme + "://" + pu.Host + "/"
	return []string{
		"GIT_CONFIG_COUNT=2",
		"GIT_CONFIG_KEY_0=http." + scope + ".extraHeader",
		"GIT_CONFIG_VALUE_0=Authorization: Basic " + basicCredential(p.Token),
		"GIT_CONFIG_KEY_1=http.followRedirects",
		"GIT_CONFIG_VALUE_1=false",
	}
}

// Push pushes refs/heads/branch to the same name on the remote.
func (p Pusher) Push(ctx context.Context, branch string, opts PushOptions) (PushResult, error) {
	res := PushResult{Branch: branch, Remote: p.remote()}
	if err := checkBranchName(ctx, p.Git, branch); err != nil {
		return res, err
	}
	commit, err := p.Git.Line(ctx, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch+"^{commit}")
	if err != nil || commit == "" {
		return res, fmt.Errorf("push %s: branch %q does not exist in %s", branch, branch, p.Git.GitDir)
	}
	res.Commit = commit
	pushURL, err := p.RemoteURL(ctx)
	if err != nil {
		return res, fmt.Errorf("push %s: %w", branch, err)
	}
	spec := "refs/heads/" + branch + ":refs/heads/" + branch
	if opts.Force {
		spec = "+" + spec
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	g := p.Git.WithEnv(p.credentialEnv(pushURL)...)
	// git's HTTP transport also gives up on a stalled connection by itself
	// (under 1 byte/s for the whole timeout), so no helper outlives the push.
	g.Config = append(append([]string(nil), g.Config...), "http.lowSpeedLimit=1", fmt.Sprintf("http.lowSpeedTime=%d", max(1, int(timeout.Seconds()))))
	red := newRedactor(p.Token)
	// --receive-pack pins the program a local (file) push runs: the
	// repository's remote.<name>.receivepack is never obeyed.
	out, err := runBounded(ctx, g, timeout, "push", "--porcelain", "--no-verify", "--no-signed", "--no-follow-tags", "--recurse-submodules=no", "--receive-pack=git-receive-pack", p.remote(), spec)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return res, fmt.Errorf("push %s to %s: %w: no answer within %s: check the server, or raise the forge timeout (--forge-timeout, forge.timeout)", branch, redactURL(pushURL), ErrUnreachable, timeout)
		}
		if ctx.Err() != nil {
			return res, fmt.Errorf("push %s to %s: %w", branch, redactURL(pushURL), ctx.Err())
		}
		var ge *git.GitError
		msg := err.Error()
		if errors.As(err, &ge) {
			msg = strings.TrimSpace(string(ge.Stderr) + "\n" + string(ge.Stdout))
		}
		msg = red.String(msg)
		switch pushFailure(msg) {
		case "forbidden":
			repo := redactURL(pushURL)
			if o, r, err := ParseRemoteURL(pushURL); err == nil {
				repo = o + "/" + r
			}
			return res, fmt.Errorf("push %s: %w", branch, forbidden(repo, redactURL(p.ForgeURL)))
		case "rejected":
			return res, fmt.Errorf("push %s to %s: rejected: the remote branch has commits this one does not (not a fast-forward); fetch and integrate, or --force to replace it", branch, redactURL(pushURL))
		case "declined":
			repo := redactURL(pushURL)
			if o, r, err := ParseRemoteURL(pushURL); err == nil {
				repo = o + "/" + r
			}
			return res, fmt.Errorf("push %s to %s: the forge declined it (%s): may the token's user push to %s, and is the branch unprotected?", branch, redactURL(pushURL), declinedReason(msg), repo)
		case "unauthorized":
			why := "the forge rejected the token"
			if p.credentialEnv(pushURL) == nil {
				why = "the remote wants a credential and none is given for it (only the forge's own URL gets the token)"
			}
			return res, fmt.Errorf("push %s to %s: %w: %s: %s", branch, redactURL(pushURL), ErrUnauthorized, why, lastLine(msg))
		}
		return res, fmt.Errorf("push %s to %s: %s", branch, redactURL(pushURL), dropHints(msg))
	}
	// Porcelain: a line "=\t<from>:<to>\t[up to date]" when nothing moved.
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "=\t") {
			res.UpToDate = true
		}
	}
	return res, nil
}

// pushFailure names what git's push output says went wrong: "rejected" (not
// a fast-forward), "unauthorized", or "" for anything else. A rejection is
// looked for first and an HTTP status only in git's own phrasing, because
// the output also names paths and URLs whose digits may spell "401".
func pushFailure(msg string) string {
	switch {
	case strings.Contains(msg, "[rejected]") || strings.Contains(msg, "non-fast-forward") || strings.Contains(msg, "fetch first"):
		return "rejected"
	case strings.Contains(msg, "returned error: 401") || strings.Contains(msg, "Authentication failed") || strings.Contains(msg, "could not read Username"):
		return "unauthorized"
	case strings.Contains(msg, "returned error: 403"):
		return "forbidden"
	case strings.Contains(msg, "[remote rejected]") && strings.Contains(msg, "pre-receive hook declined"):
		return "declined"
	}
	return ""
}

// declinedReason is the parenthesis of git's "[remote rejected] (why)".
func declinedReason(msg string) string {
	_, after, ok := strings.Cut(msg, "[remote rejected]")
	if !ok {
		return "remote rejected"
	}
	after, _, _ = strings.Cut(strings.TrimSpace(after), "\n")
	if strings.HasPrefix(after, "(") {
		if i := strings.IndexByte(after, ')'); i > 0 {
			return "remote rejected: " + after[1:i]
		}
	}
	return "remote rejected"
}

// runBounded runs git with a deadline. Unlike patch.Git.Run it does not
// wait for a helper that kept git's pipes open (git-remote-http on a frozen
// server) once git itself is gone: the process group is killed and the wait
// is bounded.
func runBounded(ctx context.Context, g patch.Git, timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := g.Command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return out.Bytes(), &git.GitError{Args: args, Stdout: out.Bytes(), Stderr: errb.Bytes(), Err: err}
	}
	return out.Bytes(), nil
}

// checkBranchName rejects names git would not accept as a branch.
func checkBranchName(ctx context.Context, g patch.Git, branch string) error {
	if branch == "" || strings.HasPrefix(branch, "-") || strings.HasPrefix(branch, "refs/") {
		return fmt.Errorf("branch %q: not a branch name", branch)
	}
	if _, err := g.Run(ctx, "check-ref-format", "refs/heads/"+branch); err != nil {
		return fmt.Errorf("branch %q: not a valid branch name", branch)
	}
	return nil
}

// dropHints removes git's "hint:" lines from an error text.
func dropHints(msg string) string {
	var keep []string
	for _, l := range strings.Split(msg, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "hint:") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func lastLine(msg string) string {
	msg = dropHints(msg)
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		return msg[i+1:]
	}
	return msg
}

// validRemoteName accepts the names git remotes are given (no leading '-', no
// path or URL).
func validRemoteName(s string) bool {
	return s != "" && !strings.HasPrefix(s, "-") && !strings.ContainsAny(s, " \t\n:/\\") && s != "." && s != ".."
}
