package runtask

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/conductor-dev/conductor/conductor/ctxwait"
	"github.com/conductor-dev/conductor/runtask/modelproxy"
)

// Response headers the quirk transport adds for Complete.
const (
	hdrUsageAbsent = "X-Conductor-Usage-Absent"
	hdrFixes       = "X-Conductor-Fixes"
	hdrFinishRaw   = "X-Conductor-Finish-Reason"
)

// maxAnswerBytes bounds a model answer read into memory.
const maxAnswerBytes = 32 << 20

// ModelError is a failed model call. Its message never contains the API
// key: every text from the server or the network is redacted first.
type ModelError struct {
	Alias    string
	URL      string // base URL
	Status   int    // HTTP status; 0 when no answer came
	Attempts int    // attempts made
	Msg      string // redacted
}

// Outside reports a failure of the server, not of the request: no answer
// came (unreachable, reset), or a status worth retrying later (429, 5xx).
func (e *ModelError) Outside() bool { return e.Status == 0 || retryableStatus(e.Status) }

func (e *ModelError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "model %s (%s)", e.Alias, e.URL)
	if e.Status != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.Status)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " after %d attempts", e.Attempts)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Retryable reports whether the failure was of a kind retried (429, 5xx,
// network); after the attempts ran out.
func (e *ModelError) Retryable() bool { return e.Status == 0 || retryableStatus(e.Status) }

// ClientOption configures NewClient.
type ClientOption func(*clientOptions)

type clientOptions struct {
	transport http.RoundTripper
	logger    *slog.Logger
	sleep     func(ctx context.Context, d time.Duration) error
	now       func() time.Time
	slots     ModelSlots
	slotKeep  time.Duration
}

// ModelSlots bounds the requests to a model alias across processes and
// hosts (the conductor passes a semaphore in Redis or the bus store):
// Acquire waits until the caller holds one of max slots of alias, or ctx
// ends; release frees it. An outage of the semaphore's store is waited out
// inside Acquire: its only error is ctx's.
type ModelSlots interface {
	Acquire(ctx context.Context, alias string, max int) (release func(), err error)
}

// WithSlots makes every request to an alias with a maxConcurrent hold one
// of its slots in s too (after the process-wide Limiter).
func WithSlots(s ModelSlots) ClientOption {
	return func(o *clientOptions) { o.slots = s }
}

// modelTransport is every model client's connection pool: Go's default
// transport keeps only two idle connections per host, so with more
// requests than that in flight to one server (a worker's concurrent runs)
// the rest were closed after each answer and dialled again for the next.
var modelTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return t
}()

// WithTransport sets the base transport (default: one pool shared by the
// process's model clients, keeping up to 64 idle connections per server).
func WithTransport(rt http.RoundTripper) ClientOption {
	return func(o *clientOptions) { o.transport = rt }
}

// WithLogger logs every model request (method, URL, status, duration,
// attempt, quirk fixes) at debug level and retries at warn level. Headers
// are never logged; the API key is added below the logging layer.
func WithLogger(l *slog.Logger) ClientOption {
	return func(o *clientOptions) { o.logger = l }
}

// withSlotKeep sets how long a reply's slot is kept (tests).
func withSlotKeep(d time.Duration) ClientOption {
	return func(o *clientOptions) { o.slotKeep = d }
}

// withSleep replaces the retry wait (tests).
func withSleep(f func(ctx context.Context, d time.Duration) error) ClientOption {
	return func(o *clientOptions) { o.sleep = f }
}

// httpClient is an OpenAI-compatible server behind go-openai.
type httpClient struct {
	spec     ModelSpec
	api      *openai.Client
	limiter  *AliasLimiter
	slots    ModelSlots // nil: the bound holds in this process only
	secret   string
	freeing  sync.WaitGroup // slots kept or still being given back (Drain)
	slotKeep time.Duration  // how long a reply's slot is kept (SlotKeep)
	mu       sync.Mutex
	kept     *keptSlot // the last reply's slot, kept for the next request
}

