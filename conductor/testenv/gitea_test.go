package testenv_test

import (
	"strings"
	"testing"

	"github.com/conductor-dev/conductor/conductor/testenv"
)

// The harness starts a real Gitea that answers its version, makes users
// with tokens and repositories.
func TestGitea(t *testing.T) {
	g := testenv.GiteaServer(t)
	b, err := g.Call("GET", "/api/v1/version", "", nil, 200)
	if err != nil || !strings.Contains(string(b), `"version":"`+testenv.GiteaVersion+`"`) {
		t.Fatalf("version: %s, %v", b, err)
	}
	u, err := g.NewUser(g.Unique("u"))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.NewRepo(u.Name, "widget", testenv.RepoOptions{AutoInit: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Call("GET", "/api/v1/repos/"+u.Name+"/widget/branches/main", u.Token, nil, 200); err != nil {
		t.Fatal(err)
	}
}
