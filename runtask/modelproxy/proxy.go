// Package modelproxy is the per-run model proxy: a small OpenAI-compatible
// reverse proxy on a unix socket that the sandbox binds in, so a runtime
// that talks to the model itself (an agent CLI such as pi) never holds the
// API key. The proxy is the one place the key is used: it forwards only
// the chat completion and model list endpoints to the one upstream it was
// made for, replaces whatever credentials the caller sent with the key,
// pins the model, holds the run's token budget and the alias's concurrency
// bound, and records the usage of every answer itself (streamed or not), so
// a run's token totals never depend on the runtime's honesty.
//
// modelproxy never logs or returns the key: errors and upstream bodies
// have it replaced by [REDACTED].
package modelproxy

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// Usage is token usage as the upstream reported it.
type Usage struct {
	PromptTokens     int64 `json:"promptTokens"`
	CompletionTokens int64 `json:"completionTokens"`
	TotalTokens      int64 `json:"totalTokens"`
	// Requests counts answered chat completions; Unreported those whose
	// answer carried no usage.
	Requests   int64 `json:"requests"`
	Unreported int64 `json:"unreported"`
}

// Limiter bounds concurrent requests to one alias (runtask.AliasLimiter).
type Limiter interface {
	Acquire(ctx context.Context) (release func(), err error)
}

// Options configure one run's proxy.
type Options struct {
	// Upstream is the server's OpenAI API root ending in /v1.
	Upstream string
	// Model is the model name every request is pinned to ("" keeps the
	// caller's).
	Model string
	// APIKey is sent as "Authorization: Bearer KEY" upstream ("" sends none).
	APIKey string
	// Budget is the run's token budget (total tokens; 0: none). A request
	// made once the recorded usage reaches it is refused with 429
	// insufficient_quota, without reaching the upstream.
	Budget int64
	// MaxRequests is the run's step limit (chat completions; 0: none): the
	// request past it is refused with 429 step_limit.
	MaxRequests int64
	// Limiter, when set, bounds concurrent upstream requests.
	Limiter Limiter
	// Transport reaches the upstream (default http.DefaultTransport).
	Transport http.RoundTripper
	// IdleTimeout ends an upstream answer after this long without a byte
	// (default 5 minutes).
	IdleTimeout time.Duration
	// OnUsage is called after every answered chat completion with its usage
	// (nil when the answer reported none).
	OnUsage func(u *Usage)
	Log     *slog.Logger
}

// maxRequestBytes bounds a request body from inside the sandbox.
const maxRequestBytes = 32 << 20

// Proxy is one run's model proxy.
type Proxy struct {
	opts     Options
	upstream *url.URL
	srv      *http.Server
	ln       net.Listener
	path     string

	mu      sync.Mutex
	usage   Usage
	refused string // the last refusal's type: insufficient_quota or step_limit
	started int64  // chat completions let through
}

// Listen starts a proxy on a new unix socket at path (mode 0666: the
// sandbox's unprivileged uid must be able to connect; put it in a folder
// only the run can reach).
func Listen(path string, opts Options) (*Proxy, error) {
	u, err := url.Parse(strings.TrimRight(opts.Upstream, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("model proxy: upstream %q is not an http(s) URL", opts.Upstream)
	}
	if u.User != nil {
		return nil, errors.New("model proxy: the upstream URL must not carry credentials")
	}
	if opts.Transport == nil {
		opts.Transport = http.DefaultTransport
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 5 * time.Minute
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("model proxy: %w", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("model proxy: %w", err)
	}
	p := &Proxy{opts: opts, upstream: u, ln: ln, path: path}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

// Path is the socket's path.
func (p *Proxy) Path() string { return p.path }

// Usage returns the usage recorded so far.
func (p *Proxy) Usage() Usage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.usage
}

// Close stops the proxy, ends requests in flight and removes the socket.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	os.Remove(p.path)
	return err
}

// ServeHTTP forwards the two endpoints a runtime needs, and refuses the rest.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case path == "/v1/chat/completions" && r.Method == http.MethodPost:
		p.chat(w, r)
	case path == "/v1/models" && r.Method == http.MethodGet:
		p.forward(w, r, nil, false)
	default:
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("the model proxy serves POST /v1/chat/completions and GET /v1/models only, not %s %s", r.Method, r.URL.Path))
	}
}

func (p *Proxy) chat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes+1))
	if err != nil || len(body) > maxRequestBytes {
		writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request body unreadable or larger than 32 MiB")
		return
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "the request is not a JSON object: "+err.Error())
		return
	}
	if p.opts.Model != "" {
		req["model"], _ = json.Marshal(p.opts.Model)
	}
	stream := string(bytes.TrimSpace(req["stream"])) == "true"
	if stream {
		// The usage chunk is what the proxy counts: always ask for it.
		req["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	}
	if typ, msg := p.admit(); typ != "" {
		writeError(w, http.StatusTooManyRequests, typ, msg)
		return
	}
	out, _ := json.Marshal(req)
	p.forward(w, r, out, true)
}

// admit counts a chat completion in, or says which limit refuses it.
func (p *Proxy) admit() (typ, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.opts.Budget > 0 && p.usage.TotalTokens >= p.opts.Budget:
		typ, msg = "insufficient_quota", fmt.Sprintf("the run's token budget of %d is spent (%d used)", p.opts.Budget, p.usage.TotalTokens)
	case p.opts.MaxRequests > 0 && p.started >= p.opts.MaxRequests:
		typ, msg = "step_limit", fmt.Sprintf("the run's step limit of %d model calls is reached", p.opts.MaxRequests)
	default:
		p.started++
		return "", ""
	}
	p.refused = typ
	return typ, msg
}

