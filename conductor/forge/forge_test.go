package forge_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/conductor/forge/fakegitea"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/patch"
)

const token = "s3cret-T0KEN-value-42"

// gitEnv is an isolated environment with fixed identities and dates.
func gitEnv(home string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home,
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=Test Author", "GIT_AUTHOR_EMAIL=author@example.test",
		"GIT_COMMITTER_NAME=Test Committer", "GIT_COMMITTER_EMAIL=committer@example.test",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv(t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

type fixture struct {
	root  string
	bare  string
	work  string
	local patch.Git
	fake  *fakegitea.Server
	tip   string
}

// newFixture makes a bare "forge" repository acme/widget with main, a clone
// with origin pointing at it (file protocol) and a work branch work/t-1 with
// one reviewed commit, and a fake Gitea serving acme/widget.
func newFixture(t *testing.T, o fakegitea.Options) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{root: root, bare: filepath.Join(root, "forge", "acme", "widget.git"), work: filepath.Join(root, "work")}
	if err := os.MkdirAll(f.bare, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, f.bare, "init", "--quiet", "--bare", "-b", "main")
	if err := os.MkdirAll(f.work, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, f.work, "init", "--quiet", "-b", "main")
	writeFile(t, filepath.Join(f.work, "README.md"), "widget\n")
	git(t, f.work, "add", "README.md")
	git(t, f.work, "commit", "--quiet", "-m", "initial")
	git(t, f.work, "remote", "add", "origin", f.bare)
	git(t, f.work, "push", "--quiet", "origin", "main")
	git(t, f.work, "checkout", "--quiet", "-b", "work/t-1")
	writeFile(t, filepath.Join(f.work, "widget.go"), "package widget\n\nfunc Answer() int { return 42 }\n")
	git(t, f.work, "add", "widget.go")
	git(t, f.work, "commit", "--quiet", "-m", "Add Answer\n\nAnswer returns the answer.\n\nConductor-Task: t-1\nConductor-Run: r-1")
	f.tip = git(t, f.work, "rev-parse", "HEAD")
	git(t, f.work, "checkout", "--quiet", "main")
	f.local = patch.Git{GitDir: filepath.Join(f.work, ".git"), WorkTree: f.work}
	if o.Token == "" {
		o.Token = token
	}
	f.fake = fakegitea.New(o)
	t.Cleanup(f.fake.Close)
	f.fake.AddRepo(fakegitea.Repo{Owner: "acme", Name: "widget", GitDir: f.bare})
	return f
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func (f *fixture) opts(tok string) forge.DraftOptions {
	return forge.DraftOptions{
		Branch:   "work/t-1",
		Repo:     f.local,
		Settings: forge.Settings{URL: f.fake.URL},
		Getenv:   env(map[string]string{"GITEA_TOKEN": tok}),
	}
}

func (f *fixture) remoteHas(t *testing.T, branch string) string {
	t.Helper()
	cmd := exec.Command("git", "--git-dir="+f.bare, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch)
	cmd.Env = gitEnv(t.TempDir())
	out, _ := cmd.Output()
	return strings.TrimSpace(string(out))
}

func TestOpenDraftPR(t *testing.T) {
	f := newFixture(t, fakegitea.Options{})
	ctx := context.Background()
	o := f.opts(token)
	o.Issue = 99
	if _, err := forge.OpenDraftPR(ctx, o); err == nil || !strings.Contains(err.Error(), "refused: issue-not-found: issue #99 does not exist in the forge repository acme/widget on "+f.fake.URL+" (nothing pushed)") {
		t.Fatalf("missing issue: %v", err)
	}
	if got := f.remoteHas(t, "work/t-1"); got != "" {
		t.Fatal("pushed despite a missing issue")
	}
	for i := 0; i < 7; i++ {
		if _, err := f.fake.AddIssue("acme", "widget", fmt.Sprintf("issue %d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	o.Issue = 7
	res, err := forge.OpenDraftPR(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.remoteHas(t, "work/t-1"); got != f.tip {
		t.Fatalf("forge branch work/t-1 = %q, want %s", got, f.tip)
	}
	pr := res.PR
	if pr.Number != 8 || !pr.Draft || pr.Existing || pr.Head != "work/t-1" || pr.Base != "main" || pr.Title != "WIP: Add Answer" {
		t.Fatalf("pr = %+v", pr)
	}
	if !strings.HasSuffix(pr.URL, "/acme/widget/pulls/8") {
		t.Fatalf("url = %s", pr.URL)
	}
	if len(res.Warnings) != 0 {
		t.Fatalf("warnings: %v", res.Warnings)
	}
	pulls := f.fake.Pulls("acme", "widget")
	if len(pulls) != 1 {
		t.Fatalf("pulls = %+v", pulls)
	}
	body := pulls[0].Body
	for _, want := range []string{"Answer returns the answer.", "Closes #7 (" + f.fake.URL + "/acme/widget/issues/7)", "widget.go | 3 +++", f.tip, "opened from a branch"} {
		if !strings.Contains(body, want) {
			t.Errorf("body lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "Conductor-Task:") {
		t.Errorf("body keeps the trailers:\n%s", body)
	}

	// Twice: the same pull request, no second one.
	res2, err := forge.OpenDraftPR(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if res2.PR.Number != 8 || !res2.PR.Existing || !res2.Push.UpToDate {
		t.Fatalf("second open = %+v", res2)
	}
	if n := len(f.fake.Pulls("acme", "widget")); n != 1 {
		t.Fatalf("%d pull requests after opening twice", n)
	}
}

// A duplicate found only by the server's 409 (the listing missed it, e.g. a
// race) is still returned as the existing pull request.
func TestOpenPRConflictIsExisting(t *testing.T) {
	f := newFixture(t, fakegitea.Options{})
	ctx := context.Background()
	git(t, f.work, "push", "--quiet", "origin", "work/t-1")
	g, err := forge.NewGitea(ctx, forge.GiteaOptions{URL: f.fake.URL, Token: token, Owner: "acme", Repo: "widget"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := g.OpenPR(ctx, forge.PROpts{Head: "work/t-1", Base: "main", Title: "WIP: x", Body: "b"})
	if err != nil || first.Existing {
		t.Fatalf("first = %+v, %v", first, err)
	}
	second, err := g.OpenPR(ctx, forge.PROpts{Head: "work/t-1", Base: "main", Title: "WIP: x", Body: "b"})
	if err != nil || !second.Existing || second.Number != first.Number {
		t.Fatalf("second = %+v, %v", second, err)
	}
	var sawConflict bool
	for _, r := range f.fake.Requests() {
		if r.Method == "POST" && r.Status == 409 {
			sawConflict = true
		}
	}
	if !sawConflict {
		t.Fatal("the fake never answered 409")
	}
}

func TestOpenDraftPRErrors(t *testing.T) {
	ctx := context.Background()
	dead := fakegitea.New(fakegitea.Options{})
	deadURL := dead.URL
	dead.Close()

	tests := []struct {
		name     string
		fake     fakegitea.Options
		edit     func(f *fixture, o *forge.DraftOptions)
		want     []string
		is       error
		maxCalls int // requests the fake may see
	}{
		{
			name:     "wrong token",
			edit:     func(f *fixture, o *forge.DraftOptions) { o.Getenv = env(map[string]string{"GITEA_TOKEN": "wrong"}) },
			want:     []string{"unauthorized", "401"},
			is:       forge.ErrUnauthorized,
			maxCalls: 1,
		},
		{
			name:     "token unset",
			edit:     func(f *fixture, o *forge.DraftOptions) { o.Getenv = env(nil) },
			want:     []string{"$GITEA_TOKEN is empty or unset"},
			maxCalls: 0,
		},
		{
			name: "token env renamed",
			edit: func(f *fixture, o *forge.DraftOptions) {
				o.Settings.TokenEnv = "FORGE_PAT"
			},
			want: []string{"$FORGE_PAT is empty or unset"},
		},
		{
			name:     "unreachable",
			edit:     func(f *fixture, o *forge.DraftOptions) { o.Settings.URL = deadURL },
			want:     []string{"forge unreachable", deadURL},
			is:       forge.ErrUnreachable,
			maxCalls: 0,
		},
		{
			name:     "branch missing",
			edit:     func(f *fixture, o *forge.DraftOptions) { o.Branch = "work/nope" },
			want:     []string{`branch "work/nope" does not exist`},
			maxCalls: 0,
		},
		{
			name:     "base missing on the forge",
			edit:     func(f *fixture, o *forge.DraftOptions) { o.Base = "release-9" },
			want:     []string{`base branch "release-9" does not exist on the forge repository acme/widget`},
			is:       forge.ErrNotFound,
			maxCalls: 3,
		},
		{
			name: "owner/repo not derivable",
			edit: func(f *fixture, o *forge.DraftOptions) {
				git(t, f.work, "remote", "set-url", "origin", "/widget.git")
			},
			want: []string{"owner/repo: not derivable", "--owner"},
		},
		{
			name: "no remote",
			edit: func(f *fixture, o *forge.DraftOptions) {
				git(t, f.work, "remote", "remove", "origin")
			},
			want: []string{`remote "origin": not configured`},
		},
		{
			name:     "repository missing on the forge",
			edit:     func(f *fixture, o *forge.DraftOptions) { o.Settings.Owner, o.Settings.Repo = "acme", "gadget" },
			want:     []string{"repository acme/gadget does not exist"},
			is:       forge.ErrNotFound,
			maxCalls: 2,
		},
		{
			name:     "head equals base",
			edit:     func(f *fixture, o *forge.DraftOptions) { o.Branch = "main" },
			want:     []string{"head and base are the same"},
			maxCalls: 2,
		},
		{
			name: "remote is not the forge's repository",
			edit: func(f *fixture, o *forge.DraftOptions) {
				elsewhere := filepath.Join(f.root, "elsewhere", "acme", "widget.git")
				if err := os.MkdirAll(elsewhere, 0o755); err != nil {
					t.Fatal(err)
				}
				git(t, elsewhere, "init", "--quiet", "--bare", "-b", "main")
				git(t, f.work, "remote", "set-url", "origin", elsewhere)
			},
			want:     []string{"does not have it: is the remote this forge's repository?"},
			maxCalls: 5,
		},
		{
			name: "remote name is an option",
			edit: func(f *fixture, o *forge.DraftOptions) { o.Settings.Remote = "--receive-pack=touch /tmp/x" },
			want: []string{"not a remote name"},
		},
		{
			name: "bad URL",
			edit: func(f *fixture, o *forge.DraftOptions) { o.Settings.URL = "gitea.example" },
			want: []string{"want http(s)://"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.fake)
			o := f.opts(token)
			tc.edit(f, &o)
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
			if strings.Contains(err.Error(), token) {
				t.Errorf("error shows the token: %v", err)
			}
			if n := len(f.fake.Requests()); n > tc.maxCalls {
				t.Errorf("%d requests (max %d): %+v", n, tc.maxCalls, f.fake.Requests())
			}
			if got := f.remoteHas(t, o.Branch); got != "" && o.Branch != "main" {
				t.Errorf("pushed %s despite the error", o.Branch)
			}
			if n := len(f.fake.Pulls("acme", "widget")); n != 0 {
				t.Errorf("%d pull requests opened despite the error", n)
			}
		})
	}
}

func TestDraftWarnings(t *testing.T) {
	tests := []struct {
		name string
		fake fakegitea.Options
		want string
	}{
		{"server prefixes differ", fakegitea.Options{WIPPrefixes: []string{"Draft:"}}, `did not mark pull request #1 as a draft (title prefix "WIP:")`},
		{"server without draft field", fakegitea.Options{NoDraftField: true}, "did not mark pull request #1 as a draft"},
		{"development version", fakegitea.Options{Version: "development"}, "unknown version: development"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.fake)
			res, err := forge.OpenDraftPR(context.Background(), f.opts(token))
			if err != nil {
				t.Fatal(err)
			}
			if res.PR.Number != 1 {
				t.Fatalf("pr = %+v", res.PR)
			}
			if !strings.Contains(strings.Join(res.Warnings, "\n"), tc.want) {
				t.Fatalf("warnings %q lack %q", res.Warnings, tc.want)
			}
		})
	}
}

// The configured prefix is what the title gets.
func TestWIPPrefixSetting(t *testing.T) {
	f := newFixture(t, fakegitea.Options{WIPPrefixes: []string{"[draft]"}})
	o := f.opts(token)
	o.Settings.Servers = map[string]forge.ServerSettings{f.fake.URL: {WIPPrefix: "[draft]"}}
	o.Title = "Custom title"
	res, err := forge.OpenDraftPR(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.PR.Title != "[draft] Custom title" || !res.PR.Draft || len(res.Warnings) != 0 {
		t.Fatalf("res = %+v", res)
	}
}

type verdicts map[string]bus.Verdict

func (v verdicts) LatestVerdict(_ context.Context, ref string) (bus.Verdict, error) {
	if x, ok := v[ref]; ok {
		return x, nil
	}
	return bus.Verdict{}, bus.ErrNotFound
}

// From a run: the branch is work/<task>, the repository is the record's and
// the body carries the receipt; pr.json is written; the token is nowhere.
func TestOpenDraftPRFromRun(t *testing.T) {
	f := newFixture(t, fakegitea.Options{})
	dataRoot := t.TempDir()
	runDir := filepath.Join(dataRoot, "runs", "r-1")
	p, c, tot := int64(1200), int64(340), int64(1540)
	if err := runrec.Dir(runDir).WriteResult(runrec.Result{
		RunID: "r-1", TaskID: "t-1", Status: runrec.StatusSucceeded, ModelAlias: "local-qwen", Model: "qwen2.5-coder",
		PromptTokens: &p, CompletionTokens: &c, TotalTokens: &tot, Steps: 9,
		Repo: f.local.GitDir, BaseCommit: git(t, f.work, "rev-parse", "main"), PatchID: "0123abcd",
	}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	o := forge.DraftOptions{
		RunDir:   runDir,
		Settings: forge.Settings{URL: f.fake.URL},
		Getenv:   env(map[string]string{"GITEA_TOKEN": token}),
		Verdicts: verdicts{"refs/heads/work/t-1": {Verdict: bus.VerdictApprove, Reviewer: "reviewer-1", Commit: f.tip, PatchID: "0123abcd", Findings: []string{"gofmt: ok", "gate: go test ./... passed"}}},
		Log:      slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	res, err := forge.OpenDraftPR(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.RunID != "r-1" || res.PR.Head != "work/t-1" {
		t.Fatalf("res = %+v", res)
	}
	body := f.fake.Pulls("acme", "widget")[0].Body
	for _, want := range []string{"`t-1`", "local-qwen (qwen2.5-coder)", "1200 prompt + 340 completion = 1540 total", "| steps | 9 |", "`0123abcd`", "**approve** by reviewer-1", "gate: go test ./... passed"} {
		if !strings.Contains(body, want) {
			t.Errorf("body lacks %q:\n%s", want, body)
		}
	}
	if _, err := os.Stat(filepath.Join(runDir, forge.PRRecordFile)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "forge request") {
		t.Fatalf("no request logged:\n%s", logs.String())
	}
	assertNoToken(t, token, dataRoot, f.work, logs.String())
}

func TestRunWithoutWorkBranch(t *testing.T) {
	f := newFixture(t, fakegitea.Options{})
	runDir := filepath.Join(t.TempDir(), "r-2")
	if err := runrec.Dir(runDir).WriteResult(runrec.Result{RunID: "r-2", TaskID: "t-2", Repo: f.local.GitDir}); err != nil {
		t.Fatal(err)
	}
	_, err := forge.OpenDraftPR(context.Background(), forge.DraftOptions{RunDir: runDir, Settings: forge.Settings{URL: f.fake.URL}, Getenv: env(map[string]string{"GITEA_TOKEN": token})})
	if err == nil || !strings.Contains(err.Error(), "run r-2 has no work branch: work/t-2 does not exist") {
		t.Fatalf("err = %v", err)
	}
	if n := len(f.fake.Requests()); n != 0 {
		t.Fatalf("%d requests", n)
	}
}

// Pushing over HTTP to the forge itself: git gets the token through its
// environment only, the push lands, and nothing on disk holds the token.
func TestPushOverHTTP(t *testing.T) {
	f := newFixture(t, fakegitea.Options{})
	git(t, f.work, "remote", "set-url", "origin", f.fake.URL+"/acme/widget.git")
	var logs bytes.Buffer
	o := f.opts(token)
	o.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	res, err := forge.OpenDraftPR(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.remoteHas(t, "work/t-1"); got != f.tip || res.PR.Number != 1 {
		t.Fatalf("remote work/t-1 = %q, pr = %+v", got, res.PR)
	}
	var gitAuth bool
	for _, r := range f.fake.Requests() {
		if strings.HasSuffix(r.Path, "/git-receive-pack") && r.Auth == "basic" && r.Status == 200 {
			gitAuth = true
		}
	}
	if !gitAuth {
		t.Fatalf("no authenticated receive-pack: %+v", f.fake.Requests())
	}
	assertNoToken(t, token, f.work, logs.String())

	// A rejected credential on push is "unauthorized", not a hang or a prompt.
	p := forge.Pusher{Git: f.local, Remote: "origin", ForgeURL: f.fake.URL, Token: "wrong"}
	git(t, f.work, "branch", "work/t-9", "work/t-1")
	_, err = p.Push(context.Background(), "work/t-9", forge.PushOptions{})
	if !errors.Is(err, forge.ErrUnauthorized) || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("push with a wrong token: %v", err)
	}
	// A remote on another host never gets the token.
	other := forge.Pusher{Git: f.local, Remote: "origin", ForgeURL: "http://gitea.invalid", Token: token}
	if _, err := other.Push(context.Background(), "work/t-9", forge.PushOptions{}); err == nil {
		t.Fatal("push to the forge without its credential succeeded")
	}
}

func assertNoToken(t *testing.T, tok string, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if strings.Contains(d, tok) {
			t.Fatalf("token in text: %s", d)
		}
		if _, err := os.Stat(d); err != nil {
			continue
		}
		filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err == nil && (bytes.Contains(b, []byte(tok))) {
				t.Errorf("token found in %s", p)
			}
			return nil
		})
	}
}

func TestCloseIssueAfterLanding(t *testing.T) {
	f := newFixture(t, fakegitea.Options{})
	n, err := f.fake.AddIssue("acme", "widget", "make it answer")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g, err := forge.NewGitea(ctx, forge.GiteaOptions{URL: f.fake.URL, Token: token, Owner: "acme", Repo: "widget"})
	if err != nil {
		t.Fatal(err)
	}
	if err := forge.CloseIssueAfterLanding(ctx, g, n, f.tip, "main"); err != nil {
		t.Fatal(err)
	}
	is, _ := f.fake.Issue("acme", "widget", n)
	if is.State != "closed" || len(is.Comments) != 1 || !strings.Contains(is.Comments[0], f.tip) || !strings.Contains(is.Comments[0], "`main`") {
		t.Fatalf("issue = %+v", is)
	}
	err = forge.CloseIssueAfterLanding(ctx, g, 99, f.tip, "main")
	if !errors.Is(err, forge.ErrNotFound) || !strings.Contains(err.Error(), "issue #99") {
		t.Fatalf("missing issue: %v", err)
	}
	if err := forge.CloseIssueAfterLanding(ctx, g, 0, f.tip, "main"); err == nil {
		t.Fatal("issue 0 accepted")
	}
}

func TestParseRemoteURL(t *testing.T) {
	tests := []struct {
		in, owner, repo string
		bad             bool
	}{
		{in: "https://gitea.example/acme/widget.git", owner: "acme", repo: "widget"},
		{in: "https://gitea.example/acme/widget", owner: "acme", repo: "widget"},
		{in: "https://gitea.example/sub/path/acme/widget.git/", owner: "acme", repo: "widget"},
		{in: "https://user:pw@gitea.example/acme/widget.git", owner: "acme", repo: "widget"},
		{in: "ssh://git@gitea.example:2222/acme/widget.git", owner: "acme", repo: "widget"},
		{in: "git@gitea.example:acme/widget.git", owner: "acme", repo: "widget"},
		{in: "file:///srv/forge/acme/widget.git", owner: "acme", repo: "widget"},
		{in: "/srv/forge/acme/my.repo.git", owner: "acme", repo: "my.repo"},
		{in: "/widget.git", bad: true},
		{in: "../widget.git", bad: true},
		{in: "https://gitea.example/widget.git", bad: true},
		{in: "", bad: true},
		{in: "https://gitea.example/ac me/widget.git", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			o, r, err := forge.ParseRemoteURL(tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("got %s/%s, want an error", o, r)
				}
				if strings.Contains(err.Error(), "pw@") {
					t.Fatalf("error shows the password: %v", err)
				}
				return
			}
			if err != nil || o != tc.owner || r != tc.repo {
				t.Fatalf("got %q/%q, %v", o, r, err)
			}
		})
	}
}

func TestLoadSettings(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, json string
		want       forge.Settings
		err        string
	}{
		{name: "no section", json: `{"models":{}}`},
		{name: "section", json: `{"forge":{"url":"https://g.example","tokenEnv":"FORGE_PAT","wipPrefix":"Draft:"}}`,
			want: forge.Settings{URL: "https://g.example", TokenEnv: "FORGE_PAT", WIPPrefix: "Draft:"}},
		{name: "unknown key", json: `{"forge":{"urll":"x"}}`, err: `unknown field "urll"`},
		{name: "token in file", json: `{"forge":{"token":"abc"}}`, err: "token"},
		{name: "bad json", json: `{"forge":`, err: "config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".json")
			writeFile(t, p, tc.json)
			s, err := forge.LoadSettings(p)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), p) {
					t.Fatalf("err = %v, want %q naming the file", err, tc.err)
				}
				return
			}
			if err != nil || s.URL != tc.want.URL || s.TokenEnv != tc.want.TokenEnv || s.WIPPrefix != tc.want.WIPPrefix {
				t.Fatalf("got %+v, %v", s, err)
			}
		})
	}
}

func TestTransportRedacts(t *testing.T) {
	f := newFixture(t, fakegitea.Options{})
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	g, err := forge.NewGitea(ctx, forge.GiteaOptions{URL: f.fake.URL, Token: token, Owner: "acme", Repo: "widget", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Repository(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "auth=\"token [REDACTED]\"") || strings.Contains(logs.String(), token) {
		t.Fatalf("logs:\n%s", logs.String())
	}
}

// FindPR pages: the pull request it looks for is on the second page.
func TestFindPRPages(t *testing.T) {
	fake := fakegitea.New(fakegitea.Options{Token: token})
	t.Cleanup(fake.Close)
	br := map[string]string{"main": strings.Repeat("a", 40)}
	for i := 0; i < 55; i++ {
		br[fmt.Sprintf("work/t-%d", i)] = strings.Repeat("b", 40)
	}
	fake.AddRepo(fakegitea.Repo{Owner: "acme", Name: "widget", Branches: br})
	ctx := context.Background()
	g, err := forge.NewGitea(ctx, forge.GiteaOptions{URL: fake.URL, Token: token, Owner: "acme", Repo: "widget"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 55; i++ {
		if _, err := g.OpenPR(ctx, forge.PROpts{Head: fmt.Sprintf("work/t-%d", i), Base: "main", Title: "WIP: t"}); err != nil {
			t.Fatal(err)
		}
	}
	// Newest first: work/t-0 (#1) is on page 2.
	pr, err := g.FindPR(ctx, "work/t-0", "main")
	if err != nil || pr.Number != 1 || !pr.Existing {
		t.Fatalf("FindPR = %+v, %v", pr, err)
	}
	if _, err := g.FindPR(ctx, "work/none", "main"); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("FindPR(missing) = %v", err)
	}
}

// The token never appears in any process's argv: a git wrapper on PATH logs
// every invocation's arguments and whether its environment held the token.
func TestTokenNeverInArgv(t *testing.T) {
	f := newFixture(t, fakegitea.Options{})
	git(t, f.work, "remote", "set-url", "origin", f.fake.URL+"/acme/widget.git")
	realGit, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	logFile := filepath.Join(t.TempDir(), "argv.log")
	wrapper := "#!/bin/sh\n" +
		"printf '%s\\n' \"ARGV $*\" >> " + logFile + "\n" +
		"env | grep -q '^GIT_CONFIG_VALUE_0=Authorization' && printf 'ENV-CREDENTIAL %s\\n' \"$*\" >> " + logFile + "\n" +
		"exec " + realGit + " \"$@\"\n"
	writeFile(t, filepath.Join(bin, "git"), wrapper)
	if err := os.Chmod(filepath.Join(bin, "git"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if _, err := forge.OpenDraftPR(context.Background(), f.opts(token)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	if strings.Contains(log, token) || strings.Contains(log, basic(token)) {
		t.Fatalf("token in argv:\n%s", log)
	}
	var credentialed []string
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "ENV-CREDENTIAL ") {
			credentialed = append(credentialed, l)
		}
	}
	// Exactly one git process had the credential: the push (its
	// git-remote-http child inherits it from there, not from PATH).
	if len(credentialed) != 1 || !strings.Contains(credentialed[0], " push ") {
		t.Fatalf("processes with the credential: %q\nlog:\n%s", credentialed, log)
	}
}

func basic(tok string) string {
	return base64.StdEncoding.EncodeToString([]byte("conductor:" + tok))
}

// runtask (the worker) never imports the forge: the token cannot reach a
// worker through code.
func TestWorkerDoesNotImportForge(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go tool")
	}
	cmd := exec.Command("go", "list", "-e", "-deps", "-f", "{{.ImportPath}}", "github.com/conductor-dev/conductor/runtask/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/conductor-dev/conductor/runtask") {
		t.Fatalf("go list did not list runtask:\n%s", out)
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "github.com/conductor-dev/conductor/conductor/forge") || p == "code.gitea.io/sdk/gitea" {
			t.Fatalf("runtask depends on %s", p)
		}
	}
}

// The repository's remote.<name>.receivepack never runs: a file push always
// uses git-receive-pack.
func TestPushIgnoresReceivePackConfig(t *testing.T) {
	f := newFixture(t, fakegitea.Options{})
	marker := filepath.Join(t.TempDir(), "ran")
	git(t, f.work, "config", "remote.origin.receivepack", "touch "+marker+"; git-receive-pack")
	p := forge.Pusher{Git: f.local, Remote: "origin"}
	if _, err := p.Push(context.Background(), "work/t-1", forge.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("remote.origin.receivepack ran")
	}
	if got := f.remoteHas(t, "work/t-1"); got != f.tip {
		t.Fatalf("remote work/t-1 = %q", got)
	}
}
