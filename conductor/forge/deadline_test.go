package forge_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/conductor/forge/fakegitea"
)

// frozen is a server that accepts connections and requests and never
// answers, until the test ends.
func frozen(t *testing.T) *httptest.Server {
	t.Helper()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(stop); srv.Close() })
	return srv
}

// Against a frozen server every forge call and the push end with a clear
// error naming the URL and the timeout, never a hang.
func TestFrozenServer(t *testing.T) {
	srv := frozen(t)
	ctx := context.Background()
	const timeout = 300 * time.Millisecond

	t.Run("connect", func(t *testing.T) {
		_, err := forge.NewGitea(ctx, forge.GiteaOptions{URL: srv.URL, Token: token, Owner: "acme", Repo: "widget", Timeout: timeout})
		if !errors.Is(err, forge.ErrUnreachable) || !strings.Contains(err.Error(), srv.URL) || !strings.Contains(err.Error(), "no answer within 300ms") {
			t.Fatalf("err = %v", err)
		}
		if strings.Contains(err.Error(), token) {
			t.Fatal("token in the error")
		}
	})

	t.Run("pr open", func(t *testing.T) {
		f := newFixture(t, fakegitea.Options{})
		o := f.opts(token)
		o.Settings.URL = srv.URL
		o.Settings.Timeout = "300ms"
		_, err := forge.OpenDraftPR(ctx, o)
		if !errors.Is(err, forge.ErrUnreachable) || !strings.Contains(err.Error(), "no answer within 300ms") {
			t.Fatalf("err = %v", err)
		}
		if f.remoteHas(t, "work/t-1") != "" {
			t.Fatal("pushed")
		}
	})

	t.Run("push", func(t *testing.T) {
		f := newFixture(t, fakegitea.Options{})
		git(t, f.work, "remote", "set-url", "origin", srv.URL+"/acme/widget.git")
		p := forge.Pusher{Git: f.local, Remote: "origin", ForgeURL: srv.URL, Token: token, Timeout: timeout}
		_, err := p.Push(ctx, "work/t-1", forge.PushOptions{})
		if !errors.Is(err, forge.ErrUnreachable) || !strings.Contains(err.Error(), "no answer within 300ms") || !strings.Contains(err.Error(), srv.URL) {
			t.Fatalf("err = %v", err)
		}
		if strings.Contains(err.Error(), token) {
			t.Fatal("token in the error")
		}
	})

	t.Run("answers, then freezes", func(t *testing.T) {
		// The version probe answers; the repository lookup never does.
		fake := fakegitea.New(fakegitea.Options{Token: token})
		t.Cleanup(fake.Close)
		stop := make(chan struct{})
		half := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/api/v1/version" {
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(`{"version":"1.27.3"}`))
				return
			}
			select {
			case <-stop:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(func() { close(stop); half.Close() })
		g, err := forge.NewGitea(ctx, forge.GiteaOptions{URL: half.URL, Token: token, Owner: "acme", Repo: "widget", Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		_, err = g.Repository(ctx)
		if !errors.Is(err, forge.ErrUnreachable) || !strings.Contains(err.Error(), "no answer within 300ms") {
			t.Fatalf("err = %v", err)
		}
	})
}

// A URL that is not a Gitea API: one line naming the URL and what to check.
func TestNotAGitea(t *testing.T) {
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte("<!doctype html><title>welcome</title>"))
	}))
	t.Cleanup(html.Close)
	missing := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(missing.Close)
	tests := []struct {
		name, url string
		want      []string
	}{
		{"html page", html.URL, []string{html.URL, "not a Gitea API", "answered text/html, not JSON", "Gitea's base URL"}},
		{"wrong path", missing.URL + "/git", []string{missing.URL + "/git", "not a Gitea API", "answered 404", "base URL"}},
		{"https on an http port", strings.Replace(html.URL, "http://", "https://", 1), []string{"https://127.0.0.1", "plain HTTP on this port", "http://"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := forge.NewGitea(context.Background(), forge.GiteaOptions{URL: tc.url, Token: token, Owner: "acme", Repo: "widget", Timeout: 5 * time.Second})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line without the token: %q", err)
			}
		})
	}
}

// A token that may read but not push is refused up front (forge-forbidden),
// before anything is pushed; a push that meets a 403 anyway says the same.
func TestForbiddenToken(t *testing.T) {
	const ro = "read-only-T0KEN"
	f := newFixture(t, fakegitea.Options{ReadToken: ro})
	git(t, f.work, "remote", "set-url", "origin", f.fake.URL+"/acme/widget.git")
	_, err := forge.OpenDraftPR(context.Background(), f.opts(ro))
	if !errors.Is(err, forge.ErrForbidden) || !strings.Contains(err.Error(), "refused: forge-forbidden: the token cannot push to acme/widget") {
		t.Fatalf("err = %v", err)
	}
	if f.remoteHas(t, "work/t-1") != "" || len(f.fake.Pulls("acme", "widget")) != 0 {
		t.Fatal("something was done")
	}
	p := forge.Pusher{Git: f.local, Remote: "origin", ForgeURL: f.fake.URL, Token: ro}
	_, err = p.Push(context.Background(), "work/t-1", forge.PushOptions{})
	if !errors.Is(err, forge.ErrForbidden) || !strings.Contains(err.Error(), "forge-forbidden: the token cannot push to acme/widget") || strings.Contains(err.Error(), ro) {
		t.Fatalf("push err = %v", err)
	}
}

// A forge that fails after the push: the error says the branch was pushed
// and no pull request opened, so nothing is left half-done unreported.
func TestPushedButNoPR(t *testing.T) {
	f := newFixture(t, fakegitea.Options{CreatePullStatus: 500})
	_, err := forge.OpenDraftPR(context.Background(), f.opts(token))
	if err == nil || !strings.Contains(err.Error(), "pr open: pushed work/t-1 ("+f.tip[:12]+") to origin, but no pull request was opened") ||
		!strings.Contains(err.Error(), "HTTP 500") || !strings.Contains(err.Error(), "(run pr open again)") {
		t.Fatalf("err = %v", err)
	}
	if f.remoteHas(t, "work/t-1") != f.tip {
		t.Fatal("not pushed")
	}
}
