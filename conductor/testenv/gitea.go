package testenv

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// GiteaVersion is the Gitea the tests run, built by scripts/gitea-build.sh
// from the Go module code.gitea.io/gitea.
const GiteaVersion = "1.27.3"

// GiteaCacheEnv names the folder holding gitea-VERSION/ (default
// /var/cache/conductor).
const GiteaCacheEnv = "CONDUCTOR_GITEA_CACHE"

// GiteaDir is where the built Gitea of GiteaVersion lives: the binary and the
// options/, templates/ and public/ folders it reads at run time.
func GiteaDir(getenv func(string) string) string {
	cache := getenv(GiteaCacheEnv)
	if cache == "" {
		cache = "/var/cache/conductor"
	}
	return filepath.Join(cache, "gitea-"+GiteaVersion)
}

// Gitea is this test binary's private Gitea server.
type Gitea struct {
	// URL is the base URL, no trailing slash (what GITEA_URL is set to).
	URL string
	// Admin is the site administrator and AdminToken its token (scope
	// all). Tests make users of their own (NewUser) rather than use it.
	Admin, AdminToken string

	dir    string
	bin    string
	user   string // the user Gitea runs as
	mu     sync.Mutex
	tokens map[string]string // token → its name, for RevokeToken
	err    error
	skip   string
	seq    atomic.Int64
}

var (
	giteaOnce sync.Once
	gt        Gitea
)

// GiteaServer returns this test binary's Gitea, starting it on first use: a
// build from the cache folder (GiteaDir; scripts/gitea-build.sh makes it),
// SQLite in a temp folder, 127.0.0.1 on a free port, no SSH, offline, run as
// the unprivileged user GiteaRunUser when the tests run as root (Gitea
// refuses root; the user is created on first use). The server stops when the test binary exits (a watchdog process
// stops it even when the binary is killed). Without the build the test is
// skipped, unless CI=true.
func GiteaServer(t testing.TB) *Gitea {
	t.Helper()
	if err := GiteaAvailable(); err != nil {
		var u *unavailableError
		if errors.As(err, &u) {
			unavailable(t, u.what)
		}
		t.Fatalf("testenv: Gitea: %v", err)
	}
	return &gt
}

// GiteaAvailable starts the server on first use and reports why it cannot
// run (an error wrapping what is missing), or nil. For harnesses with no
// testing.TB at hand (testscript setups); the server is then Shared().
func GiteaAvailable() error {
	giteaOnce.Do(func() { gt.start() })
	if gt.skip != "" {
		return &unavailableError{what: gt.skip}
	}
	return gt.err
}

// SharedGitea is the running server (call GiteaAvailable first).
func SharedGitea() *Gitea { return &gt }

