// Package fakegitea is an in-process test double of the Gitea API subset the
// conductor uses, built from Gitea's published API (swagger) and its source:
// GET /api/v1/version, GET /repos/{owner}/{repo}, GET .../branches/{branch},
// GET/POST .../pulls, GET .../pulls/{index}, GET/PATCH .../issues/{index},
// POST .../issues/{index}/comments, plus git smart HTTP for repositories
// backed by a real bare repository (git http-backend as CGI).
//
// It checks the token like Gitea does (a wrong token is 401 "user does not
// exist [uid: 0, name: ]" on every API path; a write without a token is 401
// "token is required"), answers 404 "The target couldn't be found." for
// missing repositories, branches, pulls and issues, 409 "pull request already
// exists for these targets [...]" for a duplicate pull request, 422 when head
// equals base, 500 with an empty message for a comment on a missing issue
// (as Gitea 1.27 does), 403 for every write with the read-only token
// (Options.ReadToken), 422 for POST .../branches with an empty body (the
// write probe), and marks a pull request draft when its title starts with one
// of the work-in-progress prefixes (Gitea's default "WIP:" and "[WIP]",
// case-insensitive). Every request is recorded (never its Authorization
// header). It is a test double: it never runs outside tests. The real
// server is in the tests too (testenv.GiteaServer); TestConformance in
// package forge checks this double's status codes and JSON shapes against
// it. The double stays for what the real server cannot be made to do: a
// server before 1.22 without "draft", a development version string, other
// draft prefixes, counting requests.
package fakegitea

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configure a server.
type Options struct {
	// Token is the one valid access token ("" accepts none).
	Token string
	// Version is what /api/v1/version answers (default "1.22.3").
	Version string
	// WIPPrefixes mark drafts (default "WIP:", "[WIP]").
	WIPPrefixes []string
	// NoDraftField leaves "draft" out of pull request JSON, as servers
	// before 1.22 do.
	NoDraftField bool
	// ReadToken is a valid token with read-only scopes: every write with it
	// is 403, on the API and on git push, as Gitea answers a token without
	// write:repository.
	ReadToken string
	// CreatePullStatus, when set, is the status every pull request create
	// answers (fault injection: a server failing after the push).
	CreatePullStatus int
}

// Request is one recorded request.
type Request struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Query  string `json:"query,omitempty"`
	Status int    `json:"status"`
	// Auth is the authentication scheme used ("token", "basic", "bearer",
	// "query", or "" for none); the credential itself is never recorded.
	Auth string `json:"auth,omitempty"`
	Body string `json:"body,omitempty"`
}

// Repo is a repository on the fake server.
type Repo struct {
	Owner         string
	Name          string
	DefaultBranch string
	Private       bool
	Archived      bool
	// GitDir, when set, is a real bare repository: branches are its
	// refs/heads and it is served over git smart HTTP.
	GitDir string
	// Branches (name → sha) are used when GitDir is empty.
	Branches map[string]string

	id     int64
	pulls  []*Pull
	issues map[int64]*Issue
	next   int64 // next issue/pull index
}

// Pull is a pull request.
type Pull struct {
	Number int64
	Title  string
	Body   string
	Head   string
	Base   string
	State  string
	Draft  bool
}

// Issue is an issue.
type Issue struct {
	Number   int64
	Title    string
	State    string
	Comments []string
}

// Server is a running fake.
type Server struct {
	opts Options
	srv  *httptest.Server
	// URL is the base URL (no trailing slash), what GITEA_URL is set to.
	URL string

	mu       sync.Mutex
	repos    map[string]*Repo
	requests []Request
	nextID   int64
}

