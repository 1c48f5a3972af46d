package forge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/conductor/testenv"
	"github.com/conductor-dev/conductor/patch"
)

// realFixture is newFixture against the real Gitea of this test binary: a
// user of its own (the owner), its repository "widget" with main pushed
// over HTTP, and a local clone with the work branch work/t-1.
type realFixture struct {
	g     *testenv.Gitea
	user  testenv.GiteaUser
	owner string
	full  string // owner/widget
	work  string
	local patch.Git
	tip   string
}

func newRealFixture(t *testing.T) *realFixture {
	t.Helper()
	g := testenv.GiteaServer(t)
	u, err := g.NewUser(g.Unique("acme"))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.NewRepo(u.Name, "widget", testenv.RepoOptions{}); err != nil {
		t.Fatal(err)
	}
	f := &realFixture{g: g, user: u, owner: u.Name, full: u.Name + "/widget", work: filepath.Join(t.TempDir(), "work")}
	if err := os.MkdirAll(f.work, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, f.work, "init", "--quiet", "-b", "main")
	writeFile(t, filepath.Join(f.work, "README.md"), "widget\n")
	git(t, f.work, "add", "README.md")
	git(t, f.work, "commit", "--quiet", "-m", "initial")
	git(t, f.work, "remote", "add", "origin", g.URL+"/"+f.full+".git")
	f.local = patch.Git{GitDir: filepath.Join(f.work, ".git"), WorkTree: f.work}
	if _, err := f.pusher(u.Token).Push(context.Background(), "main", forge.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.g.WaitNotEmpty(f.full); err != nil {
		t.Fatal(err)
	}
	git(t, f.work, "checkout", "--quiet", "-b", "work/t-1")
	writeFile(t, filepath.Join(f.work, "widget.go"), "package widget\n\nfunc Answer() int { return 42 }\n")
	git(t, f.work, "add", "widget.go")
	git(t, f.work, "commit", "--quiet", "-m", "Add Answer\n\nAnswer returns the answer.\n\nConductor-Task: t-1")
	f.tip = git(t, f.work, "rev-parse", "HEAD")
	git(t, f.work, "checkout", "--quiet", "main")
	return f
}

func (f *realFixture) pusher(tok string) forge.Pusher {
	return forge.Pusher{Git: f.local, Remote: "origin", ForgeURL: f.g.URL, Token: tok}
}

func (f *realFixture) opts(tok string) forge.DraftOptions {
	return forge.DraftOptions{
		Branch: "work/t-1", Repo: f.local,
		Settings: forge.Settings{URL: f.g.URL},
		Getenv:   env(map[string]string{"GITEA_TOKEN": tok}),
	}
}

// pulls lists the repository's pull requests (all states) as the server has them.
func (f *realFixture) pulls(t *testing.T) []map[string]any {
	t.Helper()
	b, err := f.g.Call("GET", "/api/v1/repos/"+f.full+"/pulls?state=all&limit=50", f.user.Token, nil, 200)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// remoteHas is the forge's tip of branch, or "".
func (f *realFixture) remoteHas(t *testing.T, branch string) string {
	t.Helper()
	st, b, err := f.g.Do("GET", "/api/v1/repos/"+f.full+"/branches/"+branch, f.user.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st == 404 {
		return ""
	}
	var br struct {
		Commit struct {
			ID string `json:"id"`
		} `json:"commit"`
	}
	if err := json.Unmarshal(b, &br); err != nil {
		t.Fatalf("branch %s: HTTP %d: %s", branch, st, b)
	}
	return br.Commit.ID
}

// TestRealOpenDraftPR is TestOpenDraftPR against the real server: the
// branch is pushed over HTTP with the token, the pull request is a draft
// (the server says so), and opening again gives the same one.
func TestRealOpenDraftPR(t *testing.T) {
	t.Parallel() // each test has a user and repositories of its own
	f := newRealFixture(t)
	ctx := context.Background()
	n, err := f.g.NewIssue(f.owner, "widget", "make it answer")
	if err != nil {
		t.Fatal(err)
	}
	o := f.opts(f.user.Token)
	o.Issue = n
	res, err := forge.OpenDraftPR(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.remoteHas(t, "work/t-1"); got != f.tip {
		t.Fatalf("forge work/t-1 = %q, want %s", got, f.tip)
	}
	pr := res.PR
	if pr.Number != n+1 || !pr.Draft || pr.Existing || pr.Head != "work/t-1" || pr.Base != "main" || pr.Title != "WIP: Add Answer" {
		t.Fatalf("pr = %+v", pr)
	}
	if !strings.HasSuffix(pr.URL, fmt.Sprintf("/%s/pulls/%d", f.full, pr.Number)) || len(res.Warnings) != 0 {
		t.Fatalf("res = %+v", res)
	}
	pulls := f.pulls(t)
	if len(pulls) != 1 || !strings.Contains(pulls[0]["body"].(string), fmt.Sprintf("Closes #%d", n)) {
		t.Fatalf("pulls = %v", pulls)
	}
	res2, err := forge.OpenDraftPR(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if res2.PR.Number != pr.Number || !res2.PR.Existing || !res2.Push.UpToDate || !res2.PR.Draft {
		t.Fatalf("second open = %+v", res2)
	}
	if n := len(f.pulls(t)); n != 1 {
		t.Fatalf("%d pull requests after opening twice", n)
	}
	// A duplicate create answers 409 on the real server too: OpenPR
	// returns the existing one.
	g, err := forge.NewGitea(ctx, forge.GiteaOptions{URL: f.g.URL, Token: f.user.Token, Owner: f.owner, Repo: "widget"})
	if err != nil {
		t.Fatal(err)
	}
	dup, err := g.OpenPR(ctx, forge.PROpts{Head: "work/t-1", Base: "main", Title: "WIP: again"})
	if err != nil || !dup.Existing || dup.Number != pr.Number {
		t.Fatalf("duplicate = %+v, %v", dup, err)
	}
}

// Five `pr open` of one branch at once (each with its own store handle, as
// separate processes have) open one pull request: the store's lease
// serializes them. Real Gitea opens two when creates race.
func TestRealConcurrentPROpen(t *testing.T) {
	t.Parallel() // each test has a user and repositories of its own
	f := newRealFixture(t)
	dataRoot := t.TempDir()
	ctx := context.Background()
	var wg sync.WaitGroup
	results := make([]forge.DraftResult, 5)
	errs := make([]error, 5)
	for i := range 5 {
		st, err := bus.Open(ctx, bus.Options{DataRoot: dataRoot})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		o := f.opts(f.user.Token)
		o.Lock = st.(bus.Locker).Lock
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = forge.OpenDraftPR(ctx, o)
		}()
	}
	wg.Wait()
	opened := 0
	for i := range 5 {
		if errs[i] != nil {
			t.Fatalf("pr open %d: %v", i, errs[i])
		}
		if !results[i].PR.Existing {
			opened++
		}
		if results[i].PR.Number != results[0].PR.Number {
			t.Errorf("pr open %d got #%d, another #%d", i, results[i].PR.Number, results[0].PR.Number)
		}
	}
	if n := len(f.pulls(t)); n != 1 || opened != 1 {
		t.Fatalf("%d pull requests on the server, %d reported as opened", n, opened)
	}
}

// Closing (commenting on) an issue that does not exist is refused with
// issue-not-found, not the server's HTTP 500.
func TestRealCloseMissingIssue(t *testing.T) {
	t.Parallel() // each test has a user and repositories of its own
	f := newRealFixture(t)
	ctx := context.Background()
	g, err := forge.NewGitea(ctx, forge.GiteaOptions{URL: f.g.URL, Token: f.user.Token, Owner: f.owner, Repo: "widget"})
	if err != nil {
		t.Fatal(err)
	}
	err = forge.CloseIssueAfterLanding(ctx, g, 99, f.tip, "main")
	if !errors.Is(err, forge.ErrNotFound) || !strings.Contains(err.Error(), "refused: issue-not-found: issue #99 does not exist in the forge repository "+f.full) {
		t.Fatalf("err = %v", err)
	}
	n, err := f.g.NewIssue(f.owner, "widget", "make it answer")
	if err != nil {
		t.Fatal(err)
	}
	if err := forge.CloseIssueAfterLanding(ctx, g, n, f.tip, "main"); err != nil {
		t.Fatal(err)
	}
	b, err := f.g.Call("GET", fmt.Sprintf("/api/v1/repos/%s/issues/%d", f.full, n), f.user.Token, nil, 200)
	if err != nil || !strings.Contains(string(b), `"state":"closed"`) || !strings.Contains(string(b), `"comments":1`) {
		t.Fatalf("issue: %s, %v", b, err)
	}
	// Closing it again is not an error.
	if err := forge.CloseIssueAfterLanding(ctx, g, n, f.tip, "main"); err != nil {
		t.Fatal(err)
	}
}

// A token that cannot push is refused before the push (forge-forbidden),
// whether its scope is read-only or its user has no write access; the push
// itself labels the server's 403 the same way.
func TestRealForbiddenToken(t *testing.T) {
	t.Parallel() // each test has a user and repositories of its own
	f := newRealFixture(t)
	ctx := context.Background()
	scoped, err := f.g.NewToken(f.user, "read:repository", "read:issue", "read:user")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := f.g.NewUser(f.g.Unique("stranger"))
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"read-only scope": scoped, "user without write access": stranger.Token} {
		t.Run(name, func(t *testing.T) {
			_, err := forge.OpenDraftPR(ctx, f.opts(tok))
			if !errors.Is(err, forge.ErrForbidden) || !strings.Contains(err.Error(), "refused: forge-forbidden: the token cannot push to "+f.full) {
				t.Fatalf("err = %v", err)
			}
			if f.remoteHas(t, "work/t-1") != "" || len(f.pulls(t)) != 0 {
				t.Fatal("something was pushed or opened")
			}
			// Pushing anyway: the read-only scope meets HTTP 403 (labelled
			// forge-forbidden); a user without write access is declined by
			// the server's pre-receive hook (said so, in one line).
			_, err = f.pusher(tok).Push(ctx, "work/t-1", forge.PushOptions{})
			forbiddenPush := errors.Is(err, forge.ErrForbidden) && strings.Contains(err.Error(), "forge-forbidden: the token cannot push to "+f.full)
			declined := strings.Contains(err.Error(), "the forge declined it (remote rejected: pre-receive hook declined): may the token's user push to "+f.full)
			if !forbiddenPush && !declined || strings.Contains(err.Error(), tok) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("push err = %v", err)
			}
			rep := forge.CheckForge(ctx, forge.Settings{URL: f.g.URL}, f.local, env(map[string]string{"GITEA_TOKEN": tok}), nil)
			if rep.Works || !strings.Contains(fmt.Sprint(rep.Checks), "the token cannot push to "+f.full) {
				t.Fatalf("check = %+v", rep)
			}
		})
	}
	rep := forge.CheckForge(ctx, forge.Settings{URL: f.g.URL}, f.local, env(map[string]string{"GITEA_TOKEN": f.user.Token}), nil)
	if !rep.Works || rep.Repo != f.full {
		t.Fatalf("check with a good token = %+v", rep)
	}
}

// Bad input against the real server: one line each, naming the URL and
// what to check, never the token, and nothing pushed.
func TestRealBadInput(t *testing.T) {
	t.Parallel() // each test has a user and repositories of its own
	f := newRealFixture(t)
	ctx := context.Background()
	revoked, err := f.g.NewToken(f.user)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.g.RevokeToken(f.user, revoked); err != nil {
		t.Fatal(err)
	}
	if err := f.g.NewRepo(f.owner, "empty", testenv.RepoOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.g.NewRepo(f.owner, "old", testenv.RepoOptions{AutoInit: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.g.Call("PATCH", "/api/v1/repos/"+f.owner+"/old", f.user.Token, map[string]any{"archived": true}, 200); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(o *forge.DraftOptions)
		want []string
	}{
		{"revoked token", func(o *forge.DraftOptions) { o.Getenv = env(map[string]string{"GITEA_TOKEN": revoked}) },
			[]string{f.g.URL, "unauthorized (HTTP 401)", "the token was rejected (wrong, expired or revoked): check $GITEA_TOKEN"}},
		{"wrong path", func(o *forge.DraftOptions) { o.Settings.URL = f.g.URL + "/gitea" },
			[]string{f.g.URL + "/gitea", "not a Gitea API", "base URL"}},
		{"https on the http port", func(o *forge.DraftOptions) { o.Settings.URL = strings.Replace(f.g.URL, "http:", "https:", 1) },
			[]string{"plain HTTP on this port", "http://"}},
		{"empty repository", func(o *forge.DraftOptions) { o.Settings.Owner, o.Settings.Repo = f.owner, "empty" },
			[]string{f.owner + "/empty on " + f.g.URL + " is empty: push", "(nothing pushed)"}},
		{"archived repository", func(o *forge.DraftOptions) { o.Settings.Owner, o.Settings.Repo = f.owner, "old" },
			[]string{f.owner + "/old on " + f.g.URL + " is archived", "(nothing pushed)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := f.opts(f.user.Token)
			tc.edit(&o)
			_, err := forge.OpenDraftPR(ctx, o)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), f.user.Token) || strings.Contains(err.Error(), revoked) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line without the token: %q", err)
			}
			if f.remoteHas(t, "work/t-1") != "" {
				t.Fatal("pushed")
			}
		})
	}
}

// TestRealOpenDraftPRErrors is TestOpenDraftPRErrors against the real
// server, for the cases it can play: the same errors, nothing pushed,
// nothing opened.
func TestRealOpenDraftPRErrors(t *testing.T) {
	t.Parallel() // each test has a user and repositories of its own
	ctx := context.Background()
	tests := []struct {
		name string
		edit func(t *testing.T, f *realFixture, o *forge.DraftOptions)
		want []string
		is   error
	}{
		{name: "wrong token", edit: func(t *testing.T, f *realFixture, o *forge.DraftOptions) {
			o.Getenv = env(map[string]string{"GITEA_TOKEN": "wrong"})
		}, want: []string{"unauthorized", "401"}, is: forge.ErrUnauthorized},
		{name: "branch missing", edit: func(t *testing.T, f *realFixture, o *forge.DraftOptions) { o.Branch = "work/nope" },
			want: []string{`branch "work/nope" does not exist`}},
		{name: "base missing on the forge", edit: func(t *testing.T, f *realFixture, o *forge.DraftOptions) { o.Base = "release-9" },
			want: []string{`base branch "release-9" does not exist on the forge repository`}, is: forge.ErrNotFound},
		{name: "repository missing on the forge", edit: func(t *testing.T, f *realFixture, o *forge.DraftOptions) {
			o.Settings.Owner, o.Settings.Repo = f.owner, "gadget"
		}, want: []string{"/gadget does not exist"}, is: forge.ErrNotFound},
		{name: "head equals base", edit: func(t *testing.T, f *realFixture, o *forge.DraftOptions) { o.Branch = "main" },
			want: []string{"head and base are the same"}},
		{name: "remote is not the forge's repository", edit: func(t *testing.T, f *realFixture, o *forge.DraftOptions) {
			other := filepath.Join(t.TempDir(), "elsewhere", f.owner, "widget.git")
			if err := os.MkdirAll(other, 0o755); err != nil {
				t.Fatal(err)
			}
			git(t, other, "init", "--quiet", "--bare", "-b", "main")
			git(t, f.work, "remote", "set-url", "origin", other)
		}, want: []string{"does not have it: is the remote this forge's repository?"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newRealFixture(t)
			o := f.opts(f.user.Token)
			tc.edit(t, f, &o)
			_, err := forge.OpenDraftPR(ctx, o)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			if strings.Contains(err.Error(), f.user.Token) {
				t.Errorf("error shows the token: %v", err)
			}
			if got := f.remoteHas(t, o.Branch); got != "" && o.Branch != "main" {
				t.Errorf("pushed %s despite the error", o.Branch)
			}
			if n := len(f.pulls(t)); n != 0 {
				t.Errorf("%d pull requests opened despite the error", n)
			}
		})
	}
}