// SlotKeep is how long a reply's model slot is kept for the request that
// follows it. A step of file tools takes a few milliseconds: its next
// request reuses the slot instead of giving it back to the store and
// taking it again, two round trips to Redis (or the bus store) on the way
// between the reply and the next request. A step that runs longer (a
// command) gives it back after this long. A kept slot is held with no
// request out, so the bound on requests in flight holds as before; a run
// gives its kept slot back when it ends (Drain).
const SlotKeep = 100 * time.Millisecond

// keptSlot is a slot held between a reply and the next request.
type keptSlot struct {
	free  func()
	timer *time.Timer
}

// unkeep takes the kept slot (nil: none) from its timer: the timer's
// give-back finds it gone and does nothing.
func (c *httpClient) unkeep() *keptSlot {
	c.mu.Lock()
	k := c.kept
	c.kept = nil
	c.mu.Unlock()
	if k != nil {
		k.timer.Stop()
	}
	return k
}

// takeKept returns the kept slot for a new request (nil: none kept).
func (c *httpClient) takeKept() func() {
	k := c.unkeep()
	if k == nil {
		return nil
	}
	c.freeing.Done()
	return k.free
}

// keep holds a replied request's slot for SlotKeep, then gives it back in
// the background. A slot already kept (requests at once) goes back now.
func (c *httpClient) keep(free func()) {
	c.freeing.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kept != nil || c.slotKeep <= 0 {
		go c.giveBack(free)
		return
	}
	k := &keptSlot{free: free}
	k.timer = time.AfterFunc(c.slotKeep, func() {
		if c.dropKept(k) {
			c.giveBack(free)
		}
	})
	c.kept = k
}

// dropKept unkeeps k if it is still the kept slot.
func (c *httpClient) dropKept(k *keptSlot) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kept != k {
		return false
	}
	c.kept = nil
	return true
}

func (c *httpClient) giveBack(free func()) {
	defer c.freeing.Done()
	free()
}

// NewClient returns the model client of spec: the replay model for
// "replay:FILE", else a go-openai client for spec.BaseURL. The API key is
// read here, and only here, from getenv(spec.APIKeyEnv); a named but unset
// variable is an error. Requests to one alias are bounded process-wide by
// spec.MaxConcurrent (see Limiter).
func NewClient(spec ModelSpec, getenv func(string) string, opts ...ClientOption) (ModelClient, error) {
	if spec.IsReplay() {
		return NewReplay(spec.ReplayFile, opts...)
	}
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("model %s: %w", spec.Alias, err)
	}
	var key string
	if spec.APIKeyEnv != "" {
		key = getenv(spec.APIKeyEnv)
		if key == "" {
			return nil, fmt.Errorf("model %s: the API key variable %s is not set (set it, or clear apiKeyEnv for a server without keys)", spec.Alias, spec.APIKeyEnv)
		}
	}
	o := clientOptions{transport: modelTransport, sleep: sleepCtx, now: time.Now, slotKeep: SlotKeep}
	for _, f := range opts {
		f(&o)
	}
	lim := Limiter(spec.Alias)
	lim.SetMax(spec.MaxConcurrent)
	return newHTTPClient(spec, key, lim, o), nil
}

func newHTTPClient(spec ModelSpec, key string, lim *AliasLimiter, o clientOptions) *httpClient {
	var rt http.RoundTripper = &authTransport{next: o.transport, key: key}
	rt = &retryTransport{
		next: rt, attempts: max(spec.MaxAttempts, 1), base: spec.RetryBase, cap: spec.RetryMax,
		timeout: spec.Timeout, stream: spec.Stream, sleep: o.sleep, now: o.now, log: o.logger, alias: spec.Alias, secret: key,
	}
	rt = &quirkTransport{next: rt, temperature: spec.Temperature, stream: spec.Stream}
	if o.logger != nil {
		rt = &logTransport{next: rt, log: o.logger, alias: spec.Alias, secret: key}
	}
	cfg := openai.DefaultConfig("") // the key is added by authTransport, below logging
	cfg.BaseURL = strings.TrimRight(spec.BaseURL, "/")
	cfg.HTTPClient = &http.Client{Transport: rt}
	return &httpClient{spec: spec, api: openai.NewClientWithConfig(cfg), limiter: lim, slots: o.slots, slotKeep: o.slotKeep, secret: key}
}

