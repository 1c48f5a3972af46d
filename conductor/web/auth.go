package web

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Operator is a person who may change things through the web view: the name
// recorded as who decided, and the secret token that proves it.
type Operator struct {
	Name  string
	Token string
}

// ErrTokenRequired is returned when the server would listen on a
// non-loopback address with no operator token configured.
var ErrTokenRequired = errors.New("listening on a non-loopback address needs an operator token (--token-file or CONDUCTOR_SERVE_TOKEN)")

// MinTokenLen is the shortest operator token accepted.
const MinTokenLen = 16

var operatorName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$`)

// CheckOperators refuses operators without a usable name or token, and a
// token given twice (it could not say who decided).
func CheckOperators(ops []Operator) error {
	seen := map[string]string{}
	for i, o := range ops {
		if !operatorName.MatchString(o.Name) {
			return fmt.Errorf("operator %d: name %q: use letters, digits and . _ @ + - (at most 64)", i+1, o.Name)
		}
		if len(o.Token) < MinTokenLen {
			return fmt.Errorf("operator %s: the token is shorter than %d characters", o.Name, MinTokenLen)
		}
		if strings.ContainsAny(o.Token, " \t\r\n") {
			return fmt.Errorf("operator %s: the token contains white space", o.Name)
		}
		if prev, ok := seen[o.Token]; ok {
			return fmt.Errorf("operators %s and %s have the same token", prev, o.Name)
		}
		seen[o.Token] = o.Name
	}
	return nil
}

// LoadTokenFile reads operators from a file of `name:token` lines (blank
// lines and lines starting with # are ignored). Errors name the line, never
// the token.
func LoadTokenFile(path string) ([]Operator, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	return parseTokens(f, path)
}

// parseTokens reads name:token lines; path names the source in errors.
func parseTokens(r io.Reader, path string) ([]Operator, error) {
	var ops []Operator
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, token, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("token file %s:%d: want name:token", path, n)
		}
		ops = append(ops, Operator{Name: strings.TrimSpace(name), Token: strings.TrimSpace(token)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("token file %s: no name:token line", path)
	}
	if err := CheckOperators(ops); err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return ops, nil
}

// Loopback reports whether a listen address binds only the loopback
// interface (127.0.0.0/8, ::1 or localhost). An empty host binds every
// interface.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// loopbackHost reports whether a request's Host names this machine by a
// loopback name or address.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func strconvQuote(s string) string { return strconv.Quote(s) }

const (
	sessionCookie = "conductor_session"
	csrfField     = "csrf"
	sessionTTL    = 12 * time.Hour
)

type session struct {
	operator string
	csrf     string
	expires  time.Time
}

// auth holds the operators and the open browser sessions.
type auth struct {
	ops []Operator
	now func() time.Time

	mu       sync.Mutex
	sessions map[string]session // by the hash of the cookie value
}

func randomToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func hashKey(s string) string {
	h := sha256.Sum256([]byte(s))
	return string(h[:])
}

// operatorFor returns the operator a token names ("" when none). Every
// token is compared, in constant time.
func (a *auth) operatorFor(token string) string {
	name := ""
	for _, o := range a.ops {
		if subtle.ConstantTimeCompare([]byte(o.Token), []byte(token)) == 1 {
			name = o.Name
		}
	}
	return name
}

func (a *auth) open(operator string) (cookie string, s session) {
	cookie = randomToken()
	s = session{operator: operator, csrf: randomToken(), expires: a.now().Add(sessionTTL)}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	for k, v := range a.sessions {
		if now.After(v.expires) {
			delete(a.sessions, k)
		}
	}
	a.sessions[hashKey(cookie)] = s
	return cookie, s
}

func (a *auth) close(cookie string) {
	a.mu.Lock()
	delete(a.sessions, hashKey(cookie))
	a.mu.Unlock()
}

// sessionOf returns the request's browser session, if it has a live one.
func (a *auth) sessionOf(r *http.Request) (session, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return session{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sessions[hashKey(c.Value)]
	if !ok || a.now().After(s.expires) {
		return session{}, false
	}
	return s, true
}

// who is the request's authenticated operator: from a bearer token (no CSRF
// token needed: a browser never sends one by itself) or a session.
type who struct {
	operator string
	csrf     string // "" for a bearer request
	bearer   bool
}

func (a *auth) identify(r *http.Request) (who, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return who{}, false
		}
		if name := a.operatorFor(strings.TrimSpace(tok)); name != "" {
			return who{operator: name, bearer: true}, true
		}
		return who{}, false
	}
	if s, ok := a.sessionOf(r); ok {
		return who{operator: s.operator, csrf: s.csrf}, true
	}
	return who{}, false
}

// sameOrigin reports whether a state-changing request comes from a page of
// this server: its Origin (or, without one, its Referer) must name this
// host, and a browser's Sec-Fetch-Site must not say cross-site.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	src := r.Header.Get("Origin")
	if src == "" {
		src = r.Header.Get("Referer")
	}
	if src == "" {
		return true // not a browser (curl, a script with a bearer token)
	}
	if src == "null" {
		return false
	}
	u, err := url.Parse(src)
	if err != nil {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

// errForbidden is a refused mutation: the status and a sentence.
type errForbidden struct{ msg string }

func (e *errForbidden) Error() string { return e.msg }

// authorize checks a mutation: same origin, an operator, and for a browser
// session the form's CSRF token.
func (a *auth) authorize(r *http.Request) (who, error) {
	if !sameOrigin(r) {
		return who{}, &errForbidden{"refused: the request does not come from this server's pages (cross-origin)"}
	}
	if len(a.ops) == 0 {
		return who{}, &errForbidden{"refused: no operator token is configured, so nothing can be changed here (start conductor serve with --token-file or CONDUCTOR_SERVE_TOKEN)"}
	}
	w, ok := a.identify(r)
	if !ok {
		return who{}, &errForbidden{"refused: a valid operator token is required (log in, or send Authorization: Bearer TOKEN)"}
	}
	if !w.bearer {
		got := r.PostFormValue(csrfField)
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(w.csrf)) != 1 {
			return who{}, &errForbidden{"refused: the form's CSRF token is missing or wrong (reload the page and try again)"}
		}
	}
	return w, nil
}