// New starts a server on loopback.
func New(o Options) *Server {
	if o.Version == "" {
		o.Version = "1.22.3"
	}
	if len(o.WIPPrefixes) == 0 {
		o.WIPPrefixes = []string{"WIP:", "[WIP]"}
	}
	s := &Server{opts: o, repos: map[string]*Repo{}, nextID: 1}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// AddRepo adds (or replaces) a repository.
func (s *Server) AddRepo(r Repo) *Repo {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.DefaultBranch == "" {
		r.DefaultBranch = "main"
	}
	if r.Branches == nil {
		r.Branches = map[string]string{}
	}
	r.issues = map[int64]*Issue{}
	r.next = 1
	r.id = s.nextID
	s.nextID++
	rp := &r
	s.repos[strings.ToLower(r.Owner+"/"+r.Name)] = rp
	return rp
}

// AddIssue opens an issue and returns its number.
func (s *Server) AddIssue(owner, name, title string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[strings.ToLower(owner+"/"+name)]
	if r == nil {
		return 0, fmt.Errorf("fakegitea: no repository %s/%s", owner, name)
	}
	n := r.next
	r.next++
	r.issues[n] = &Issue{Number: n, Title: title, State: "open"}
	return n, nil
}

// Requests returns the recorded requests.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Pulls returns a repository's pull requests.
func (s *Server) Pulls(owner, name string) []Pull {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[strings.ToLower(owner+"/"+name)]
	if r == nil {
		return nil
	}
	out := make([]Pull, 0, len(r.pulls))
	for _, p := range r.pulls {
		out = append(out, *p)
	}
	return out
}

// Issue returns a copy of an issue.
func (s *Server) Issue(owner, name string, n int64) (Issue, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[strings.ToLower(owner+"/"+name)]
	if r == nil || r.issues[n] == nil {
		return Issue{}, false
	}
	is := *r.issues[n]
	is.Comments = append([]string(nil), is.Comments...)
	return is, true
}

// statusWriter records the status code.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = 200
	}
	return w.ResponseWriter.Write(b)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	var body []byte
	if r.Body != nil && !strings.Contains(r.URL.Path, ".git/") {
		body, _ = io.ReadAll(io.LimitReader(r.Body, 1<<20))
		r.Body = io.NopCloser(strings.NewReader(string(body)))
	}
	auth, ok := s.authenticate(r)
	readOnly := strings.HasSuffix(auth, readOnlyMark)
	auth = strings.TrimSuffix(auth, readOnlyMark)
	if strings.HasPrefix(r.URL.Path, "/api/v1/") {
		s.api(sw, r, auth, ok, readOnly, body)
	} else {
		s.git(sw, r, auth, ok, readOnly)
	}
	q := r.URL.Query()
	q.Del("token")
	q.Del("access_token")
	rec := Request{Method: r.Method, Path: r.URL.Path, Query: q.Encode(), Status: sw.status, Auth: auth}
	if len(body) > 0 && len(body) < 64<<10 {
		rec.Body = string(body)
	}
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.mu.Unlock()
}

// authenticate returns the scheme used and whether the credential (if any)
// is valid. No credential is ("", true).
func (s *Server) authenticate(r *http.Request) (string, bool) {
	cred, scheme := "", ""
	if h := r.Header.Get("Authorization"); h != "" {
		sch, val, _ := strings.Cut(h, " ")
		scheme = strings.ToLower(sch)
		switch scheme {
		case "token", "bearer":
			cred = strings.TrimSpace(val)
		case "basic":
			dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(val))
			if err != nil {
				return scheme, false
			}
			user, pass, _ := strings.Cut(string(dec), ":")
			cred = pass
			if pass == "" || pass == "x-oauth-basic" {
				cred = user
			}
		default:
			return scheme, false
		}
	} else if t := r.URL.Query().Get("token"); t != "" {
		scheme, cred = "query", t
	} else if t := r.URL.Query().Get("access_token"); t != "" {
		scheme, cred = "query", t
	}
	if scheme == "" {
		return "", true
	}
	if s.opts.ReadToken != "" && cred == s.opts.ReadToken {
		return scheme + readOnlyMark, true
	}
	return scheme, s.opts.Token != "" && cred == s.opts.Token
}