func (g *Gitea) start() {
	home := GiteaDir(os.Getenv)
	g.bin = filepath.Join(home, "gitea")
	if _, err := os.Stat(g.bin); err != nil {
		g.skip = fmt.Sprintf("Gitea %s (%s; build it with scripts/gitea-build.sh)", GiteaVersion, g.bin)
		return
	}
	if _, err := exec.LookPath("git"); err != nil {
		g.skip = "git (Gitea needs it)"
		return
	}
	runUser, uid, gid := "", -1, -1
	if cur, err := user.Current(); err == nil {
		runUser = cur.Username
	}
	if os.Geteuid() == 0 {
		u, err := giteaUser()
		if err != nil {
			g.err = err
			return
		}
		runUser = u.Username
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	}
	g.user = runUser
	dir, err := os.MkdirTemp("", "conductor-gitea-")
	if err != nil {
		g.err = err
		return
	}
	g.dir = dir
	for _, sub := range []string{"custom/conf", "data", "log", "repos"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			g.err = err
			return
		}
	}
	port, err := freePort()
	if err != nil {
		g.err = err
		return
	}
	g.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
	conf := filepath.Join(dir, "custom", "conf", "app.ini")
	ini := fmt.Sprintf(`APP_NAME = conductor-test
RUN_USER = %[1]s
RUN_MODE = prod
WORK_PATH = %[2]s

[database]
DB_TYPE = sqlite3
PATH = %[2]s/data/gitea.db
SQLITE_JOURNAL_MODE = WAL

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = %[3]d
ROOT_URL = %[4]s/
DOMAIN = 127.0.0.1
DISABLE_SSH = true
START_SSH_SERVER = false
OFFLINE_MODE = true
LFS_START_SERVER = false
STATIC_ROOT_PATH = %[5]s
APP_DATA_PATH = %[2]s/data

[repository]
ROOT = %[2]s/repos

[security]
INSTALL_LOCK = true
SECRET_KEY = %[6]s
INTERNAL_TOKEN = %[7]s
PASSWORD_HASH_ALGO = pbkdf2_v2

[oauth2]
ENABLED = false

[service]
DISABLE_REGISTRATION = true
REQUIRE_SIGNIN_VIEW = false
DEFAULT_KEEP_EMAIL_PRIVATE = true

[mailer]
ENABLED = false

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[cron]
ENABLED = false

[cron.update_checker]
ENABLED = false

[session]
PROVIDER = memory

[cache]
ADAPTER = memory

[queue]
TYPE = channel

[log]
MODE = file
LEVEL = Warn
ROOT_PATH = %[2]s/log

[api]
MAX_RESPONSE_ITEMS = 50
DEFAULT_PAGING_NUM = 30
`, runUser, dir, port, g.URL, home, randHex(32), randHex(48))
	if err := os.WriteFile(conf, []byte(ini), 0o644); err != nil {
		g.err = err
		return
	}
	if uid >= 0 {
		err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Chown(p, uid, gid)
		})
		if err != nil {
			g.err = fmt.Errorf("chown %s: %w", dir, err)
			return
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		g.err = err
		return
	}
	cmd := g.command(uid, gid, "web", "--port", strconv.Itoa(port))
	logf, err := os.Create(filepath.Join(dir, "stdout.log"))
	if err != nil {
		g.err = err
		return
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		g.err = fmt.Errorf("start gitea: %w", err)
		return
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logf.Close() }()
	// The watchdog stops the server and removes the folder once this test
	// binary is gone, however it ends.
	stop := fmt.Sprintf(`while kill -0 %d 2>/dev/null; do sleep 0.5; done; kill -TERM -%d 2>/dev/null; sleep 1; kill -KILL -%d 2>/dev/null; rm -rf '%s'`,
		os.Getpid(), cmd.Process.Pid, cmd.Process.Pid, dir)
	wd := exec.Command("sh", "-c", stop)
	wd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := wd.Start(); err != nil {
		cmd.Process.Kill()
		g.err = fmt.Errorf("start Gitea watchdog: %w", err)
		return
	}
	go wd.Wait()

	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(g.URL + "/api/v1/version")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case err := <-exited:
			g.err = fmt.Errorf("gitea exited while starting (%v):\n%s", err, g.logs())
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			g.err = fmt.Errorf("gitea did not answer on %s within 60s:\n%s", g.URL, g.logs())
			return
		}
	}
	g.Admin = "conductor-admin"
	out, err := g.admin(uid, gid, "user", "create", "--admin", "--username", g.Admin,
		"--password", "admin-Passw0rd!", "--email", "admin@example.test", "--must-change-password=false")
	if err != nil {
		g.err = fmt.Errorf("gitea admin user create: %v\n%s", err, out)
		return
	}
	out, err = g.admin(uid, gid, "user", "generate-access-token", "--username", g.Admin,
		"--token-name", "admin", "--scopes", "all", "--raw")
	if err != nil {
		g.err = fmt.Errorf("gitea admin user generate-access-token: %v\n%s", err, out)
		return
	}
	g.AdminToken = strings.TrimSpace(lastLine(string(out)))
}