// Complete sends one chat completion request and returns the normalised
// reply.
func (c *httpClient) Complete(ctx context.Context, req ModelRequest) (ModelReply, error) {
	release, err := c.limiter.Acquire(ctx)
	if err != nil {
		return ModelReply{}, fmt.Errorf("model %s: waiting for a free slot: %w", c.spec.Alias, err)
	}
	defer release()
	if c.slots != nil && c.spec.MaxConcurrent > 0 {
		free := c.takeKept()
		if free == nil {
			// The last request's slot is back first: this client never
			// competes with itself for one.
			c.freeing.Wait()
			free, err = c.slots.Acquire(ctx, c.spec.Alias, c.spec.MaxConcurrent)
			if err != nil {
				return ModelReply{}, fmt.Errorf("model %s: waiting for a free slot: %w", c.spec.Alias, err)
			}
		}
		// Kept for the next request, else given back behind the reply:
		// the store's answers are not on the way to the next step.
		defer c.keep(free)
	}
	creq := openai.ChatCompletionRequest{
		Model:    c.spec.Model,
		Messages: req.Messages,
		Tools:    req.Tools,
	}
	if reasoningModel(c.spec.Model) {
		// OpenAI's reasoning models refuse max_tokens; local servers may
		// not know max_completion_tokens.
		creq.MaxCompletionTokens = c.spec.MaxTokens
	} else {
		//lint:ignore SA1019 local OpenAI-compatible servers read max_tokens, not max_completion_tokens
		creq.MaxTokens = c.spec.MaxTokens
	}
	resp, err := c.api.CreateChatCompletion(ctx, creq)
	if err != nil {
		return ModelReply{}, c.wrapError(ctx, err)
	}
	if len(resp.Choices) == 0 {
		return ModelReply{}, &ModelError{Alias: c.spec.Alias, URL: c.spec.BaseURL, Msg: "the answer has no choices"}
	}
	ch := resp.Choices[0]
	reply := ModelReply{
		Message:      ch.Message,
		FinishReason: string(ch.FinishReason),
		Model:        resp.Model,
	}
	if reply.Message.Role == "" {
		reply.Message.Role = openai.ChatMessageRoleAssistant
	}
	h := resp.Header()
	if h.Get(hdrUsageAbsent) == "" {
		reply.Usage = &Usage{
			PromptTokens:     int64(resp.Usage.PromptTokens),
			CompletionTokens: int64(resp.Usage.CompletionTokens),
			TotalTokens:      int64(resp.Usage.TotalTokens),
		}
		if reply.Usage.TotalTokens == 0 {
			reply.Usage.TotalTokens = reply.Usage.PromptTokens + reply.Usage.CompletionTokens
		}
	}
	if f := h.Get(hdrFixes); f != "" {
		reply.Quirks = strings.Split(f, ",")
	}
	return reply, nil
}

// Drain gives back the kept slot and waits until the slots of the client's
// finished requests are back in the store (a run waits for it before it
// returns).
func (c *httpClient) Drain() {
	if k := c.unkeep(); k != nil {
		c.giveBack(k.free)
	}
	c.freeing.Wait()
}

// reasoningModel reports OpenAI model names that take max_completion_tokens.
func reasoningModel(model string) bool {
	for _, p := range []string{"o1", "o3", "o4", "gpt-5", "gpt-6"} {
		if strings.HasPrefix(model, p) {
			return true
		}
	}
	return false
}