// Refused returns the type of the last refusal ("" when none): a runtime
// that stopped after one ran out of budget, not of work.
func (p *Proxy) Refused() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// forward sends one request upstream and copies the answer back, counting
// the usage of chat completions as it passes.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, body []byte, chat bool) {
	if p.opts.Limiter != nil {
		release, err := p.opts.Limiter.Acquire(r.Context())
		if err != nil {
			return // the caller went away while waiting
		}
		defer release()
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	idle := time.AfterFunc(p.opts.IdleTimeout, cancel)
	defer idle.Stop()

	target := *p.upstream
	target.Path = p.upstream.Path + strings.TrimPrefix(strings.TrimSuffix(r.URL.Path, "/"), "/v1")
	target.RawQuery = ""
	up, err := http.NewRequestWithContext(ctx, r.Method, target.String(), bytes.NewReader(body))
	if err != nil {
		writeError(w, http.StatusBadGateway, "proxy_error", "building the upstream request: "+p.redact(err.Error()))
		return
	}
	// Only what a chat request needs goes upstream: never the caller's
	// credentials, cookies or forwarding headers.
	up.Header.Set("Content-Type", "application/json")
	up.Header.Set("Accept", cmp.Or(r.Header.Get("Accept"), "application/json"))
	up.Header.Set("User-Agent", "conductor-model-proxy")
	if p.opts.APIKey != "" {
		up.Header.Set("Authorization", "Bearer "+p.opts.APIKey)
	}
	resp, err := p.opts.Transport.RoundTrip(up)
	if err != nil {
		p.log("model upstream unreachable", "error", p.redact(err.Error()))
		writeError(w, http.StatusBadGateway, "proxy_error", "the model server is unreachable: "+p.redact(err.Error()))
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Retry-After", "Retry-After-Ms", "Cache-Control"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	rd := &IdleReader{R: resp.Body, Timer: idle, Timeout: p.opts.IdleTimeout}
	if !chat || resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(rd, maxRequestBytes))
		w.Write([]byte(p.redact(string(b))))
		return
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		p.record(p.relayStream(w, flusher, rd))
		return
	}
	b, _ := io.ReadAll(io.LimitReader(rd, maxRequestBytes))
	w.Write(b)
	p.record(usageOf(b))
}

// relayStream copies an event stream line by line, flushing at every
// event, and returns the usage of the last chunk that carried one.
func (p *Proxy) relayStream(w io.Writer, flusher http.Flusher, r io.Reader) *Usage {
	var usage *Usage
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxRequestBytes)
	for sc.Scan() {
		line := sc.Bytes()
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if u := usageOf(bytes.TrimSpace(data)); u != nil {
				usage = u
			}
		}
		w.Write(line)
		w.Write([]byte("\n"))
		if len(line) == 0 && flusher != nil {
			flusher.Flush()
		}
	}
	if flusher != nil {
		flusher.Flush()
	}
	return usage
}

// usageOf reads the usage object of an answer or chunk (nil when absent).
func usageOf(b []byte) *Usage {
	var v struct {
		Usage *struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
			TotalTokens      int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(b, &v) != nil || v.Usage == nil {
		return nil
	}
	u := &Usage{PromptTokens: v.Usage.PromptTokens, CompletionTokens: v.Usage.CompletionTokens, TotalTokens: v.Usage.TotalTokens}
	if u.TotalTokens == 0 {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	return u
}

func (p *Proxy) record(u *Usage) {
	p.mu.Lock()
	p.usage.Requests++
	if u == nil {
		p.usage.Unreported++
	} else {
		p.usage.PromptTokens += u.PromptTokens
		p.usage.CompletionTokens += u.CompletionTokens
		p.usage.TotalTokens += u.TotalTokens
	}
	p.mu.Unlock()
	if p.opts.OnUsage != nil {
		p.opts.OnUsage(u)
	}
}

func (p *Proxy) redact(s string) string { return Redact(s, p.opts.APIKey) }

// Redact replaces every occurrence of secret in s with [REDACTED]: the one
// redaction of an API key, for the proxy and the model client alike.
func Redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[REDACTED]")
}

func (p *Proxy) log(msg string, args ...any) {
	if p.opts.Log != nil {
		p.opts.Log.Warn(msg, args...)
	}
}

// IdleReader reads R and pushes Timer back by Timeout on every read that
// returns data: with a timer that cancels the request, an answer ends only
// after Timeout without a byte, however long it takes in all.
type IdleReader struct {
	R       io.Reader
	Timer   *time.Timer
	Timeout time.Duration
}

func (ir *IdleReader) Read(b []byte) (int, error) {
	n, err := ir.R.Read(b)
	if n > 0 {
		ir.Timer.Reset(ir.Timeout)
	}
	return n, err
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": typ}})
}