// GiteaRunUser is the system user the tests run Gitea as when they run as
// root (Gitea refuses root). It is a user of its own, never the sandbox's
// uid (65534 by default): RLIMIT_NPROC counts every process of a uid, and
// Gitea's threads would eat the sandboxed commands' process limit.
const GiteaRunUser = "conductor-gitea"

// giteaUser looks up GiteaRunUser, creating it (a system user without a
// home or a shell) when it does not exist yet.
func giteaUser() (*user.User, error) {
	if u, err := user.Lookup(GiteaRunUser); err == nil {
		return u, nil
	}
	add, err := exec.LookPath("useradd")
	if err != nil {
		return nil, fmt.Errorf("no user %q to run Gitea as, and no useradd to create it", GiteaRunUser)
	}
	out, err := exec.Command(add, "--system", "--no-create-home", "--home-dir", "/nonexistent",
		"--shell", "/usr/sbin/nologin", "--user-group", GiteaRunUser).CombinedOutput()
	if u, lerr := user.Lookup(GiteaRunUser); lerr == nil {
		return u, nil // made here, or by a test binary running beside this one
	}
	return nil, fmt.Errorf("useradd %s: %v: %s", GiteaRunUser, err, out)
}

func (g *Gitea) command(uid, gid int, args ...string) *exec.Cmd {
	conf := filepath.Join(g.dir, "custom", "conf", "app.ini")
	cmd := exec.Command(g.bin, append(args, "--config", conf, "--work-path", g.dir)...)
	cmd.Dir = g.dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Join(g.dir, "data"),
		"USER=" + g.user, "GITEA_WORK_DIR=" + g.dir, "LC_ALL=C", "TZ=UTC",
		"GIT_CONFIG_NOSYSTEM=1",
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if uid >= 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return cmd
}