// readOnlyMark is appended to the scheme authenticate returns for the
// read-only token (and stripped before it is recorded).
const readOnlyMark = "+ro"

func (s *Server) apiError(w http.ResponseWriter, status int, msg string, errs ...string) {
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.WriteHeader(status)
	// Gitea 1.27 sends only "message" and "url" (older servers added an
	// "errors" list to a 404; conductor reads neither).
	_ = errs
	json.NewEncoder(w).Encode(map[string]any{"message": msg, "url": s.URL + "/api/swagger"})
}

func (s *Server) notFound(w http.ResponseWriter, errs ...string) {
	s.apiError(w, http.StatusNotFound, "The target couldn't be found.", errs...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (s *Server) api(w http.ResponseWriter, r *http.Request, auth string, valid, readOnly bool, body []byte) {
	if auth != "" && !valid {
		s.apiError(w, http.StatusUnauthorized, "user does not exist [uid: 0, name: ]")
		return
	}
	signedIn := auth != ""
	parts := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, "/api/v1/"), "/"), "/")
	if len(parts) == 1 && parts[0] == "version" && r.Method == http.MethodGet {
		writeJSON(w, 200, map[string]string{"version": s.opts.Version})
		return
	}
	if len(parts) < 3 || parts[0] != "repos" {
		s.notFound(w)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	repo := s.repos[strings.ToLower(parts[1]+"/"+parts[2])]
	if repo == nil || (repo.Private && !signedIn) {
		s.notFound(w)
		return
	}
	rest := parts[3:]
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	if write && !signedIn {
		s.apiError(w, http.StatusUnauthorized, "token is required")
		return
	}
	if write && readOnly {
		s.apiError(w, http.StatusForbidden, "token does not have at least one of required scope(s): [write:repository]")
		return
	}
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		m := s.repoJSON(repo)
		if signedIn {
			// The user's permission: a read-only token scope does not
			// change it (the write probe above catches that).
			m["permissions"] = map[string]bool{"admin": true, "push": true, "pull": true}
		}
		writeJSON(w, 200, m)
	case len(rest) == 1 && rest[0] == "branches" && r.Method == http.MethodPost:
		// Creating a branch: the scope and write permission are checked
		// before the body, as in Gitea; conductor sends an empty body to
		// ask "may this token push?" (422 yes, 403 no, 423 archived).
		if repo.Archived {
			s.apiError(w, http.StatusLocked, "repo is archived")
			return
		}
		var form struct {
			New string `json:"new_branch_name"`
		}
		if json.Unmarshal(body, &form) != nil || form.New == "" {
			s.apiError(w, http.StatusUnprocessableEntity, "[NewBranchName]: Required")
			return
		}
		s.apiError(w, http.StatusNotImplemented, "fakegitea: creating branches is not implemented")
	case len(rest) >= 2 && rest[0] == "branches" && r.Method == http.MethodGet:
		name := strings.Join(rest[1:], "/")
		sha, ok := s.branchSHA(repo, name)
		if !ok {
			s.notFound(w, fmt.Sprintf("branch does not exist [name: %s]", name))
			return
		}
		writeJSON(w, 200, map[string]any{
			"name": name, "commit": map[string]any{"id": sha}, "protected": false,
			"user_can_push": true, "user_can_merge": true,
		})
	case len(rest) == 1 && rest[0] == "pulls" && r.Method == http.MethodGet:
		s.listPulls(w, r, repo)
	case len(rest) == 1 && rest[0] == "pulls" && r.Method == http.MethodPost:
		s.createPull(w, repo, body)
	case len(rest) == 2 && rest[0] == "pulls" && r.Method == http.MethodGet:
		n, _ := strconv.ParseInt(rest[1], 10, 64)
		for _, p := range repo.pulls {
			if p.Number == n {
				writeJSON(w, 200, s.pullJSON(repo, p))
				return
			}
		}
		s.notFound(w)
	case len(rest) == 2 && rest[0] == "issues" && (r.Method == http.MethodGet || r.Method == http.MethodPatch):
		n, _ := strconv.ParseInt(rest[1], 10, 64)
		is := repo.issues[n]
		if is == nil {
			s.notFound(w)
			return
		}
		if r.Method == http.MethodPatch {
			var edit struct {
				State *string `json:"state"`
				Title string  `json:"title"`
			}
			if err := json.Unmarshal(body, &edit); err != nil {
				s.apiError(w, http.StatusUnprocessableEntity, "invalid JSON: "+err.Error())
				return
			}
			if edit.State != nil {
				if *edit.State != "open" && *edit.State != "closed" {
					s.apiError(w, http.StatusUnprocessableEntity, "invalid state "+*edit.State)
					return
				}
				is.State = *edit.State
			}
			if edit.Title != "" {
				is.Title = edit.Title
			}
			writeJSON(w, http.StatusCreated, s.issueJSON(repo, is))
			return
		}
		writeJSON(w, 200, s.issueJSON(repo, is))
	case len(rest) == 3 && rest[0] == "issues" && rest[2] == "comments" && r.Method == http.MethodPost:
		n, _ := strconv.ParseInt(rest[1], 10, 64)
		is := repo.issues[n]
		if is == nil {
			// As Gitea 1.27 does: 500 with an empty message, not 404.
			s.apiError(w, http.StatusInternalServerError, "")
			return
		}
		var c struct {
			Body string `json:"body"`
		}
		if err := json.Unmarshal(body, &c); err != nil || c.Body == "" {
			s.apiError(w, http.StatusUnprocessableEntity, "[Body]: Required")
			return
		}
		is.Comments = append(is.Comments, c.Body)
		id := s.nextID
		s.nextID++
		writeJSON(w, http.StatusCreated, map[string]any{
			"id": id, "body": c.Body, "html_url": fmt.Sprintf("%s/%s/%s/issues/%d#issuecomment-%d", s.URL, repo.Owner, repo.Name, n, id),
			"issue_url": fmt.Sprintf("%s/%s/%s/issues/%d", s.URL, repo.Owner, repo.Name, n), "pull_request_url": "",
			"user": userJSON(), "created_at": now(), "updated_at": now(),
		})
	default:
		s.notFound(w)
	}
}

