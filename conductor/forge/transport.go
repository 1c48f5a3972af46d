package forge

import (
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Redacted replaces a secret wherever it appears in text shown to people.
const Redacted = "[REDACTED]"

// redactor removes one secret (and its common encodings) from strings.
type redactor struct{ secrets []string }

func newRedactor(secret string) redactor {
	if secret == "" {
		return redactor{}
	}
	return redactor{secrets: []string{secret, basicCredential(secret)}}
}

func (r redactor) String(s string) string {
	for _, sec := range r.secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
	}
	return s
}

// redactingError hides the secret in a wrapped error's message while keeping
// errors.Is/As working.
type redactingError struct {
	msg string
	err error
}

func (e *redactingError) Error() string { return e.msg }
func (e *redactingError) Unwrap() error { return e.err }

func (r redactor) Err(err error) error {
	if err == nil || len(r.secrets) == 0 {
		return err
	}
	msg := err.Error()
	red := r.String(msg)
	if red == msg {
		return err
	}
	return &redactingError{msg: red, err: err}
}

// Transport is the http.RoundTripper every forge request goes through. It
// logs each request (method, path, status, duration) at debug level with the
// token and Authorization header redacted, and remembers the last status so
// that callers which only get an error string back (the SDK's version probe)
// can still tell a 401 from a dead server.
type Transport struct {
	Base   http.RoundTripper
	Log    *slog.Logger
	red    redactor
	last   atomic.Int32
	ctype  atomic.Value // string: Content-Type of the last answer
	counts atomic.Int64
}

// NewTransport wraps base (nil: http.DefaultTransport) and redacts token.
func NewTransport(base http.RoundTripper, log *slog.Logger, token string) *Transport {
	if base == nil {
		base = http.DefaultTransport
	}
	return &Transport{Base: base, Log: log, red: newRedactor(token)}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	t.counts.Add(1)
	resp, err := t.Base.RoundTrip(req)
	target := t.red.String(req.URL.Redacted())
	if err != nil {
		t.last.Store(0)
		if t.Log != nil {
			t.Log.Debug("forge request failed", "method", req.Method, "url", target, "error", t.red.String(err.Error()))
		}
		return nil, t.red.Err(err)
	}
	t.last.Store(int32(resp.StatusCode))
	t.ctype.Store(resp.Header.Get("Content-Type"))
	if t.Log != nil {
		t.Log.Debug("forge request", "method", req.Method, "url", target, "status", resp.StatusCode,
			"auth", authScheme(req.Header.Get("Authorization")), "duration", time.Since(start).Round(time.Millisecond))
	}
	return resp, nil
}

// LastStatus is the HTTP status of the last answered request (0: none).
func (t *Transport) LastStatus() int { return int(t.last.Load()) }

// LastContentType is the Content-Type of the last answered request.
func (t *Transport) LastContentType() string {
	s, _ := t.ctype.Load().(string)
	return s
}

// Requests is the number of requests sent.
func (t *Transport) Requests() int64 { return t.counts.Load() }

// authScheme shows only the scheme of an Authorization header.
func authScheme(h string) string {
	if h == "" {
		return "none"
	}
	scheme, _, _ := strings.Cut(h, " ")
	return scheme + " " + Redacted
}
