package sandbox

import (
	"fmt"
	"sync"
)

// capture keeps the first and the last bytes of a stream, up to limit in
// total, and counts everything. Once total passes killAt it calls onExceed
// (once) so the command writing an endless stream can be stopped.
type capture struct {
	mu       sync.Mutex
	headCap  int
	tailCap  int
	head     []byte
	tail     []byte // grows to 2*tailCap, then keeps its last tailCap bytes
	total    int64
	killAt   int64
	onExceed func()
	exceeded bool
}

func newCapture(limit, killAt int64, onExceed func()) *capture {
	if limit < 2 {
		limit = 2
	}
	head := int(limit / 2)
	return &capture{headCap: head, tailCap: int(limit) - head, killAt: killAt, onExceed: onExceed}
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	n := len(p)
	c.total += int64(n)
	if room := c.headCap - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 {
		if len(p) >= c.tailCap {
			c.tail = append(c.tail[:0], p[len(p)-c.tailCap:]...)
		} else {
			c.tail = append(c.tail, p...)
			if len(c.tail) > 2*c.tailCap {
				c.tail = append(c.tail[:0], c.tail[len(c.tail)-c.tailCap:]...)
			}
		}
	}
	fire := c.killAt > 0 && c.total > c.killAt && !c.exceeded
	if fire {
		c.exceeded = true
	}
	c.mu.Unlock()
	if fire && c.onExceed != nil {
		c.onExceed()
	}
	return n, nil
}

// result returns the kept output and whether bytes were dropped.
func (c *capture) result() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := int64(len(c.head))
	tail := c.tail
	if len(tail) > c.tailCap {
		tail = tail[len(tail)-c.tailCap:]
	}
	kept += int64(len(tail))
	if kept >= c.total {
		out := make([]byte, 0, kept)
		out = append(out, c.head...)
		return append(out, c.tail...), false
	}
	marker := fmt.Sprintf("\n... [%d bytes omitted] ...\n", c.total-kept)
	out := make([]byte, 0, int(kept)+len(marker))
	out = append(out, c.head...)
	out = append(out, marker...)
	return append(out, tail...), true
}

func (c *capture) written() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}