// wrapError turns a go-openai or transport error into a *ModelError with
// the key redacted; a cancelled or expired ctx stays recognisable with
// errors.Is.
func (c *httpClient) wrapError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("model %s: %w", c.spec.Alias, ctxErr)
	}
	me := &ModelError{Alias: c.spec.Alias, URL: c.spec.BaseURL, Attempts: 1}
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	var nj *notJSONError
	var ans *answerError
	var ae *attemptsError
	if errors.As(err, &ae) {
		me.Attempts = ae.attempts
		err = ae.err
	}
	switch {
	case errors.As(err, &nj):
		me.Status = nj.status
		me.Msg = nj.Error()
	case errors.As(err, &ans):
		me.Status = ans.status
		me.Msg = ans.Error()
	case errors.As(err, &apiErr):
		me.Status = apiErr.HTTPStatusCode
		me.Msg = apiErr.Message
		if apiErr.Type != "" {
			me.Msg += " (" + apiErr.Type + ")"
		}
	case errors.As(err, &reqErr):
		me.Status = reqErr.HTTPStatusCode
		me.Msg = "answer: " + strconv.Quote(snippet(reqErr.Body, 300))
	default:
		me.Msg = err.Error()
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) {
			// *url.Error repeats method and URL; keep the cause.
			if inner := ue.Unwrap(); inner != nil && strings.HasPrefix(me.Msg, "Post ") {
				me.Msg = inner.Error()
			}
		}
		if strings.Contains(me.Msg, "invalid character") || strings.Contains(me.Msg, "cannot unmarshal") {
			me.Msg = "answer is not a chat completion: " + me.Msg
		}
	}
	if me.Status != 0 && retryableStatus(me.Status) {
		me.Attempts = max(me.Attempts, c.spec.MaxAttempts)
	}
	me.Msg = redactSecret(me.Msg, c.secret)
	return me
}

// redactSecret removes secret from s (modelproxy.Redact).
func redactSecret(s, secret string) string { return modelproxy.Redact(s, secret) }

// authTransport adds the API key, as the last layer before the network so
// no other layer (logging, errors) ever holds it in a request.
type authTransport struct {
	next http.RoundTripper
	key  string
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.key == "" {
		return t.next.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+t.key)
	return t.next.RoundTrip(r)
}

// logTransport logs each request without headers, errors redacted.
type logTransport struct {
	next   http.RoundTripper
	log    *slog.Logger
	alias  string
	secret string
}

func (t *logTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	attrs := []any{"alias", t.alias, "method", req.Method, "url", redactSecret(req.URL.Redacted(), t.secret), "duration", time.Since(start).Round(time.Millisecond)}
	if err != nil {
		t.log.Debug("model request failed", append(attrs, "error", redactSecret(err.Error(), t.secret))...)
		return nil, err
	}
	attrs = append(attrs, "status", resp.StatusCode)
	if f := resp.Header.Get(hdrFixes); f != "" {
		attrs = append(attrs, "fixes", f)
	}
	t.log.Debug("model request", attrs...)
	return resp, nil
}

// quirkTransport normalises chat completion requests and answers (see
// normalizeChatRequest and normalizeChatResponse) so go-openai decodes
// what any server sends.
type quirkTransport struct {
	next        http.RoundTripper
	temperature *float64
	stream      bool
}

func (t *quirkTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/chat/completions") || req.Body == nil {
		return t.next.RoundTrip(req)
	}
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	body, info, reqFixes, err := normalizeChatRequest(body, t.temperature, t.stream)
	if err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp, nil // go-openai reads the error
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if !json.Valid(raw) {
		return nil, &notJSONError{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), snippet: snippet(raw, 200)}
	}
	out, rinfo, err := normalizeChatResponse(raw, info)
	if err != nil {
		return nil, &answerError{status: resp.StatusCode, msg: err.Error()}
	}
	h := resp.Header.Clone()
	h.Del("Content-Length")
	if !rinfo.usagePresent {
		h.Set(hdrUsageAbsent, "1")
	}
	if fixes := append(append([]string(nil), reqFixes...), rinfo.fixes...); len(fixes) > 0 {
		h.Set(hdrFixes, strings.Join(fixes, ","))
	}
	h.Set(hdrFinishRaw, rinfo.finishRaw)
	nr := *resp
	nr.Header = h
	nr.Body = io.NopCloser(bytes.NewReader(out))
	nr.ContentLength = int64(len(out))
	return &nr, nil
}

// readBody reads and closes a request's body, in one buffer of its
// declared length when it has one (a conversation's request is read again
// at each layer, on every step).
func readBody(req *http.Request) ([]byte, error) {
	defer req.Body.Close()
	var b bytes.Buffer
	if n := req.ContentLength; n > 0 && n <= 64<<20 {
		b.Grow(int(n) + bytes.MinRead) // room for the read that meets the end
	}
	_, err := b.ReadFrom(req.Body)
	return b.Bytes(), err
}