func now() string { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339) }

func userJSON() map[string]any {
	return map[string]any{"id": 1, "login": "conductor", "username": "conductor", "full_name": "", "email": "conductor@noreply.example"}
}

func (s *Server) repoJSON(r *Repo) map[string]any {
	return map[string]any{
		"id": r.id, "owner": map[string]any{"id": 1, "login": r.Owner, "username": r.Owner},
		"name": r.Name, "full_name": r.Owner + "/" + r.Name, "private": r.Private, "archived": r.Archived,
		"empty": false, "fork": false, "mirror": false, "default_branch": r.DefaultBranch,
		"html_url": s.URL + "/" + r.Owner + "/" + r.Name, "clone_url": s.URL + "/" + r.Owner + "/" + r.Name + ".git",
		"has_pull_requests": true, "has_issues": true,
	}
}

func (s *Server) branchSHA(r *Repo, name string) (string, bool) {
	if r.GitDir == "" {
		sha, ok := r.Branches[name]
		return sha, ok
	}
	cmd := exec.Command("git", "--git-dir="+r.GitDir, "rev-parse", "--verify", "--quiet", "refs/heads/"+name+"^{commit}")
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=/nonexistent", "PATH=/usr/bin:/bin:/usr/local/bin"}
	out, err := cmd.Output()
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(out)), true
}

func (s *Server) isDraft(title string) bool {
	for _, p := range s.opts.WIPPrefixes {
		if strings.HasPrefix(strings.ToUpper(title), strings.ToUpper(p)) {
			return true
		}
	}
	return false
}

