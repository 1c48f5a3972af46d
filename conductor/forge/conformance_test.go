package forge_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/conductor/forge/fakegitea"
)

// call is one API request conductor makes (or one of its failure cases).
type call struct {
	name   string
	method string
	path   string // {repo} is OWNER/widget, {owner} is OWNER
	tok    string // "good", "wrong", "read-only" or "" (anonymous)
	body   any
	// fields conductor (or the SDK for it) reads from the answer: they must
	// be present in both answers with the same JSON kind. For an array,
	// the fields of its first element.
	fields []string
}

// TestConformance sends the same requests to the double (fakegitea) and to
// the real Gitea, in the same state (repository OWNER/widget with main and
// work/t-1, issue #1), and checks that they answer with the same status
// codes, that every field conductor reads has the same JSON kind in both,
// and that the double invents no field the server does not send.
func TestConformance(t *testing.T) {
	t.Parallel()
	real := newRealFixture(t)
	if _, err := real.pusher(real.user.Token).Push(t.Context(), "work/t-1", pushOpts()); err != nil {
		t.Fatal(err)
	}
	if _, err := real.g.NewIssue(real.owner, "widget", "make it answer"); err != nil {
		t.Fatal(err)
	}
	readOnly, err := real.g.NewToken(real.user, "read:repository", "read:issue")
	if err != nil {
		t.Fatal(err)
	}

	const fakeRO = "read-only-T0KEN"
	fake := newFixture(t, fakegitea.Options{ReadToken: fakeRO})
	git(t, fake.work, "push", "--quiet", "origin", "work/t-1")
	if _, err := fake.fake.AddIssue("acme", "widget", "make it answer"); err != nil {
		t.Fatal(err)
	}

	pullFields := []string{"number", "html_url", "title", "state", "draft", "head.ref", "head.sha", "base.ref"}
	calls := []call{
		{name: "version", method: "GET", path: "/api/v1/version", tok: "good", fields: []string{"version"}},
		{name: "version, wrong token", method: "GET", path: "/api/v1/version", tok: "wrong", fields: []string{"message"}},
		{name: "repository", method: "GET", path: "/api/v1/repos/{repo}", tok: "good",
			fields: []string{"full_name", "default_branch", "html_url", "empty", "archived", "permissions.push"}},
		{name: "repository, anonymous", method: "GET", path: "/api/v1/repos/{repo}", fields: []string{"full_name"}},
		{name: "repository missing", method: "GET", path: "/api/v1/repos/{owner}/nope", tok: "good", fields: []string{"message"}},
		{name: "branch", method: "GET", path: "/api/v1/repos/{repo}/branches/main", tok: "good", fields: []string{"name", "commit.id"}},
		{name: "branch missing", method: "GET", path: "/api/v1/repos/{repo}/branches/nope", tok: "good", fields: []string{"message"}},
		{name: "issue", method: "GET", path: "/api/v1/repos/{repo}/issues/1", tok: "good", fields: []string{"number", "state", "title"}},
		{name: "issue missing", method: "GET", path: "/api/v1/repos/{repo}/issues/99", tok: "good", fields: []string{"message"}},
		{name: "write probe", method: "POST", path: "/api/v1/repos/{repo}/branches", tok: "good", body: map[string]any{}, fields: []string{"message"}},
		{name: "write probe, read-only token", method: "POST", path: "/api/v1/repos/{repo}/branches", tok: "read-only", body: map[string]any{}, fields: []string{"message"}},
		{name: "create pull", method: "POST", path: "/api/v1/repos/{repo}/pulls", tok: "good",
			body: map[string]any{"head": "work/t-1", "base": "main", "title": "WIP: Add Answer", "body": "b"}, fields: pullFields},
		{name: "create pull again", method: "POST", path: "/api/v1/repos/{repo}/pulls", tok: "good",
			body: map[string]any{"head": "work/t-1", "base": "main", "title": "WIP: Add Answer", "body": "b"}, fields: []string{"message"}},
		{name: "create pull, read-only token", method: "POST", path: "/api/v1/repos/{repo}/pulls", tok: "read-only",
			body: map[string]any{"head": "work/t-1", "base": "main", "title": "WIP: x"}, fields: []string{"message"}},
		{name: "create pull, anonymous", method: "POST", path: "/api/v1/repos/{repo}/pulls",
			body: map[string]any{"head": "work/t-1", "base": "main", "title": "WIP: x"}, fields: []string{"message"}},
		{name: "list pulls", method: "GET", path: "/api/v1/repos/{repo}/pulls?state=open&page=1&limit=50", tok: "good", fields: pullFields},
		{name: "comment", method: "POST", path: "/api/v1/repos/{repo}/issues/1/comments", tok: "good", body: map[string]any{"body": "landed"}, fields: []string{"id", "body"}},
		// Gitea answers a comment on a missing issue with 500 (conductor
		// looks the issue up first): the double does the same.
		{name: "comment on a missing issue", method: "POST", path: "/api/v1/repos/{repo}/issues/99/comments", tok: "good", body: map[string]any{"body": "landed"}},
		{name: "close issue", method: "PATCH", path: "/api/v1/repos/{repo}/issues/1", tok: "good", body: map[string]any{"state": "closed"}, fields: []string{"number", "state"}},
		{name: "close missing issue", method: "PATCH", path: "/api/v1/repos/{repo}/issues/99", tok: "good", body: map[string]any{"state": "closed"}, fields: []string{"message"}},
	}
	type server struct {
		url, owner string
		tokens     map[string]string
	}
	servers := []server{
		{real.g.URL, real.owner, map[string]string{"good": real.user.Token, "wrong": "wrong-token", "read-only": readOnly}},
		{fake.fake.URL, "acme", map[string]string{"good": token, "wrong": "wrong-token", "read-only": fakeRO}},
	}
	for _, c := range calls {
		var st [2]int
		var js [2]any
		for i, s := range servers {
			path := strings.NewReplacer("{repo}", s.owner+"/widget", "{owner}", s.owner).Replace(c.path)
			st[i], js[i] = send(t, s.url+path, c.method, s.tokens[c.tok], c.body)
		}
		if st[0] != st[1] {
			t.Errorf("%s: real Gitea answers %d, the double %d", c.name, st[0], st[1])
			continue
		}
		for _, f := range c.fields {
			kr, kf := kindAt(js[0], f), kindAt(js[1], f)
			if kr == "absent" || kr != kf {
				t.Errorf("%s (HTTP %d): field %s is %s on real Gitea, %s in the double", c.name, st[0], f, kr, kf)
			}
		}
		for _, k := range extraKeys(js[0], js[1]) {
			t.Errorf("%s (HTTP %d): the double sends %s, which real Gitea does not", c.name, st[0], k)
		}
	}
}

func send(t *testing.T, url, method, tok string, body any) (int, any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "token "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v any
	if len(bytes.TrimSpace(b)) > 0 && json.Unmarshal(b, &v) != nil {
		v = "non-JSON: " + string(b)
	}
	return resp.StatusCode, v
}

// kindAt is the JSON kind of a dotted field (of the first element of an
// array): "string", "number", "bool", "object", "array", "null" or "absent".
func kindAt(v any, path string) string {
	if a, ok := v.([]any); ok {
		if len(a) == 0 {
			return "absent"
		}
		v = a[0]
	}
	for _, p := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return "absent"
		}
		if v, ok = m[p]; !ok {
			return "absent"
		}
	}
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// extraKeys lists the top-level keys the double sends that real does not.
func extraKeys(real, fake any) []string {
	if a, ok := real.([]any); ok && len(a) > 0 {
		real = a[0]
	}
	if a, ok := fake.([]any); ok && len(a) > 0 {
		fake = a[0]
	}
	rm, _ := real.(map[string]any)
	fm, _ := fake.(map[string]any)
	var out []string
	for k := range fm {
		if _, ok := rm[k]; !ok && rm != nil {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func pushOpts() forge.PushOptions { return forge.PushOptions{} }