func (g *Gitea) admin(uid, gid int, args ...string) ([]byte, error) {
	cmd := g.command(uid, gid, append([]string{"admin"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.Bytes(), err
	case <-ctx.Done():
		cmd.Process.Kill()
		<-done
		return out.Bytes(), ctx.Err()
	}
}

func (g *Gitea) logs() string {
	var b strings.Builder
	for _, f := range []string{"stdout.log", "log/gitea.log"} {
		if data, err := os.ReadFile(filepath.Join(g.dir, f)); err == nil {
			if len(data) > 8<<10 {
				data = data[len(data)-8<<10:]
			}
			fmt.Fprintf(&b, "--- %s\n%s", f, data)
		}
	}
	return b.String()
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func randHex(n int) string {
	b := make([]byte, n/2)
	crand.Read(b)
	return hex.EncodeToString(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// GiteaUser is a user on the server with a token.
type GiteaUser struct {
	Name     string
	Password string
	Token    string
}

// Unique returns a name no other caller in this test binary gets:
// prefix-<pid>-<n> (users, organisations and repositories share the
// server).
func (g *Gitea) Unique(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid()%100000, g.seq.Add(1))
}

// NewUser creates a user (not an administrator) and a token for it with
// the given scopes (none: "all"), e.g. "read:repository".
func (g *Gitea) NewUser(name string, scopes ...string) (GiteaUser, error) {
	u := GiteaUser{Name: name, Password: "Passw0rd!-" + randHex(8)}
	if _, err := g.Call("POST", "/api/v1/admin/users", g.AdminToken, map[string]any{
		"username": name, "email": name + "@example.test", "password": u.Password,
		"must_change_password": false, "visibility": "public",
	}, 201); err != nil {
		return u, err
	}
	tok, err := g.NewToken(u, scopes...)
	u.Token = tok
	return u, err
}

// NewToken makes another token for u with the given scopes (none: "all").
func (g *Gitea) NewToken(u GiteaUser, scopes ...string) (string, error) {
	if len(scopes) == 0 {
		scopes = []string{"all"}
	}
	name := "t-" + randHex(8)
	st, b, err := g.basic(u, "POST", "/api/v1/users/"+u.Name+"/tokens", map[string]any{"name": name, "scopes": scopes})
	if err != nil {
		return "", err
	}
	if st != 201 {
		return "", fmt.Errorf("create token for %s: HTTP %d: %s", u.Name, st, b)
	}
	var t struct {
		SHA1 string `json:"sha1"`
	}
	if err := json.Unmarshal(b, &t); err != nil || t.SHA1 == "" {
		return "", fmt.Errorf("create token for %s: %s", u.Name, b)
	}
	g.mu.Lock()
	if g.tokens == nil {
		g.tokens = map[string]string{}
	}
	g.tokens[t.SHA1] = name
	g.mu.Unlock()
	return t.SHA1, nil
}

// RevokeToken deletes a token NewToken made for u: the server then rejects
// it as it does an expired one (401).
func (g *Gitea) RevokeToken(u GiteaUser, token string) error {
	g.mu.Lock()
	name, ok := g.tokens[token]
	g.mu.Unlock()
	if !ok {
		return fmt.Errorf("revoke token: not one of %s's tokens made here", u.Name)
	}
	st, b, err := g.basic(u, "DELETE", "/api/v1/users/"+u.Name+"/tokens/"+name, nil)
	if err != nil {
		return err
	}
	if st != 204 {
		return fmt.Errorf("revoke token of %s: HTTP %d: %s", u.Name, st, b)
	}
	return nil
}

// basic sends a request authenticated with u's password (token management
// takes no token).
func (g *Gitea) basic(u GiteaUser, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, g.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Name+":"+u.Password)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// RepoOptions shape a new repository.
type RepoOptions struct {
	// AutoInit makes an initial commit (README) on DefaultBranch; without
	// it the repository is empty.
	AutoInit      bool
	DefaultBranch string // default "main"
	Private       bool
}

// NewRepo creates repository owner/name (owner: a user) as the site
// administrator.
func (g *Gitea) NewRepo(owner, name string, o RepoOptions) error {
	if o.DefaultBranch == "" {
		o.DefaultBranch = "main"
	}
	_, err := g.Call("POST", "/api/v1/admin/users/"+owner+"/repos", g.AdminToken, map[string]any{
		"name": name, "auto_init": o.AutoInit, "default_branch": o.DefaultBranch, "private": o.Private,
		"readme": "Default",
	}, 201)
	return err
}

// NewIssue opens an issue in owner/name and returns its number.
func (g *Gitea) NewIssue(owner, name, title string) (int64, error) {
	b, err := g.Call("POST", "/api/v1/repos/"+owner+"/"+name+"/issues", g.AdminToken, map[string]any{"title": title}, 201)
	if err != nil {
		return 0, err
	}
	var is struct {
		Number int64 `json:"number"`
	}
	if err := json.Unmarshal(b, &is); err != nil {
		return 0, err
	}
	return is.Number, nil
}

// Call sends one API request with token (may be "") and a JSON body (nil:
// none) and checks the status when want is not 0. It returns the body.
func (g *Gitea) Call(method, path, token string, body any, want int) ([]byte, error) {
	st, b, err := g.Do(method, path, token, body)
	if err != nil {
		return nil, err
	}
	if want != 0 && st != want {
		return b, fmt.Errorf("%s %s: HTTP %d (want %d): %s", method, path, st, want, b)
	}
	return b, nil
}

// Do sends one API request and returns the status and body.
func (g *Gitea) Do(method, path, token string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, g.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "token "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// WaitNotEmpty waits until the server no longer reports repository
// owner/name as empty: Gitea clears the flag after a first push in the
// background, and until then answers branch lookups with HTTP 500.
func (g *Gitea) WaitNotEmpty(full string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, b, err := g.Do("GET", "/api/v1/repos/"+full, g.AdminToken, nil)
		if err == nil && st == 200 && bytes.Contains(b, []byte(`"empty":false`)) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("repository %s still empty 30s after a push: HTTP %d %s %v", full, st, b, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