func (s *Server) pullJSON(r *Repo, p *Pull) map[string]any {
	headSHA, _ := s.branchSHA(r, p.Head)
	baseSHA, _ := s.branchSHA(r, p.Base)
	branch := func(ref, sha string) map[string]any {
		return map[string]any{"label": ref, "ref": ref, "sha": sha, "repo_id": r.id, "repo": s.repoJSON(r)}
	}
	m := map[string]any{
		"id": r.id*1000 + p.Number, "url": fmt.Sprintf("%s/api/v1/repos/%s/%s/pulls/%d", s.URL, r.Owner, r.Name, p.Number),
		"number": p.Number, "user": userJSON(), "title": p.Title, "body": p.Body,
		"labels": []any{}, "milestone": nil, "assignee": nil, "assignees": nil,
		"requested_reviewers": nil, "state": p.State, "is_locked": false, "comments": 0,
		"html_url":  fmt.Sprintf("%s/%s/%s/pulls/%d", s.URL, r.Owner, r.Name, p.Number),
		"diff_url":  fmt.Sprintf("%s/%s/%s/pulls/%d.diff", s.URL, r.Owner, r.Name, p.Number),
		"patch_url": fmt.Sprintf("%s/%s/%s/pulls/%d.patch", s.URL, r.Owner, r.Name, p.Number),
		"mergeable": true, "merged": false, "merged_at": nil, "merge_commit_sha": nil, "merged_by": nil,
		"allow_maintainer_edit": false,
		"base":                  branch(p.Base, baseSHA), "head": branch(p.Head, headSHA), "merge_base": baseSHA,
		"due_date": nil, "created_at": now(), "updated_at": now(), "closed_at": nil,
	}
	if !s.opts.NoDraftField {
		m["draft"] = p.Draft
	}
	return m
}

func (s *Server) issueJSON(r *Repo, is *Issue) map[string]any {
	return map[string]any{
		"id": r.id*1000 + is.Number, "number": is.Number, "title": is.Title, "state": is.State,
		"html_url": fmt.Sprintf("%s/%s/%s/issues/%d", s.URL, r.Owner, r.Name, is.Number),
		"url":      fmt.Sprintf("%s/api/v1/repos/%s/%s/issues/%d", s.URL, r.Owner, r.Name, is.Number),
		"user":     userJSON(), "comments": len(is.Comments), "labels": []any{}, "created_at": now(), "updated_at": now(),
		"repository": map[string]any{"id": r.id, "name": r.Name, "owner": r.Owner, "full_name": r.Owner + "/" + r.Name},
	}
}

func (s *Server) listPulls(w http.ResponseWriter, r *http.Request, repo *Repo) {
	state := r.URL.Query().Get("state")
	if state == "" {
		state = "open"
	}
	page, _ := strconv.Atoi(r.URL.Query().Get("page"))
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	if page < 1 {
		page = 1
	}
	if limit < 1 || limit > 50 {
		limit = 50 // Gitea's default MAX_RESPONSE_ITEMS
	}
	var sel []*Pull
	for _, p := range repo.pulls {
		if state == "all" || p.State == state {
			sel = append(sel, p)
		}
	}
	sort.Slice(sel, func(i, j int) bool { return sel[i].Number > sel[j].Number })
	w.Header().Set("X-Total-Count", strconv.Itoa(len(sel)))
	start := (page - 1) * limit
	out := []any{}
	for i := start; i < len(sel) && i < start+limit; i++ {
		out = append(out, s.pullJSON(repo, sel[i]))
	}
	if start+limit < len(sel) {
		w.Header().Set("Link", fmt.Sprintf(`<%s%s?limit=%d&page=%d&state=%s>; rel="next"`, s.URL, r.URL.Path, limit, page+1, state))
	}
	writeJSON(w, 200, out)
}

