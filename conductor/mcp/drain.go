package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"
)

// drainWait bounds how long the end of a stdio client's input waits for the
// answers still owed (a tool call takes milliseconds: this only keeps a
// request the server never answers from holding the process forever).
const drainWait = time.Minute

// drainingIO sits between a stdio client and the SDK's transport: it notes
// the id of every request the client sends and of every response the server
// writes, and holds back the end of the client's input until each request
// read has been answered. Without it a client that writes its requests and
// closes its end (`printf … | conductor mcp`) loses the answers still being
// worked on: the SDK ends the session at EOF and drops them.
type drainingIO struct {
	in  io.Reader
	out io.Writer
	ctx context.Context

	mu      sync.Mutex
	cond    *sync.Cond
	pending map[string]bool // ids of requests read and not yet answered
	inBuf   []byte          // the client's partial line
	outBuf  []byte          // the server's partial line
}

func newDrainingIO(ctx context.Context, in io.Reader, out io.Writer) *drainingIO {
	d := &drainingIO{in: in, out: out, ctx: ctx, pending: map[string]bool{}}
	d.cond = sync.NewCond(&d.mu)
	context.AfterFunc(ctx, func() {
		d.mu.Lock()
		d.cond.Broadcast()
		d.mu.Unlock()
	})
	return d
}

// Read reads the client's input; at its end it waits until every request
// read has been answered (or ctx ends) before it reports the end.
func (d *drainingIO) Read(p []byte) (int, error) {
	n, err := d.in.Read(p)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inBuf = eachLine(append(d.inBuf, p[:n]...), d.noteRequests)
	if errors.Is(err, io.EOF) {
		if len(d.inBuf) > 0 {
			d.inBuf = eachLine(append(d.inBuf, '\n'), d.noteRequests)
		}
		expired := false
		t := time.AfterFunc(drainWait, func() {
			d.mu.Lock()
			expired = true
			d.cond.Broadcast()
			d.mu.Unlock()
		})
		defer t.Stop()
		for len(d.pending) > 0 && d.ctx.Err() == nil && !expired {
			d.cond.Wait()
		}
	}
	return n, err
}

// Write writes the server's output and notes the answers in it.
func (d *drainingIO) Write(p []byte) (int, error) {
	n, err := d.out.Write(p)
	d.mu.Lock()
	d.outBuf = eachLine(append(d.outBuf, p[:n]...), d.noteAnswers)
	d.cond.Broadcast()
	d.mu.Unlock()
	return n, err
}

// eachLine calls f on every whole line of buf and returns what is left.
func eachLine(buf []byte, f func([]byte)) []byte {
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			return buf
		}
		f(buf[:i])
		buf = buf[i+1:]
	}
}

// message is what drainingIO reads of a JSON-RPC message.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

// messages decodes a line: one message, or a batch of them. A line that is
// not JSON-RPC is the SDK's to refuse; it answers nothing this must wait for.
func messages(line []byte) []message {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil
	}
	if line[0] == '[' {
		var batch []message
		if json.Unmarshal(line, &batch) != nil {
			return nil
		}
		return batch
	}
	var m message
	if json.Unmarshal(line, &m) != nil {
		return nil
	}
	return []message{m}
}

func idKey(id json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, id) != nil {
		return string(id)
	}
	return b.String()
}

// noteRequests records the client's requests (notifications carry no id;
// the client's answers to the server's requests carry no method).
func (d *drainingIO) noteRequests(line []byte) {
	for _, m := range messages(line) {
		if m.Method != "" && len(m.ID) > 0 && string(m.ID) != "null" {
			d.pending[idKey(m.ID)] = true
		}
	}
}

// noteAnswers clears the requests the server answered (its own requests
// to the client carry a method).
func (d *drainingIO) noteAnswers(line []byte) {
	for _, m := range messages(line) {
		if m.Method == "" && len(m.ID) > 0 {
			delete(d.pending, idKey(m.ID))
		}
	}
}
