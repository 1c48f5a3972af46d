package forge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"code.gitea.io/sdk/gitea"

	"github.com/conductor-dev/conductor/patch"
)

// GiteaOptions configure a Gitea forge.
type GiteaOptions struct {
	URL   string
	Token string
	Owner string
	Repo  string
	// Pusher pushes from the local repository (its Token and ForgeURL are
	// filled from URL and Token).
	Pusher Pusher
	// HTTP is the base transport (nil: http.DefaultTransport).
	HTTP http.RoundTripper
	// Timeout bounds every request (and, through Pusher, every push);
	// 0: DefaultTimeout.
	Timeout time.Duration
	Log     *slog.Logger
	// tokenEnv names the token's variable in messages (Connect sets it).
	tokenEnv string
}

// Gitea is the Forge for a Gitea (or API-compatible) server.
type Gitea struct {
	client    *gitea.Client
	hc        *http.Client
	token     string
	timeout   time.Duration
	transport *Transport
	owner     string
	repo      string
	url       string
	red       redactor
	tokenEnv  string
	pusher    Pusher
	log       *slog.Logger
	// VersionWarning is set when the server reported a version the SDK
	// could not parse (a development build): the client works, assuming
	// the oldest supported API.
	VersionWarning error
}

var _ Forge = (*Gitea)(nil)

