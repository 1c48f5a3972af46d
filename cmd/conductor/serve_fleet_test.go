package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/queue"
	"github.com/conductor-dev/conductor/conductor/testenv"
)

// TestServeQueueFleet: `conductor serve` shows the dead letters of the
// queue it is pointed at (the embedded one, or Redis with REDIS_URL) and
// the model slots there, and its retry button requeues the letter.
func TestServeQueueFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts conductor serve")
	}
	t.Run("embedded", func(t *testing.T) { serveFleetTrial(t, "") })
	t.Run("redis", func(t *testing.T) { serveFleetTrial(t, testenv.PrivateRedis(t).URL()) })
}

func serveFleetTrial(t *testing.T, redisURL string) {
	ctx := context.Background()
	home := t.TempDir()
	dataRoot := filepath.Join(home, "data")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(dataRoot, 0o755))
	st, err := bus.Open(ctx, bus.Options{DataRoot: dataRoot})
	must(err)
	defer st.Close()
	// A dead letter, as a worker leaves one, and a model slot held.
	var q queue.Queue = &queue.Embedded{Store: st, Key: queue.DefaultKey, Consumer: "w:1:1", MaxAttempt: 3, Lease: time.Minute}
	var slots queue.SlotStore = st.(queue.SlotStore)
	if redisURL != "" {
		rq, err := queue.DialRedis(ctx, queue.RedisOptions{URL: redisURL, Consumer: "w:1:1"})
		must(err)
		defer rq.Close()
		q = rq
		rs, err := queue.DialRedisSlots(ctx, redisURL)
		must(err)
		defer rs.Close()
		slots = rs
	}
	payload := []byte(`{"runId":"r-served","task":{"taskVersion":1,"id":"t-served","role":"nobody"}}`)
	must(q.Push(ctx, payload))
	dl, err := q.Take(ctx, time.Second)
	must(err)
	if dl == nil {
		t.Fatal("no job taken")
	}
	must(q.Bury(ctx, dl, errNamed(`unknown role "nobody"`)))
	if ok, err := slots.TryAcquireSlot(ctx, "vllm", "w:1:9:aa", 8, time.Hour); err != nil || !ok {
		t.Fatalf("slot: %v %v", ok, err)
	}

	const token = "alice-token-0123456789abcdef"
	env := workerEnv(t, home, "CONDUCTOR_SERVE_TOKEN="+token)
	if redisURL != "" {
		env = append(env, "REDIS_URL="+redisURL)
	}
	do, errb := startServe(t, env, token)
	code, body := do("GET", "/queue")
	for _, want := range []string{dl.ID, "r-served", "unknown role &#34;nobody&#34;", q.Name(), "vllm", "1 / 8", "w:1:9:aa"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("the queue page (%d) lacks %q", code, want)
		}
	}
	if code, body := do("POST", "/queue/dead/"+dl.ID+"/retry"); code != http.StatusSeeOther {
		t.Fatalf("retry: %d %s\n%s", code, body, errb.String())
	}
	dq := q.(queue.DeadLetters)
	if dead, err := dq.DeadLetters(ctx); err != nil || len(dead) != 0 {
		t.Errorf("dead letters after the retry: %+v %v", dead, err)
	}
	again, err := q.Take(ctx, time.Second)
	must(err)
	if again == nil || string(again.Payload) != string(payload) {
		t.Errorf("the retried job is not queued again: %+v", again)
	}
	if t.Failed() {
		t.Log(errb.String())
	}
}

// startServe starts `conductor serve` on a free loopback port as operator
// alice (token) with env and extra flags; do sends her requests (redirects
// are not followed), errb is its stderr. The process ends with the test.
func startServe(t *testing.T, env []string, token string, extra ...string) (do func(method, path string) (int, string), errb *syncBuffer) {
	t.Helper()
	cmd := exec.Command("conductor", append([]string{"serve", "--listen", "127.0.0.1:0", "--operator", "alice"}, extra...)...)
	cmd.Env = env
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errb = &syncBuffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("serve printed no URL: %v\n%s", err, errb.String())
	}
	base := strings.TrimSuffix(strings.TrimSpace(line), "/")
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do = func(method, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	return do, errb
}

type errNamed string

func (e errNamed) Error() string { return string(e) }
