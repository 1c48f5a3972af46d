package fakegitea_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"code.gitea.io/sdk/gitea"

	"github.com/conductor-dev/conductor/conductor/forge/fakegitea"
)

const tok = "t0ken"

func newServer(t *testing.T, o fakegitea.Options) *fakegitea.Server {
	t.Helper()
	if o.Token == "" {
		o.Token = tok
	}
	s := fakegitea.New(o)
	t.Cleanup(s.Close)
	s.AddRepo(fakegitea.Repo{Owner: "acme", Name: "widget", Branches: map[string]string{
		"main": strings.Repeat("a", 40), "feature": strings.Repeat("b", 40), "other": strings.Repeat("c", 40),
	}})
	return s
}

// The SDK decodes what the fake answers: the shapes are Gitea's.
func TestShapesThroughTheSDK(t *testing.T) {
	s := newServer(t, fakegitea.Options{})
	c, err := gitea.NewClient(s.URL, gitea.SetToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := c.ServerVersion()
	if err != nil || v != "1.22.3" {
		t.Fatalf("version %q, %v", v, err)
	}
	r, _, err := c.GetRepo("acme", "widget")
	if err != nil || r.DefaultBranch != "main" || r.FullName != "acme/widget" || r.HTMLURL != s.URL+"/acme/widget" {
		t.Fatalf("repo %+v, %v", r, err)
	}
	pr, resp, err := c.CreatePullRequest("acme", "widget", gitea.CreatePullRequestOption{Head: "feature", Base: "main", Title: "wip: lower case", Body: "b"})
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("create: %v", err)
	}
	if pr.Index != 1 || !pr.Draft || pr.Head.Ref != "feature" || pr.Base.Ref != "main" || pr.Head.Sha != strings.Repeat("b", 40) ||
		pr.HTMLURL != s.URL+"/acme/widget/pulls/1" || pr.State != gitea.StateOpen || pr.Poster == nil {
		t.Fatalf("pr %+v", pr)
	}
	_, resp, err = c.CreatePullRequest("acme", "widget", gitea.CreatePullRequestOption{Head: "feature", Base: "main", Title: "again"})
	if resp == nil || resp.StatusCode != 409 || err == nil ||
		err.Error() != "pull request already exists for these targets [id: 1001, issue_id: 1, head_repo_id: 1, base_repo_id: 1, head_branch: feature, base_branch: main]" {
		t.Fatalf("duplicate: %v", err)
	}
	got, _, err := c.GetPullRequest("acme", "widget", 1)
	if err != nil || got.Index != 1 || got.Title != "wip: lower case" {
		t.Fatalf("get: %+v, %v", got, err)
	}
	notDraft, _, err := c.CreatePullRequest("acme", "widget", gitea.CreatePullRequestOption{Head: "other", Base: "main", Title: "Not a draft"})
	if err != nil || notDraft.Draft || notDraft.Index != 2 {
		t.Fatalf("plain pr %+v, %v", notDraft, err)
	}
	prs, _, err := c.ListRepoPullRequests("acme", "widget", gitea.ListPullRequestsOptions{State: gitea.StateOpen})
	if err != nil || len(prs) != 2 {
		t.Fatalf("list: %d, %v", len(prs), err)
	}
	b, _, err := c.GetRepoBranch("acme", "widget", "main")
	if err != nil || b.Name != "main" {
		t.Fatalf("branch: %+v, %v", b, err)
	}
	n, err := s.AddIssue("acme", "widget", "bug")
	if err != nil || n != 3 {
		t.Fatalf("issue number %d, %v (pulls and issues share the index)", n, err)
	}
	if _, _, err := c.CreateIssueComment("acme", "widget", n, gitea.CreateIssueCommentOption{Body: "landed"}); err != nil {
		t.Fatal(err)
	}
	closed := gitea.StateClosed
	is, resp, err := c.EditIssue("acme", "widget", n, gitea.EditIssueOption{State: &closed})
	if err != nil || resp.StatusCode != 201 || is.State != gitea.StateClosed {
		t.Fatalf("close: %+v, %v", is, err)
	}
	if got, _ := s.Issue("acme", "widget", n); got.State != "closed" || len(got.Comments) != 1 {
		t.Fatalf("issue %+v", got)
	}
}