// NewGitea connects to the server: the SDK asks for its version first. An
// unreachable server, a rejected token (ErrUnauthorized) or a server older
// than the SDK supports is an error; an unknown version string (a
// development build) gives a usable client with VersionWarning set, as the
// SDK does.
func NewGitea(ctx context.Context, o GiteaOptions) (*Gitea, error) {
	base := strings.TrimRight(o.URL, "/")
	if o.Owner == "" || o.Repo == "" {
		return nil, fmt.Errorf("gitea %s: owner/repo not set", base)
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr := NewTransport(o.HTTP, log, o.Token)
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	hc := &http.Client{
		Transport: tr,
		Timeout:   timeout,
		// Never follow a redirect with the token to somewhere else.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	g := &Gitea{hc: hc, token: o.Token, timeout: timeout, transport: tr, owner: o.Owner, repo: o.Repo, url: base, red: newRedactor(o.Token), log: log, tokenEnv: o.tokenEnv}
	opts := []gitea.ClientOption{gitea.SetHTTPClient(hc), gitea.SetContext(ctx), gitea.SetUserAgent("conductor")}
	if o.Token != "" {
		opts = append(opts, gitea.SetToken(o.Token))
	}
	client, err := gitea.NewClient(base, opts...)
	switch {
	case err == nil:
	case errors.Is(err, &gitea.ErrUnknownVersion{}) && client != nil:
		g.VersionWarning = err
		log.Warn("gitea reports a version the SDK does not know; assuming the oldest supported API", "url", base, "error", err)
	default:
		return nil, g.connectErr(ctx, err)
	}
	g.client = client
	g.pusher = o.Pusher
	g.pusher.ForgeURL = base
	g.pusher.Token = o.Token
	if g.pusher.Timeout <= 0 {
		g.pusher.Timeout = timeout
	}
	return g, nil
}

// connectErr classifies a failed version probe: each case is one line
// naming the URL (never the token) and what to check. It depends on status
// codes, content types and Go's own error values, never on the server's
// wording.
func (g *Gitea) connectErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	err = g.red.Err(err)
	if timedOut(err) {
		return fmt.Errorf("gitea %s: %w: no answer within %s (GET /api/v1/version): check the server, or raise the forge timeout (--forge-timeout, forge.timeout)", g.url, ErrUnreachable, g.timeout)
	}
	if errors.Is(err, http.ErrSchemeMismatch) {
		return fmt.Errorf("gitea %s: %w: the server answers plain HTTP on this port, not HTTPS: check the URL's scheme (http://)", g.url, ErrUnreachable)
	}
	switch st := g.transport.LastStatus(); {
	case st == 401:
		return &APIError{Op: "gitea " + g.url + ": version", Status: 401, Message: "the token was rejected (wrong, expired or revoked): check $" + g.tokenEnvName() + " (the token variable)"}
	case st == 404:
		return fmt.Errorf("gitea %s: not a Gitea API: GET /api/v1/version answered 404: check that the URL is Gitea's base URL (no /api/v1, no repository path)", g.url)
	case st/100 == 2 && !isJSON(g.transport.LastContentType()):
		return fmt.Errorf("gitea %s: not a Gitea API: GET /api/v1/version answered %s, not JSON: check that the URL is Gitea's base URL", g.url, contentTypeOr(g.transport.LastContentType()))
	case st/100 == 3:
		return fmt.Errorf("gitea %s: GET /api/v1/version answered a redirect (HTTP %d), which is not followed with the token: use the URL it redirects to", g.url, st)
	case st != 0:
		return &APIError{Op: "gitea " + g.url + ": version", Status: st, Message: err.Error()}
	}
	return fmt.Errorf("gitea %s: %w: %v", g.url, ErrUnreachable, err)
}

// tokenEnvName is the token variable's name for messages.
func (g *Gitea) tokenEnvName() string {
	if g.tokenEnv != "" {
		return g.tokenEnv
	}
	return DefaultTokenEnv
}

func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(strings.ToLower(mt))
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func contentTypeOr(ct string) string {
	if ct == "" {
		return "no content type"
	}
	mt, _, _ := strings.Cut(ct, ";")
	return strings.TrimSpace(mt)
}

// timedOut reports a deadline that ran out (the client's or the context's).
func timedOut(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Requests is the number of HTTP requests sent so far.
func (g *Gitea) Requests() int64 { return g.transport.Requests() }

// FullName is owner/repo.
func (g *Gitea) FullName() string { return g.owner + "/" + g.repo }

// apiErr turns an SDK error into an APIError when the server answered.
func (g *Gitea) apiErr(op string, resp *gitea.Response, err error) error {
	if err == nil {
		return nil
	}
	err = g.red.Err(err)
	if resp != nil && resp.Response != nil && resp.StatusCode/100 != 2 {
		return &APIError{Op: op, Status: resp.StatusCode, Message: err.Error()}
	}
	if timedOut(err) {
		return fmt.Errorf("%s: %w: %s gave no answer within %s: check the server, or raise the forge timeout (--forge-timeout, forge.timeout)", op, ErrUnreachable, g.url, g.timeout)
	}
	if g.client == nil || resp == nil {
		return fmt.Errorf("%s: %w: %v", op, ErrUnreachable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Repository describes the forge repository.
type Repository struct {
	FullName      string `json:"fullName"`
	DefaultBranch string `json:"defaultBranch"`
	HTMLURL       string `json:"htmlUrl"`
	Empty         bool   `json:"empty"`
	Archived      bool   `json:"archived"`
	// CanPush is the token's user's push permission (the documented
	// "permissions.push" field); a token scope may still forbid writing:
	// see CanWrite.
	CanPush bool `json:"canPush"`
}

// Repository fetches the repository.
func (g *Gitea) Repository(ctx context.Context) (Repository, error) {
	r, resp, err := g.client.GetRepo(g.owner, g.repo)
	if err != nil {
		if resp != nil && resp.StatusCode == 404 {
			return Repository{}, notFoundf("repository %s does not exist on %s (or the token cannot see it)", g.FullName(), g.url)
		}
		return Repository{}, g.apiErr("get repository "+g.FullName(), resp, err)
	}
	out := Repository{FullName: r.FullName, DefaultBranch: r.DefaultBranch, HTMLURL: r.HTMLURL, Empty: r.Empty, Archived: r.Archived}
	if r.Permissions != nil {
		out.CanPush = r.Permissions.Push
	}
	return out, nil
}

// CanWrite asks the forge whether the token may write the repository's
// code, without changing anything: it sends POST .../branches with an empty
// body. Gitea checks the token's scope and the user's write permission
// before it validates the body, so 422 (the body is invalid) means "may
// write", 403 means "may not", 423 means the repository is archived. Only
// status codes are read.
func (g *Gitea) CanWrite(ctx context.Context) (bool, error) {
	op := "check write access to " + g.FullName()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url+"/api/v1/repos/"+url.PathEscape(g.owner)+"/"+url.PathEscape(g.repo)+"/branches", strings.NewReader("{}"))
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if g.token != "" {
		req.Header.Set("Authorization", "token "+g.token)
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		return false, g.apiErr(op, nil, err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusUnprocessableEntity, http.StatusCreated, http.StatusBadRequest:
		return true, nil
	case http.StatusForbidden:
		return false, nil
	case http.StatusLocked:
		return false, fmt.Errorf("%s: repository %s on %s is archived: unarchive it, or point --owner/--repo elsewhere", op, g.FullName(), g.url)
	case http.StatusNotFound:
		return false, notFoundf("repository %s does not exist on %s (or the token cannot see it)", g.FullName(), g.url)
	}
	return false, &APIError{Op: op, Status: resp.StatusCode, Message: http.StatusText(resp.StatusCode)}
}

// BranchExists reports whether the forge repository has the branch.
func (g *Gitea) BranchExists(ctx context.Context, branch string) (bool, error) {
	_, resp, err := g.client.GetRepoBranch(g.owner, g.repo, branch)
	if err != nil {
		if resp != nil && resp.StatusCode == 404 {
			return false, nil
		}
		return false, g.apiErr("get branch "+branch+" of "+g.FullName(), resp, err)
	}
	return true, nil
}

// IssueExists reports whether the forge repository has issue (or pull
// request) number n.
func (g *Gitea) IssueExists(ctx context.Context, n int64) (bool, error) {
	_, resp, err := g.client.GetIssue(g.owner, g.repo, n)
	if err != nil {
		if resp != nil && resp.StatusCode == 404 {
			return false, nil
		}
		return false, g.apiErr(fmt.Sprintf("get issue #%d of %s", n, g.FullName()), resp, err)
	}
	return true, nil
}

// IssueClosed reports whether issue n is closed.
func (g *Gitea) IssueClosed(ctx context.Context, n int64) (bool, error) {
	is, resp, err := g.client.GetIssue(g.owner, g.repo, n)
	if err != nil {
		if resp != nil && resp.StatusCode == 404 {
			return false, issueNotFound(n, g.FullName(), g.url)
		}
		return false, g.apiErr(fmt.Sprintf("get issue #%d of %s", n, g.FullName()), resp, err)
	}
	return is.State == gitea.StateClosed, nil
}

// hasBranch reports whether the branch exists (false on any error).
func (g *Gitea) hasBranch(ctx context.Context, b string) bool {
	if b == "" {
		return false
	}
	ok, err := g.BranchExists(ctx, b)
	return err == nil && ok
}

// RequireIssue refuses (issue-not-found) when issue n does not exist.
func (g *Gitea) RequireIssue(ctx context.Context, n int64) error {
	ok, err := g.IssueExists(ctx, n)
	if err != nil {
		return err
	}
	if !ok {
		return issueNotFound(n, g.FullName(), g.url)
	}
	return nil
}

// URL is the forge's base URL.
func (g *Gitea) URL() string { return g.url }

// Push implements Forge.
func (g *Gitea) Push(ctx context.Context, branch string, opts PushOptions) (PushResult, error) {
	return g.pusher.Push(ctx, branch, opts)
}

func toPR(p *gitea.PullRequest) PR {
	pr := PR{Number: p.Index, URL: p.HTMLURL, Title: p.Title, State: string(p.State), Draft: p.Draft}
	if p.Head != nil {
		pr.Head, pr.HeadSHA = p.Head.Ref, p.Head.Sha
	}
	if p.Base != nil {
		pr.Base = p.Base.Ref
	}
	return pr
}

// FindPR implements Forge: it pages through the open pull requests.
func (g *Gitea) FindPR(ctx context.Context, head, base string) (PR, error) {
	const pageSize = 50
	for page := 1; page <= 100; page++ {
		prs, resp, err := g.client.ListRepoPullRequests(g.owner, g.repo, gitea.ListPullRequestsOptions{
			ListOptions: gitea.ListOptions{Page: page, PageSize: pageSize},
			State:       gitea.StateOpen,
		})
		if err != nil {
			return PR{}, g.apiErr("list pull requests of "+g.FullName(), resp, err)
		}
		for _, p := range prs {
			pr := toPR(p)
			if pr.Head == head && (base == "" || pr.Base == base) {
				pr.Existing = true
				return pr, nil
			}
		}
		if len(prs) < pageSize && (resp == nil || resp.NextPage == 0) {
			break
		}
		if resp != nil && resp.NextPage == 0 && len(prs) == 0 {
			break
		}
	}
	return PR{}, notFoundf("no open pull request %s → %s in %s", head, base, g.FullName())
}

// OpenPR implements Forge. Gitea answers 409 "pull request already exists
// for these targets" for a duplicate: the existing one is looked up and
// returned with Existing set.
func (g *Gitea) OpenPR(ctx context.Context, o PROpts) (PR, error) {
	p, resp, err := g.client.CreatePullRequest(g.owner, g.repo, gitea.CreatePullRequestOption{
		Head: o.Head, Base: o.Base, Title: o.Title, Body: o.Body,
	})
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusConflict {
			pr, ferr := g.FindPR(ctx, o.Head, o.Base)
			if ferr != nil {
				return PR{}, fmt.Errorf("create pull request %s → %s: the forge says one exists (%v) but it cannot be found: %w", o.Head, o.Base, g.red.Err(err), ferr)
			}
			return pr, nil
		}
		if resp != nil && resp.StatusCode == 404 {
			return PR{}, notFoundf("create pull request %s → %s in %s: head or base branch not found on the forge", o.Head, o.Base, g.FullName())
		}
		return PR{}, g.apiErr(fmt.Sprintf("create pull request %s → %s in %s", o.Head, o.Base, g.FullName()), resp, err)
	}
	return toPR(p), nil
}

// CommentIssue implements Forge.
func (g *Gitea) CommentIssue(ctx context.Context, issue int64, body string) error {
	if issue <= 0 {
		return fmt.Errorf("comment on issue %d: not an issue number", issue)
	}
	// Gitea answers a comment on a missing issue with HTTP 500: look the
	// issue up first.
	if err := g.RequireIssue(ctx, issue); err != nil {
		return fmt.Errorf("comment on issue #%d: %w", issue, err)
	}
	_, resp, err := g.client.CreateIssueComment(g.owner, g.repo, issue, gitea.CreateIssueCommentOption{Body: body})
	if err != nil {
		if resp != nil && resp.StatusCode == 404 {
			return fmt.Errorf("comment on issue #%d: %w", issue, issueNotFound(issue, g.FullName(), g.url))
		}
		return g.apiErr(fmt.Sprintf("comment on issue #%d of %s", issue, g.FullName()), resp, err)
	}
	return nil
}

// CloseIssue implements Forge.
func (g *Gitea) CloseIssue(ctx context.Context, issue int64) error {
	if issue <= 0 {
		return fmt.Errorf("close issue %d: not an issue number", issue)
	}
	if err := g.RequireIssue(ctx, issue); err != nil {
		return fmt.Errorf("close issue #%d: %w", issue, err)
	}
	closed := gitea.StateClosed
	_, resp, err := g.client.EditIssue(g.owner, g.repo, issue, gitea.EditIssueOption{State: &closed})
	if err != nil {
		if resp != nil && resp.StatusCode == 404 {
			return fmt.Errorf("close issue #%d: %w", issue, issueNotFound(issue, g.FullName(), g.url))
		}
		return g.apiErr(fmt.Sprintf("close issue #%d of %s", issue, g.FullName()), resp, err)
	}
	return nil
}

// Connect builds the Gitea forge for a local repository from settings: it
// reads the token from the named variable, derives owner/repo from the
// remote's URL unless set, and connects.
func Connect(ctx context.Context, s Settings, local patch.Git, getenv func(string) string, log *slog.Logger) (*Gitea, error) {
	s = s.WithDefaults(getenv)
	if err := s.Validate(); err != nil {
		return nil, err
	}
	owner, repo, err := ResolveOwnerRepo(ctx, s, local)
	if err != nil {
		return nil, err
	}
	tok, err := s.Token(getenv)
	if err != nil {
		return nil, err
	}
	g, err := NewGitea(ctx, GiteaOptions{
		URL: s.URL, Token: tok, Owner: owner, Repo: repo,
		Pusher:   Pusher{Git: local, Remote: s.Remote},
		Timeout:  s.Deadline(),
		Log:      log,
		tokenEnv: s.TokenEnv,
	})
	return g, err
}

// ResolveOwnerRepo returns the forge owner/repo: from the settings, else
// from the push URL of the remote.
func ResolveOwnerRepo(ctx context.Context, s Settings, local patch.Git) (string, string, error) {
	if s.Owner != "" && s.Repo != "" {
		return s.Owner, s.Repo, nil
	}
	if local.GitDir == "" {
		return "", "", fmt.Errorf("owner/repo: not derivable (no local repository): pass --owner and --repo")
	}
	remoteURL, err := Pusher{Git: local, Remote: s.Remote}.RemoteURL(ctx)
	if err != nil {
		return "", "", fmt.Errorf("owner/repo: not derivable: %v: pass --owner and --repo or add the remote", err)
	}
	owner, repo, err := ParseRemoteURL(remoteURL)
	if err != nil {
		return "", "", fmt.Errorf("owner/repo: not derivable from remote %q: %v: pass --owner and --repo", s.Remote, err)
	}
	if s.Owner != "" {
		owner = s.Owner
	}
	if s.Repo != "" {
		repo = s.Repo
	}
	return owner, repo, nil
}
