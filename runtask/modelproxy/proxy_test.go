package modelproxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/conductor-dev/conductor/runtask/fakellm"
	"github.com/conductor-dev/conductor/runtask/modelproxy"
)

const key = "sk-test-PROXYKEY-0123456789"

// start runs a scripted upstream that demands the key, and a proxy for it.
func start(t *testing.T, script string, opts modelproxy.Options) (*fakellm.Server, *modelproxy.Proxy, *http.Client) {
	t.Helper()
	sc, err := fakellm.Parse([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	sc.RequireBearer = key
	up := fakellm.Start(*sc)
	t.Cleanup(up.Close)
	opts.Upstream, opts.APIKey = up.URL(), key
	if opts.Model == "" {
		opts.Model = "pinned-model"
	}
	sock := filepath.Join(t.TempDir(), "llm.sock")
	p, err := modelproxy.Listen(sock, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	return up, p, c
}

func post(t *testing.T, c *http.Client, path, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:9/"+strings.TrimPrefix(path, "/"), strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const chat = `{"model":"whatever","messages":[{"role":"user","content":"hi"}]}`

func TestProxyAddsKeyPinsModelAndCounts(t *testing.T) {
	up, p, c := start(t, `[{"content":"one","usage":{"promptTokens":10,"completionTokens":3}},{"content":"two","usage":{"promptTokens":12,"completionTokens":5}}]`, modelproxy.Options{})
	// The caller's own credentials never reach the upstream.
	resp, body := post(t, c, "/v1/chat/completions", chat, map[string]string{"Authorization": "Bearer stolen", "Cookie": "s=1", "X-Api-Key": "x"})
	if resp.StatusCode != 200 || !strings.Contains(body, `"one"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	resp, body = post(t, c, "/v1/chat/completions", strings.Replace(chat, `}]}`, `}],"stream":true}`, 1), nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || !strings.Contains(body, "data: [DONE]") {
		t.Fatalf("stream: %d %s", resp.StatusCode, body)
	}
	for i, r := range up.Requests() {
		if got := r.Header.Get("Authorization"); got != "Bearer "+key {
			t.Errorf("request %d: Authorization %q", i, got)
		}
		if r.Header.Get("Cookie") != "" || r.Header.Get("X-Api-Key") != "" {
			t.Errorf("request %d forwarded the caller's headers: %v", i, r.Header)
		}
		if r.Body == nil || r.Body.Model != "pinned-model" {
			t.Errorf("request %d: model not pinned: %+v", i, r.Body)
		}
	}
	if sr := up.Requests()[1].Body; sr.StreamOptions == nil || !sr.StreamOptions.IncludeUsage {
		t.Errorf("the streamed request does not ask for usage: %+v", sr)
	}
	got := p.Usage()
	want := modelproxy.Usage{PromptTokens: 22, CompletionTokens: 8, TotalTokens: 30, Requests: 2}
	if got != want {
		t.Fatalf("usage %+v, want %+v", got, want)
	}
}

func TestProxyRefusesOtherEndpoints(t *testing.T) {
	up, _, c := start(t, `[{"content":"x"}]`, modelproxy.Options{})
	for _, path := range []string{"/v1/completions", "/v1/embeddings", "/admin", "/v1/chat/completions/../../x", "/"} {
		resp, body := post(t, c, path, chat, nil)
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "serves POST /v1/chat/completions") {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "http://x/v1/models", nil)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("models: %v %v", resp, err)
	}
	resp.Body.Close()
	if n := len(up.Requests()); n != 1 {
		t.Fatalf("upstream saw %d requests, want only the model list", n)
	}
}

func TestProxyBudget(t *testing.T) {
	up, p, c := start(t, `[{"content":"a","usage":{"promptTokens":60,"completionTokens":40}},{"content":"b"}]`, modelproxy.Options{Budget: 100})
	if resp, body := post(t, c, "/v1/chat/completions", chat, nil); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, body)
	}
	resp, body := post(t, c, "/v1/chat/completions", chat, nil)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "token budget of 100 is spent (100 used)") || !strings.Contains(body, "insufficient_quota") {
		t.Fatalf("over budget: %d %s", resp.StatusCode, body)
	}
	if n := len(up.Requests()); n != 1 || p.Usage().Requests != 1 || p.Refused() != "insufficient_quota" {
		t.Fatalf("a request past the budget reached the upstream: %d (refused %q)", n, p.Refused())
	}
}

func TestProxyNeverShowsTheKey(t *testing.T) {
	// An upstream that echoes the key in an error (some proxies do).
	_, _, c := start(t, `[{"error":{"status":500,"body":"upstream said `+key+`"}}]`, modelproxy.Options{})
	resp, body := post(t, c, "/v1/chat/completions", chat, nil)
	if resp.StatusCode != 500 || strings.Contains(body, key) || !strings.Contains(body, "[REDACTED]") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

type countingLimiter struct {
	mu        sync.Mutex
	cur, peak int
	slots     chan struct{}
}

func (l *countingLimiter) Acquire(ctx context.Context) (func(), error) {
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	l.mu.Lock()
	l.cur++
	l.peak = max(l.peak, l.cur)
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		l.cur--
		l.mu.Unlock()
		<-l.slots
	}, nil
}

func TestProxyLimiterAndStreamUsage(t *testing.T) {
	turns := make([]string, 6)
	for i := range turns {
		turns[i] = `{"content":"streamed answer","latencyMs":30,"usage":{"promptTokens":5,"completionTokens":2}}`
	}
	lim := &countingLimiter{slots: make(chan struct{}, 2)}
	var calls atomic.Int32
	_, p, c := start(t, `[`+strings.Join(turns, ",")+`]`, modelproxy.Options{Limiter: lim, OnUsage: func(*modelproxy.Usage) { calls.Add(1) }})
	var wg sync.WaitGroup
	for range turns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, body := post(t, c, "/v1/chat/completions", strings.Replace(chat, `}]}`, `}],"stream":true}`, 1), nil)
			if resp.StatusCode != 200 {
				t.Errorf("%d %s", resp.StatusCode, body)
			}
			// The stream arrives as events, each a JSON chunk.
			sc := bufio.NewScanner(strings.NewReader(body))
			for sc.Scan() {
				if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && d != "[DONE]" && !json.Valid([]byte(d)) {
					t.Errorf("chunk is not JSON: %q", d)
				}
			}
		}()
	}
	wg.Wait()
	if lim.peak > 2 || lim.peak == 0 {
		t.Fatalf("peak concurrency %d, bound 2", lim.peak)
	}
	if u := p.Usage(); u.TotalTokens != 42 || u.Requests != 6 || calls.Load() != 6 {
		t.Fatalf("usage %+v, OnUsage calls %d", u, calls.Load())
	}
}

func TestProxyStepLimit(t *testing.T) {
	up, p, c := start(t, `[{"content":"a"},{"content":"b"},{"content":"c"}]`, modelproxy.Options{MaxRequests: 2})
	for i := 0; i < 2; i++ {
		if resp, body := post(t, c, "/v1/chat/completions", chat, nil); resp.StatusCode != 200 {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, body)
		}
	}
	resp, body := post(t, c, "/v1/chat/completions", chat, nil)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "step limit of 2") || p.Refused() != "step_limit" {
		t.Fatalf("third call: %d %s (refused %q)", resp.StatusCode, body, p.Refused())
	}
	if n := len(up.Requests()); n != 2 {
		t.Fatalf("upstream saw %d requests", n)
	}
}