// answerError is a 2xx JSON answer that is not a usable chat completion.
type answerError struct {
	status int
	msg    string
}

func (e *answerError) Error() string { return e.msg }

// attemptsError carries how many attempts a failed request made.
type attemptsError struct {
	attempts int
	err      error
}

func (e *attemptsError) Error() string { return e.err.Error() }
func (e *attemptsError) Unwrap() error { return e.err }

// retryTransport retries 429, 5xx (but 501 and 505) and network errors
// with bounded exponential backoff and jitter, honouring Retry-After (and
// retry-after-ms) up to the cap. Each attempt has its own timeout; the
// request's context cancels the wait. The answer is read into memory.
type retryTransport struct {
	next     http.RoundTripper
	attempts int
	base     time.Duration
	cap      time.Duration
	timeout  time.Duration
	stream   bool // requests ask for server-sent events; timeout is an idle timeout
	sleep    func(ctx context.Context, d time.Duration) error
	now      func() time.Time
	log      *slog.Logger
	alias    string
	secret   string
}

func retryableStatus(code int) bool {
	return code == http.StatusTooManyRequests || (code >= 500 && code != http.StatusNotImplemented && code != http.StatusHTTPVersionNotSupported)
}

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := readBody(req)
		if err != nil {
			return nil, err
		}
		body = b
	}
	ctx := req.Context()
	for attempt := 1; ; attempt++ {
		resp, err := t.once(ctx, req, body)
		var delay time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var te *attemptTimeoutError
			if errors.As(err, &te) || !retryableNetError(err) {
				return nil, &attemptsError{attempts: attempt, err: err}
			}
			delay = t.backoff(attempt)
		case retryableStatus(resp.StatusCode):
			delay = t.backoff(attempt)
			if ra, ok := retryAfter(resp.Header, t.now()); ok {
				delay = min(ra, t.cap)
			}
		default:
			return resp, nil
		}
		if attempt >= t.attempts {
			if err != nil {
				return nil, &attemptsError{attempts: attempt, err: err}
			}
			return resp, nil // go-openai turns the status into an error
		}
		if t.log != nil {
			what := ""
			if err != nil {
				what = redactSecret(err.Error(), t.secret)
			} else {
				what = resp.Status
			}
			t.log.Warn("model request failed, retrying", "alias", t.alias, "attempt", attempt, "of", t.attempts, "error", what, "wait", delay)
		}
		if err := t.sleep(ctx, delay); err != nil {
			return nil, err
		}
	}
}

// attemptTimeoutError is one attempt that exceeded the per-attempt timeout.
type attemptTimeoutError struct {
	timeout time.Duration
	idle    bool // a streamed attempt: no byte for that long
}

func (e *attemptTimeoutError) Error() string {
	if e.idle {
		return fmt.Sprintf("no byte of the answer for %s (the idle timeout)", e.timeout)
	}
	return fmt.Sprintf("no answer within the timeout of %s", e.timeout)
}

// once makes one attempt and reads the whole answer, so the per-attempt
// timeout can end with it.
//
// A streamed attempt (t.stream) has an idle timeout instead: it fails only
// when no byte arrives for t.timeout, and its event stream is reassembled
// into one answer here (readStreamed), so every layer above sees JSON.
func (t *retryTransport) once(ctx context.Context, req *http.Request, body []byte) (*http.Response, error) {
	actx, cancel := ctx, context.CancelFunc(func() {})
	var idle *time.Timer
	var idleFired atomic.Bool
	switch {
	case t.timeout > 0 && t.stream:
		actx, cancel = context.WithCancel(ctx)
		idle = time.AfterFunc(t.timeout, func() { idleFired.Store(true); cancel() })
		defer idle.Stop()
	case t.timeout > 0:
		actx, cancel = context.WithTimeout(ctx, t.timeout)
	}
	defer cancel()
	r := req.Clone(actx)
	if body != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	resp, err := t.next.RoundTrip(r)
	if err == nil {
		var rd io.Reader = io.LimitReader(resp.Body, maxAnswerBytes)
		if idle != nil {
			rd = &modelproxy.IdleReader{R: rd, Timer: idle, Timeout: t.timeout}
		}
		var b []byte
		if resp.StatusCode/100 == 2 && isEventStream(resp.Header.Get("Content-Type")) {
			b, err = readStreamed(rd, streamProgressFrom(ctx))
			if err == nil {
				drainStream(resp.Body, rd)
			}
			resp.Header = resp.Header.Clone()
			resp.Header.Set("Content-Type", "application/json")
		} else {
			b, err = io.ReadAll(rd)
			if err != nil {
				err = fmt.Errorf("reading the answer: %w", err)
			}
		}
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
	}
	if err != nil {
		if ctx.Err() == nil && (idleFired.Load() || errors.Is(actx.Err(), context.DeadlineExceeded)) {
			return nil, &attemptTimeoutError{timeout: t.timeout, idle: idle != nil}
		}
		return nil, err
	}
	return resp, nil
}