func TestErrors(t *testing.T) {
	s := newServer(t, fakegitea.Options{})
	tests := []struct {
		name, method, path, auth, body string
		status                         int
		message                        string
	}{
		{"wrong token on version", "GET", "/api/v1/version", "token nope", "", 401, "user does not exist [uid: 0, name: ]"},
		{"wrong token on repo", "GET", "/api/v1/repos/acme/widget", "token nope", "", 401, "user does not exist [uid: 0, name: ]"},
		{"anonymous read", "GET", "/api/v1/repos/acme/widget", "", "", 200, ""},
		{"anonymous write", "POST", "/api/v1/repos/acme/widget/pulls", "", `{"head":"feature","base":"main","title":"x"}`, 401, "token is required"},
		{"missing repo", "GET", "/api/v1/repos/acme/nope", "token " + tok, "", 404, "The target couldn't be found."},
		{"missing branch", "GET", "/api/v1/repos/acme/widget/branches/nope", "token " + tok, "", 404, "The target couldn't be found."},
		{"missing base", "POST", "/api/v1/repos/acme/widget/pulls", "token " + tok, `{"head":"feature","base":"nope","title":"x"}`, 404, "The target couldn't be found."},
		{"head is base", "POST", "/api/v1/repos/acme/widget/pulls", "token " + tok, `{"head":"main","base":"main","title":"x"}`, 422, "Invalid PullRequest: There are no changes between the head and the base"},
		{"no title", "POST", "/api/v1/repos/acme/widget/pulls", "token " + tok, `{"head":"feature","base":"main"}`, 422, "[Title]: Required"},
		{"missing issue", "PATCH", "/api/v1/repos/acme/widget/issues/9", "token " + tok, `{"state":"closed"}`, 404, "The target couldn't be found."},
		{"missing pull", "GET", "/api/v1/repos/acme/widget/pulls/9", "token " + tok, "", 404, "The target couldn't be found."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, s.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if tc.message == "" {
				return
			}
			var m struct {
				Message string `json:"message"`
				URL     string `json:"url"`
			}
			if err := json.Unmarshal(b, &m); err != nil || m.Message != tc.message || m.URL != s.URL+"/api/swagger" {
				t.Fatalf("body %s", b)
			}
		})
	}
	for _, r := range s.Requests() {
		if strings.Contains(r.Query+r.Body+r.Auth, tok) {
			t.Fatalf("a recorded request holds the token: %+v", r)
		}
	}
}

// The list pages at 50 with a Link header, as Gitea does.
func TestListPages(t *testing.T) {
	s := fakegitea.New(fakegitea.Options{Token: tok})
	t.Cleanup(s.Close)
	br := map[string]string{"main": strings.Repeat("a", 40)}
	for i := 0; i < 60; i++ {
		br["f"+string(rune('A'+i))] = strings.Repeat("b", 40)
	}
	s.AddRepo(fakegitea.Repo{Owner: "acme", Name: "widget", Branches: br})
	c, err := gitea.NewClient(s.URL, gitea.SetToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 60; i++ {
		if _, _, err := c.CreatePullRequest("acme", "widget", gitea.CreatePullRequestOption{Head: "f" + string(rune('A'+i)), Base: "main", Title: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	prs, resp, err := c.ListRepoPullRequests("acme", "widget", gitea.ListPullRequestsOptions{ListOptions: gitea.ListOptions{Page: 1, PageSize: 50}})
	if err != nil || len(prs) != 50 || resp.NextPage != 2 {
		t.Fatalf("page 1: %d prs, next %d, %v", len(prs), resp.NextPage, err)
	}
	prs, resp, err = c.ListRepoPullRequests("acme", "widget", gitea.ListPullRequestsOptions{ListOptions: gitea.ListOptions{Page: 2, PageSize: 50}})
	if err != nil || len(prs) != 10 || resp.NextPage != 0 {
		t.Fatalf("page 2: %d prs, next %d, %v", len(prs), resp.NextPage, err)
	}
}