func (s *Server) createPull(w http.ResponseWriter, repo *Repo, body []byte) {
	if st := s.opts.CreatePullStatus; st != 0 {
		s.apiError(w, st, "fakegitea: injected failure")
		return
	}
	if repo.Archived {
		s.apiError(w, http.StatusLocked, fmt.Sprintf("repo is archived: %s/%s", repo.Owner, repo.Name))
		return
	}
	var form struct {
		Head  string `json:"head"`
		Base  string `json:"base"`
		Title string `json:"title"`
		Body  string `json:"body"`
	}
	if err := json.Unmarshal(body, &form); err != nil {
		s.apiError(w, http.StatusUnprocessableEntity, "invalid JSON: "+err.Error())
		return
	}
	if strings.TrimSpace(form.Title) == "" {
		s.apiError(w, http.StatusUnprocessableEntity, "[Title]: Required")
		return
	}
	if form.Head == form.Base {
		s.apiError(w, http.StatusUnprocessableEntity, "Invalid PullRequest: There are no changes between the head and the base")
		return
	}
	head := form.Head
	if _, after, ok := strings.Cut(head, ":"); ok {
		head = after
	}
	if _, ok := s.branchSHA(repo, form.Base); !ok {
		s.notFound(w)
		return
	}
	if _, ok := s.branchSHA(repo, head); !ok {
		s.notFound(w)
		return
	}
	for _, p := range repo.pulls {
		if p.State == "open" && p.Head == head && p.Base == form.Base {
			s.apiError(w, http.StatusConflict, fmt.Sprintf(
				"pull request already exists for these targets [id: %d, issue_id: %d, head_repo_id: %d, base_repo_id: %d, head_branch: %s, base_branch: %s]",
				repo.id*1000+p.Number, p.Number, repo.id, repo.id, p.Head, p.Base))
			return
		}
	}
	p := &Pull{Number: repo.next, Title: form.Title, Body: form.Body, Head: head, Base: form.Base, State: "open", Draft: s.isDraft(form.Title)}
	repo.next++
	repo.pulls = append(repo.pulls, p)
	writeJSON(w, http.StatusCreated, s.pullJSON(repo, p))
}

// git serves /{owner}/{repo}.git/... over smart HTTP with git http-backend
// for repositories backed by a bare repository. Pushing needs the token
// (Basic auth, the token as password, as Gitea accepts).
func (s *Server) git(w http.ResponseWriter, r *http.Request, auth string, valid, readOnly bool) {
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 3)
	if len(parts) < 3 || !strings.HasSuffix(parts[1], ".git") {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	repo := s.repos[strings.ToLower(parts[0]+"/"+strings.TrimSuffix(parts[1], ".git"))]
	s.mu.Unlock()
	if repo == nil || repo.GitDir == "" {
		http.NotFound(w, r)
		return
	}
	push := r.URL.Query().Get("service") == "git-receive-pack" || strings.HasSuffix(r.URL.Path, "/git-receive-pack")
	if auth != "" && !valid || push && auth == "" {
		w.Header().Set("WWW-Authenticate", `Basic realm="Gitea"`)
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	if push && readOnly {
		http.Error(w, "Forbidden", http.StatusForbidden)
		return
	}
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		http.Error(w, "git --exec-path: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Root: "/" + parts[0] + "/" + parts[1],
		Env: []string{
			"GIT_PROJECT_ROOT=" + filepath.Dir(repo.GitDir),
			"GIT_HTTP_EXPORT_ALL=1",
			"REMOTE_USER=conductor",
			"GIT_CONFIG_NOSYSTEM=1",
			"GIT_CONFIG_GLOBAL=/dev/null",
			"HOME=/nonexistent",
			"PATH_INFO=/" + filepath.Base(repo.GitDir) + "/" + parts[2],
		},
	}
	h.ServeHTTP(w, r)
}