// streamDrainGrace bounds how long an answer's end is waited for after its
// "data: [DONE]".
const streamDrainGrace = time.Second

// drainStream reads an event stream from its "data: [DONE]" to its end
// (at most 1 MiB, for at most streamDrainGrace; then body is closed). The
// request is over only then: the server has finished answering it (a
// model slot given back earlier could let another request reach a server
// still counting this one), and the connection, read to its end, goes
// back to the pool instead of being closed and dialled again.
func drainStream(body io.Closer, rd io.Reader) {
	t := time.AfterFunc(streamDrainGrace, func() { body.Close() })
	defer t.Stop()
	io.Copy(io.Discard, io.LimitReader(rd, 1<<20))
}

// retryableNetError reports whether a transport error is worth a retry:
// refused or reset connections and answers cut short.
func retryableNetError(err error) bool {
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return true
	case errors.As(err, &oe):
		return true
	case errors.As(err, &ne):
		return true
	}
	return false
}

// backoff is the wait before attempt n+1: base·2^(n-1) capped, with equal
// jitter (half fixed, half random) so many workers do not retry in step.
func (t *retryTransport) backoff(n int) time.Duration {
	d := t.base
	for i := 1; i < n && d < t.cap; i++ {
		d *= 2
	}
	d = min(d, t.cap)
	if d <= 0 {
		return 0
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// retryAfter parses Retry-After (seconds or an HTTP date) and the
// retry-after-ms header some servers send.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil && secs >= 0 {
		return time.Duration(secs * float64(time.Second)), true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}

// sleepCtx is the client's wait between attempts: ctx's error when it
// ended first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if !ctxwait.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// ModelProbe is what a server says about itself (GET /v1/models).
type ModelProbe struct {
	Alias   string   `json:"alias"`
	URL     string   `json:"url"`
	Model   string   `json:"model"`
	Models  []string `json:"models"` // the ids the server lists
	Served  bool     `json:"served"` // Model is among them
	Latency string   `json:"latency"`
}

// ProbeModel asks the server of spec which models it serves, with one
// attempt and the key handling of NewClient: for `doctor`-style checks
// before dispatching work. A replay spec is probed by loading its script.
func ProbeModel(ctx context.Context, spec ModelSpec, getenv func(string) string, opts ...ClientOption) (ModelProbe, error) {
	p := ModelProbe{Alias: spec.Alias, URL: spec.BaseURL, Model: spec.Model}
	if spec.IsReplay() {
		if _, err := NewReplay(spec.ReplayFile); err != nil {
			return p, err
		}
		p.URL, p.Models, p.Served = replayBaseURL, []string{spec.Model}, true
		return p, nil
	}
	spec.MaxAttempts = 1
	mc, err := NewClient(spec, getenv, opts...)
	if err != nil {
		return p, err
	}
	c := mc.(*httpClient)
	start := time.Now()
	list, err := c.api.ListModels(ctx)
	p.Latency = time.Since(start).Round(time.Millisecond).String()
	if err != nil {
		return p, c.wrapError(ctx, err)
	}
	for _, m := range list.Models {
		p.Models = append(p.Models, m.ID)
		if m.ID == spec.Model {
			p.Served = true
		}
	}
	return p, nil
}
