package queue

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/conductor-dev/conductor/conductor/testenv"
)

// cutProxy forwards a Redis unix socket. Once armed, it swallows the next
// reply the server sends and closes that connection: the command ran on the
// server, and its answer never reached the client (a server killed after
// its write reached the append-only file, a connection reset).
type cutProxy struct {
	path  string
	armed atomic.Bool
	pass  atomic.Int64 // replies let through once armed, before the cut
	cuts  atomic.Int64
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	p := &cutProxy{path: filepath.Join(t.TempDir(), "proxy.sock")}
	l, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("unix", target)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(s, c); s.Close() }()
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && p.armed.Load() && p.pass.Add(-1) < 0 && p.armed.CompareAndSwap(true, false) {
						p.cuts.Add(1)
						s.Close()
						return
					}
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// TestRedisTakeWhoseReplyIsLost: the server moved a job into this
// consumer's processing list, and the answer was lost. The job is not
// left there (its consumer is alive, so no reaper would ever return it):
// the take fails, and a later take delivers it.
func TestRedisTakeWhoseReplyIsLost(t *testing.T) {
	srv := testenv.PrivateRedis(t)
	ctx := context.Background()
	p := startCutProxy(t, strings.TrimPrefix(srv.URL(), "unix://"))
	q := dial(t, "unix://"+p.path, "c1", 0)
	prod := dial(t, srv.URL(), "", 0)
	if d, err := q.Take(ctx, 0); err != nil || d != nil { // the reaper's first look, on an empty queue
		t.Fatalf("first take: %v %v", d, err)
	}
	for _, job := range []string{`{"n":1}`, `{"n":2}`} {
		if err := prod.Push(ctx, []byte(job)); err != nil {
			t.Fatal(err)
		}
	}
	p.armed.Store(true)
	got := map[string]bool{}
	for i := 0; i < 6 && len(got) < 2; i++ {
		d, err := q.Take(ctx, 0)
		if err != nil || d == nil {
			continue // the cut take, or an empty look
		}
		got[string(d.Payload)] = true
		if err := q.Ack(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if p.cuts.Load() != 1 {
		t.Fatalf("%d replies cut, want 1", p.cuts.Load())
	}
	if len(got) != 2 {
		t.Fatalf("delivered %v: a job whose take's answer was lost stayed in the processing list", got)
	}
}

// TestRedisAttemptCountedOnce: the count of a delivery's attempt whose
// answer was lost is sent again, and counts the delivery once.
func TestRedisAttemptCountedOnce(t *testing.T) {
	srv := testenv.PrivateRedis(t)
	ctx := context.Background()
	p := startCutProxy(t, strings.TrimPrefix(srv.URL(), "unix://"))
	q := dial(t, "unix://"+p.path, "c1", 0)
	if d, err := q.Take(ctx, 0); err != nil || d != nil { // the reaper's first look
		t.Fatalf("first take: %v %v", d, err)
	}
	if err := countAttemptScript.Load(ctx, q.c).Err(); err != nil { // one answer per run, below
		t.Fatal(err)
	}
	if err := q.Push(ctx, []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	p.pass.Store(1) // the take's answer; then the count's is cut
	p.armed.Store(true)
	d, err := q.Take(ctx, 0)
	if err != nil || d == nil {
		t.Fatalf("take: %v %v", d, err)
	}
	if p.cuts.Load() != 1 {
		t.Fatalf("%d answers cut, want 1", p.cuts.Load())
	}
	if d.Attempt != 1 {
		t.Fatalf("first delivery counted as attempt %d", d.Attempt)
	}
}
