package patch

import (
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// binaryCheck validates the hunks of one "GIT binary patch" section as
// they stream by: the "literal N" / "delta N" header, the base85 data lines
// (length character, line size) and that the data inflates to exactly N
// bytes. Memory stays constant: the data is inflated as it is decoded.
type binaryCheck struct {
	state   int // 0 want header or end, 1 in data
	method  string
	size    int64
	pw      *io.PipeWriter
	done    chan inflateResult
	hunks   int
	decoded []byte
}

type inflateResult struct {
	n   int64
	err error
}

const (
	binWantHeader = iota
	binInData
)

var base85Value = func() [256]int8 {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
	var t [256]int8
	for i := range t {
		t[i] = -1
	}
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = int8(i)
	}
	return t
}()

// line feeds one line (without NUL truncation, with its newline) of the
// section. It returns an error describing what is wrong.
func (b *binaryCheck) line(p []byte) error {
	body := p
	if n := len(body); n > 0 && body[n-1] == '\n' {
		body = body[:n-1]
	} else {
		return errors.New("truncated binary hunk: input ends inside it")
	}
	switch b.state {
	case binWantHeader:
		if len(body) == 0 && b.hunks > 0 {
			return nil // blank lines between sections are tolerated
		}
		var rest []byte
		switch {
		case hasPrefix(body, "literal "):
			b.method, rest = "literal", body[len("literal "):]
		case hasPrefix(body, "delta "):
			b.method, rest = "delta", body[len("delta "):]
		default:
			return fmt.Errorf("binary hunk: want \"literal N\" or \"delta N\", got %.40q", body)
		}
		size, err := strconv.ParseInt(string(rest), 10, 64)
		if err != nil || size < 0 {
			return fmt.Errorf("binary hunk: bad size in %.40q", body)
		}
		if b.hunks == 2 {
			return errors.New("binary hunk: more than two hunks in one file")
		}
		b.size, b.state = size, binInData
		b.start()
		return nil
	case binInData:
		if len(body) == 0 {
			b.state = binWantHeader
			b.hunks++
			return b.finish()
		}
		return b.data(body)
	}
	return nil
}

func (b *binaryCheck) start() {
	pr, pw := io.Pipe()
	b.pw = pw
	b.done = make(chan inflateResult, 1)
	go func() {
		var res inflateResult
		zr, err := zlib.NewReader(pr)
		if err == nil {
			res.n, err = io.Copy(io.Discard, zr)
			if err == nil {
				// Trailing bytes after the zlib stream are corrupt data too.
				var one [1]byte
				if k, _ := pr.Read(one[:]); k > 0 {
					err = errors.New("data after the end of the compressed stream")
				}
			}
		}
		res.err = err
		io.Copy(io.Discard, pr)
		b.done <- res
	}()
}

func (b *binaryCheck) data(body []byte) error {
	if len(body) < 6 || (len(body)-1)%5 != 0 {
		return errors.New("binary hunk: corrupt data line (bad length)")
	}
	c := body[0]
	var count int
	switch {
	case 'A' <= c && c <= 'Z':
		count = int(c-'A') + 1
	case 'a' <= c && c <= 'z':
		count = int(c-'a') + 27
	default:
		return errors.New("binary hunk: corrupt data line (bad length character)")
	}
	seq := body[1:]
	max := len(seq) / 5 * 4
	if count > max || count < max-3 {
		return errors.New("binary hunk: corrupt data line (length does not match)")
	}
	out := b.decoded[:0]
	for i := 0; i < len(seq); i += 5 {
		var v uint64
		for j := 0; j < 5; j++ {
			d := base85Value[seq[i+j]]
			if d < 0 {
				return errors.New("binary hunk: corrupt data line (not base85)")
			}
			v = v*85 + uint64(d)
		}
		if v > 0xffffffff {
			return errors.New("binary hunk: corrupt data line (base85 overflow)")
		}
		out = append(out, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	b.decoded = out
	if _, err := b.pw.Write(out[:count]); err != nil {
		return errors.New("binary hunk: corrupt compressed data")
	}
	return nil
}

func (b *binaryCheck) finish() error {
	b.pw.Close()
	res := <-b.done
	b.pw = nil
	if res.err != nil {
		return fmt.Errorf("binary hunk: corrupt compressed data: %v", res.err)
	}
	if res.n != b.size {
		return fmt.Errorf("truncated binary hunk: %s %d inflates to %d bytes", b.method, b.size, res.n)
	}
	return nil
}

// end reports whether the section may end here (before the next file or at
// the end of input) and releases resources.
func (b *binaryCheck) end() error {
	if b.state == binInData {
		b.pw.CloseWithError(errors.New("abandoned"))
		<-b.done
		b.pw = nil
		b.state = binWantHeader
		return errors.New("truncated binary hunk: it ends before its blank line")
	}
	if b.hunks == 0 {
		return errors.New("truncated binary hunk: no data after \"GIT binary patch\"")
	}
	return nil
}
