package runtask

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/conductor-dev/conductor/runtask/fakellm/modelscript"
)

// replayBaseURL is the base URL replayed requests claim; nothing listens
// there and nothing is dialled: requests are answered in memory.
const replayBaseURL = "http://replay.invalid/v1"

// replayClient plays a fakellm script with no network: the script's handler
// answers in memory, through the same go-openai client and quirk handling as
// a real server, so a replayed turn is normalised exactly like a live one.
// An unmet expect/expectLast/forbid of the script is an error: the
// conversation diverged from the recording.
type replayClient struct {
	file  string
	h     *modelscript.Handler
	inner *httpClient

	mu   sync.Mutex
	seen int // mismatches already reported
}

// NewReplay loads a fakellm script (see package fakellm for the format) and
// returns a model client that plays it. Retries of scripted 429/5xx turns
// happen at once; scripted latency is honoured.
//
// A FILE ending in .jsonl is a run's transcript.jsonl: its model turns are
// replayed (see ScriptFromTranscript), so any recorded run can be re-run
// offline.
func NewReplay(file string, opts ...ClientOption) (ModelClient, error) {
	script, err := loadReplayScript(file)
	if err != nil {
		return nil, err
	}
	h := modelscript.NewHandler(script)
	spec := ModelSpec{
		Alias:       ReplayPrefix + file,
		BaseURL:     replayBaseURL,
		Model:       "replay",
		MaxAttempts: DefaultMaxAttempts,
		Source:      "replay",
	}
	if script.Model != "" {
		spec.Model = script.Model
	}
	o := clientOptions{sleep: sleepCtx}
	for _, f := range opts {
		f(&o)
	}
	o.transport = handlerTransport{h}
	o.now = time.Now
	// A private, unlimited limiter: replays share no server.
	c := newHTTPClient(spec, "", &AliasLimiter{changed: make(chan struct{})}, o)
	return &replayClient{file: file, h: h, inner: c}, nil
}

// Complete answers with the next scripted turn.
func (r *replayClient) Complete(ctx context.Context, req ModelRequest) (ModelReply, error) {
	r.mu.Lock()
	defer r.mu.Unlock() // a recorded conversation is one turn at a time
	reply, err := r.inner.Complete(ctx, req)
	if err != nil {
		return ModelReply{}, fmt.Errorf("replay %s: %w", r.file, err)
	}
	if ms := r.h.Mismatches(); len(ms) > r.seen {
		fresh := ms[r.seen:]
		r.seen = len(ms)
		texts := make([]string, len(fresh))
		for i, m := range fresh {
			texts[i] = m.String()
		}
		return ModelReply{}, fmt.Errorf("replay %s: the conversation diverged from the recording: %s", r.file, strings.Join(texts, "; "))
	}
	return reply, nil
}

// loadReplayScript reads a replay model's script: a fakellm script, or a
// run's transcript.jsonl (its model turns).
func loadReplayScript(file string) (*modelscript.Script, error) {
	var script *modelscript.Script
	var err error
	if strings.HasSuffix(file, ".jsonl") {
		script, err = loadTranscriptScript(file)
	} else {
		script, err = modelscript.Load(file)
	}
	if err != nil {
		return nil, fmt.Errorf("replay model: %w", err)
	}
	return script, nil
}

// handlerTransport answers requests with an http.Handler in memory.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	w := &memResponse{header: http.Header{}}
	t.h.ServeHTTP(w, req)
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.header,
		Body:          io.NopCloser(bytes.NewReader(w.body.Bytes())),
		ContentLength: int64(w.body.Len()),
		Request:       req,
	}, nil
}

// memResponse is an in-memory http.ResponseWriter.
type memResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *memResponse) Header() http.Header { return w.header }

func (w *memResponse) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *memResponse) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

func loadTranscriptScript(file string) (*modelscript.Script, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := ScriptFromTranscript(f)
	if err != nil {
		return nil, fmt.Errorf("transcript %s: %w", file, err)
	}
	return s, nil
}

// ScriptFromTranscript turns a run transcript (JSON lines; the lines of
// type "model" carry the assistant message, finish reason and usage) into a
// script in "history" mode that answers with the same turns. Other lines
// are skipped; a line that is not JSON is an error naming its number.
func ScriptFromTranscript(r io.Reader) (*modelscript.Script, error) {
	type line struct {
		Type    string `json:"type"`
		Message *struct {
			Content   string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finishReason"`
		Usage        *Usage `json:"usage"`
		UsageUnknown bool   `json:"usageUnknown"`
	}
	s := &modelscript.Script{Mode: modelscript.ModeHistory}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	n := 0
	for sc.Scan() {
		n++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		var l line
		if err := json.Unmarshal(text, &l); err != nil {
			// A crash can cut the last line short; anything else is damage.
			if !sc.Scan() {
				break
			}
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		if l.Type != "model" || l.Message == nil {
			continue
		}
		t := modelscript.Turn{Name: fmt.Sprintf("recorded turn %d", len(s.Turns)+1), Content: l.Message.Content}
		for _, c := range l.Message.ToolCalls {
			args, _ := json.Marshal(c.Function.Arguments)
			t.ToolCalls = append(t.ToolCalls, modelscript.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args})
		}
		if l.FinishReason != "" && !(len(t.ToolCalls) > 0 && l.FinishReason == "tool_calls") && !(len(t.ToolCalls) == 0 && l.FinishReason == "stop") {
			t.FinishReason = l.FinishReason
		}
		switch {
		case l.Usage != nil:
			t.Usage = &modelscript.Usage{PromptTokens: int(l.Usage.PromptTokens), CompletionTokens: int(l.Usage.CompletionTokens), TotalTokens: int(l.Usage.TotalTokens)}
		case l.UsageUnknown:
			t.Quirks = []string{modelscript.QuirkNoUsage}
		}
		s.Turns = append(s.Turns, t)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(s.Turns) == 0 {
		return nil, errors.New("no model turns to replay")
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}
