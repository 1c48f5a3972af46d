package patch

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
)

// Mode selects how PatchID hashes a diff. The three modes are those of
// `git patch-id` (git 2.39): the zero value is git's default.
type Mode int

const (
	// Unstable is `git patch-id --unstable` (git's default without
	// configuration): one SHA-1 over the whole whitespace-stripped diff, so
	// the order of the files matters.
	Unstable Mode = iota
	// Stable is `git patch-id --stable`: the sum of one SHA-1 per file, so
	// reordering the files of a patch does not change the id; whitespace is
	// ignored.
	Stable
	// Verbatim is `git patch-id --verbatim`: stable, and whitespace is
	// hashed as given (git documents --verbatim as implying --stable).
	Verbatim
)

func (m Mode) String() string {
	switch m {
	case Unstable:
		return "unstable"
	case Stable:
		return "stable"
	case Verbatim:
		return "verbatim"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Result is one line of `git patch-id` output: the patch-id of one patch and
// the commit id that preceded it in the input (all zeros when none did).
type Result struct {
	PatchID  string
	CommitID string
}

// zeroID is the all-zero object id git prints when no commit id is known.
const zeroID = "0000000000000000000000000000000000000000"

// PatchID computes git-compatible patch-ids of the patches read from r, one
// Result per patch, exactly as `git patch-id` would print them in mode. It
// streams: memory does not grow with the size of the input.
func PatchID(r io.Reader, mode Mode) ([]Result, error) {
	var out []Result
	err := WritePatchIDs(r, mode, func(res Result) error {
		out = append(out, res)
		return nil
	})
	return out, err
}

// WritePatchIDTo writes `<patch-id> <commit-id>` lines to w as `git patch-id`
// does, reading patches from r.
func WritePatchIDTo(w io.Writer, r io.Reader, mode Mode) error {
	return WritePatchIDsTo(w, r, mode, Options{})
}

// WritePatchIDsTo is WritePatchIDTo with options.
func WritePatchIDsTo(w io.Writer, r io.Reader, mode Mode, opt Options) error {
	bw := bufio.NewWriter(w)
	line := make([]byte, 0, 82)
	err := PatchIDs(r, mode, opt, func(res Result) error {
		line = append(line[:0], res.PatchID...)
		line = append(line, ' ')
		line = append(line, res.CommitID...)
		line = append(line, '\n')
		_, err := bw.Write(line)
		return err
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return err
}

// WritePatchIDs calls emit once per patch found in r, in input order,
// accepting whatever `git patch-id` accepts.
func WritePatchIDs(r io.Reader, mode Mode, emit func(Result) error) error {
	return PatchIDs(r, mode, Options{}, emit)
}

// Options tune PatchIDs.
type Options struct {
	// Strict refuses input git would silently hash: a non-empty input that
	// holds no patch, and binary hunks ("GIT binary patch") that are
	// malformed or truncated (each is decoded and inflated to its declared
	// size as it streams by). Ids of valid input are unchanged.
	Strict bool
	// Name names the input in errors ("stdin", a file name).
	Name string
}

// PatchIDs calls emit once per patch found in r, in input order.
func PatchIDs(r io.Reader, mode Mode, opt Options, emit func(Result) error) error {
	if mode != Unstable && mode != Stable && mode != Verbatim {
		return fmt.Errorf("patch-id: unknown mode %d", int(mode))
	}
	name := opt.Name
	if name == "" {
		name = "input"
	}
	s := newIDScanner(r, mode)
	defer s.release()
	s.strict = opt.Strict
	commit := zeroID
	found := false
	for !s.eof {
		res, err := s.onePatch()
		if err != nil {
			return fmt.Errorf("patch-id: %s line %d: %w", name, s.lineNo, err)
		}
		if res.length > 0 {
			found = true
			if err := emit(Result{PatchID: hex.EncodeToString(res.sum[:]), CommitID: commit}); err != nil {
				return err
			}
		}
		commit = res.next
	}
	if opt.Strict && !found && s.lineNo > 0 {
		return fmt.Errorf("patch-id: %s: %w (not a diff)", name, ErrNoPatch)
	}
	return nil
}

// ErrNoPatch is returned by BindingPatchID when its input holds no patch.
var ErrNoPatch = errors.New("input holds no patch")

// BindingPatchID returns the one patch-id that binds a review to a landing:
// git's stable patch-id with whitespace hashed verbatim (`git patch-id
// --verbatim`). Stable, so the order in which files are listed does not
// matter; verbatim, so any change after review — whitespace included —
// changes the id. diff must hold exactly one patch (an extracted diff, or the
// canonical diff of a squash); commit headers are ignored.
func BindingPatchID(diff io.Reader) (string, error) {
	var id string
	n := 0
	err := PatchIDs(diff, Verbatim, Options{Strict: true, Name: "diff"}, func(res Result) error {
		id = res.PatchID
		n++
		return nil
	})
	switch {
	case err != nil:
		return "", err
	case n == 0:
		return "", fmt.Errorf("binding patch-id: %w", ErrNoPatch)
	case n > 1:
		return "", fmt.Errorf("binding patch-id: input holds %d patches, want one", n)
	}
	return id, nil
}

// idScanner reads lines and computes patch-ids. It reproduces the
// documented and observed behaviour of `git patch-id` (verified by the
// differential tests in this package against the git CLI).
type idScanner struct {
	br       *bufio.Reader
	stable   bool
	verbatim bool
	eof      bool

	h      hash.Hash
	buf    []byte // bytes waiting to be hashed
	digest [sha1.Size]byte
	long   []byte // a header line that did not fit in the reader's buffer

	preOID, postOID []byte // from the last "index" line

	strict bool
	lineNo int
	bin    *binaryCheck // strict: the binary section being checked
}

type patchResult struct {
	sum    [sha1.Size]byte
	length int
	next   string
}

// The scanners' two large buffers are reused from one input to the next: a
// worker takes a patch-id of every run, and allocating them anew each time
// is most of what the Go runtime clears and collects for it.
var (
	idReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 256<<10) }}
	idBufs    = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}
)

func newIDScanner(r io.Reader, mode Mode) *idScanner {
	br := idReaders.Get().(*bufio.Reader)
	br.Reset(r)
	return &idScanner{
		br:       br,
		stable:   mode != Unstable,
		verbatim: mode == Verbatim,
		h:        sha1.New(),
		buf:      (*idBufs.Get().(*[]byte))[:0],
		preOID:   make([]byte, 0, 64),
		postOID:  make([]byte, 0, 64),
	}
}

// release gives the scanner's buffers back for the next input; s is not
// used after.
func (s *idScanner) release() {
	s.br.Reset(nil)
	idReaders.Put(s.br)
	buf := s.buf[:0]
	idBufs.Put(&buf)
	s.br, s.buf = nil, nil
}

// write queues bytes for the running hash.
func (s *idScanner) write(p []byte) {
	if len(s.buf)+len(p) > cap(s.buf) {
		s.h.Write(s.buf)
		s.buf = s.buf[:0]
		if len(p) > cap(s.buf) {
			s.h.Write(p)
			return
		}
	}
	s.buf = append(s.buf, p...)
}

// notSpace is 1 for bytes that are not whitespace as git's isspace sees it
// (space, tab, LF, CR; not VT or FF), 0 for those that are.
var notSpace = func() (t [256]uint8) {
	for i := range t {
		t[i] = 1
	}
	for _, c := range []byte{' ', '\t', '\n', '\r'} {
		t[c] = 0
	}
	return t
}()

// writeStripped queues p without whitespace and returns how many bytes it
// queued. The copy is branch-free: every byte is stored, and the write
// position only advances past non-space bytes.
func (s *idScanner) writeStripped(p []byte) int {
	n := 0
	for len(p) > 0 {
		if cap(s.buf)-len(s.buf) < 1 {
			s.h.Write(s.buf)
			s.buf = s.buf[:0]
		}
		room := cap(s.buf) - len(s.buf)
		chunk := p
		if len(chunk) > room {
			chunk = chunk[:room]
		}
		p = p[len(chunk):]
		start := len(s.buf)
		b := s.buf[:start+len(chunk)]
		j := start
		for _, c := range chunk {
			b[j] = c
			j += int(notSpace[c])
		}
		s.buf = b[:j]
		n += j - start
	}
	return n
}

// flushHunk adds the running hash into sum (a 20-byte little-endian sum
// with carry, as git does) and restarts the hash.
func (s *idScanner) flushHunk(sum *[sha1.Size]byte) {
	s.h.Write(s.buf)
	s.buf = s.buf[:0]
	d := s.h.Sum(s.digest[:0])
	s.h.Reset()
	carry := uint(0)
	for i := range sum {
		carry += uint(sum[i]) + uint(d[i])
		sum[i] = byte(carry)
		carry >>= 8
	}
}

// hashLine hashes one (possibly partial) line segment; it returns the
// number of bytes that counted towards the patch length.
func (s *idScanner) hashLine(p []byte) int {
	if s.verbatim {
		s.write(p)
		return len(p)
	}
	return s.writeStripped(p)
}

// readLine returns the next line (with its newline, if any) up to its first
// NUL byte, as C string functions see it. rest reports that the line did not
// fit the buffer; the caller must then call restOfLine.
func (s *idScanner) readLine() (line []byte, rest bool, err error) {
	line, err = s.br.ReadSlice('\n')
	if len(line) > 0 {
		s.lineNo++
	}
	switch {
	case err == bufio.ErrBufferFull:
		rest, err = true, nil
	case err == io.EOF:
		if len(line) == 0 {
			return nil, false, io.EOF
		}
		err = nil
	case err != nil:
		return nil, false, err
	}
	return line, rest, nil
}

// cutNUL truncates p at its first NUL byte and reports whether it did.
func cutNUL(p []byte) ([]byte, bool) {
	if i := bytes.IndexByte(p, 0); i >= 0 {
		return p[:i], true
	}
	return p, false
}

// restOfLine consumes the remainder of an over-long line, handing each
// segment (already cut at a NUL) to fn unless a NUL was seen before.
func (s *idScanner) restOfLine(cut bool, fn func([]byte)) error {
	for {
		seg, err := s.br.ReadSlice('\n')
		if err != nil && err != bufio.ErrBufferFull && err != io.EOF {
			return err
		}
		if !cut && fn != nil {
			var c bool
			seg, c = cutNUL(seg)
			fn(seg)
			cut = c
		}
		if err != bufio.ErrBufferFull {
			if err == io.EOF {
				s.eof = true
			}
			return nil
		}
	}
}

// endBinary closes the strict check of a binary section, if one is open.
func (s *idScanner) endBinary() error {
	if s.bin == nil {
		return nil
	}
	b := s.bin
	s.bin = nil
	return b.end()
}

// skip finishes an over-long line without hashing it.
func (s *idScanner) skip(rest bool) error {
	if rest {
		return s.restOfLine(true, nil)
	}
	return nil
}

func hasPrefix(p []byte, prefix string) bool {
	return len(p) >= len(prefix) && string(p[:len(prefix)]) == prefix
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// oidAt parses 40 hex digits at the start of p.
func oidAt(p []byte) (string, bool) {
	if len(p) < 40 {
		return "", false
	}
	for _, c := range p[:40] {
		if !isHex(c) {
			return "", false
		}
	}
	return string(bytes.ToLower(p[:40])), true
}

func isAlpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// scanHunkHeader reads the line counts of "@@ -a,b +c,d @@" (a count
// without a comma is 1). Malformed headers leave the counts as they were,
// except for a parsed "before" count.
func scanHunkHeader(line []byte, before, after *int) {
	q := line[4:]
	n := spanDigits(q)
	if n < len(q) && q[n] == ',' {
		q = q[n+1:]
		*before = atoi(q)
		n = spanDigits(q)
	} else {
		*before = 1
	}
	if n == 0 || n+1 >= len(q) || q[n] != ' ' || q[n+1] != '+' {
		return
	}
	r := q[n+2:]
	n = spanDigits(r)
	if n < len(r) && r[n] == ',' {
		*after = atoi(r[n+1:])
	} else {
		*after = 1
	}
}

func spanDigits(p []byte) int {
	n := 0
	for n < len(p) && '0' <= p[n] && p[n] <= '9' {
		n++
	}
	return n
}

// atoi parses like C's atoi: optional space and sign, then digits.
func atoi(p []byte) int {
	i := 0
	for i < len(p) && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r' || p[i] == '\v' || p[i] == '\f') {
		i++
	}
	neg := false
	if i < len(p) && (p[i] == '+' || p[i] == '-') {
		neg = p[i] == '-'
		i++
	}
	v := 0
	for ; i < len(p) && '0' <= p[i] && p[i] <= '9'; i++ {
		v = v*10 + int(p[i]-'0')
		if v > 1<<31 {
			v = 1 << 31
		}
	}
	if neg {
		v = -v
	}
	return int(int32(v))
}

// parseIndexLine records the object ids of an "index <a>..<b>[ <mode>]"
// line the way git does: the text between "index " and "..", and the text
// after ".." up to the next space (or up to, not including, the last
// character of the line), each cut to 64 characters.
func (s *idScanner) parseIndexLine(line []byte) {
	dots := bytes.Index(line, []byte(".."))
	if dots < 0 {
		return
	}
	end := bytes.IndexByte(line[dots:], ' ')
	if end >= 0 {
		end += dots
	} else {
		end = len(line) - 1
	}
	const p = len("index ")
	pre := []byte{}
	if dots > p {
		pre = line[p:dots]
	} else if dots < p {
		// ".." inside "index ": git copies from after the prefix up to
		// the next NUL it wrote, which is at dots or at end.
		pre = line[p:max(p, end)]
		if end < p {
			pre = line[p:]
		}
	}
	post := []byte{}
	if dots+2 <= end {
		post = line[dots+2 : end]
	} else if dots+2 < len(line) {
		post = line[dots+2:]
	}
	s.preOID = append(s.preOID[:0], pre[:min(len(pre), 64)]...)
	s.postOID = append(s.postOID[:0], post[:min(len(post), 64)]...)
}

// onePatch reads up to the start of the next patch (a commit line) or the
// end of input and returns the id of what it read.
func (s *idScanner) onePatch() (patchResult, error) {
	var res patchResult
	res.next = zeroID
	before, after := -1, -1
	binary := false
	s.h.Reset()
	s.buf = s.buf[:0]

	for {
		raw, rest, err := s.readLine()
		if err == io.EOF {
			s.eof = true
			if err := s.endBinary(); err != nil {
				return res, err
			}
			break
		}
		if err != nil {
			return res, err
		}
		line, cut := cutNUL(raw)
		// An over-long "index" header line must be seen whole.
		if rest && before == -1 && hasPrefix(line, "index ") && !cut {
			s.long = append(s.long[:0], line...)
			if err := s.restOfLine(false, func(seg []byte) { s.long = append(s.long, seg...) }); err != nil {
				return res, err
			}
			line, rest = s.long, false
		}
		lineLen := len(line) // strlen, at least as far as we have read

		p := line
		prefixed := false
		for _, pre := range []string{"commit ", "From "} {
			if hasPrefix(line, pre) {
				p, prefixed = line[len(pre):], true
				break
			}
		}
		if !prefixed && hasPrefix(line, "\\ ") && (lineLen > 12 || rest) {
			if s.verbatim {
				s.write(line)
				if rest {
					if err := s.restOfLine(cut, s.write); err != nil {
						return res, err
					}
				}
				continue
			}
			if err := s.skip(rest); err != nil {
				return res, err
			}
			continue
		}
		if id, ok := oidAt(p); ok {
			if err := s.endBinary(); err != nil {
				return res, err
			}
			res.next = id
			if err := s.skip(rest); err != nil {
				return res, err
			}
			break
		}
		// Ignore commit messages and other text before the first diff.
		if res.length == 0 && !hasPrefix(line, "diff ") {
			if err := s.skip(rest); err != nil {
				return res, err
			}
			continue
		}
		// The header of a file's diff.
		if before == -1 {
			if hasPrefix(line, "GIT binary patch") || hasPrefix(line, "Binary files") {
				if s.strict && hasPrefix(line, "GIT binary patch") {
					s.bin = &binaryCheck{}
				}
				binary = true
				before = 0
				s.write(s.preOID)
				s.write(s.postOID)
				if s.stable {
					s.flushHunk(&res.sum)
				}
				if err := s.skip(rest); err != nil {
					return res, err
				}
				continue
			} else if hasPrefix(line, "index ") {
				s.parseIndexLine(line)
				if err := s.skip(rest); err != nil {
					return res, err
				}
				continue
			} else if hasPrefix(line, "--- ") {
				before, after = 1, 1
			} else if len(line) == 0 || !isAlpha(line[0]) {
				if err := s.skip(rest); err != nil {
					return res, err
				}
				break
			}
		}
		if binary {
			if !hasPrefix(line, "diff ") {
				if s.bin != nil {
					if rest {
						return res, errors.New("binary hunk: corrupt data line (too long)")
					}
					if err := s.bin.line(raw); err != nil {
						return res, err
					}
				}
				if err := s.skip(rest); err != nil {
					return res, err
				}
				continue
			}
			if err := s.endBinary(); err != nil {
				return res, err
			}
			// The next file's "diff" line is not hashed (as in git).
			binary = false
			before = -1
			if err := s.skip(rest); err != nil {
				return res, err
			}
			continue
		}
		// Between hunks: a new hunk, a new file, or the end of the patch.
		if before == 0 && after == 0 {
			if hasPrefix(line, "@@ -") {
				scanHunkHeader(line, &before, &after)
				if err := s.skip(rest); err != nil {
					return res, err
				}
				continue
			}
			if !hasPrefix(line, "diff ") {
				if err := s.skip(rest); err != nil {
					return res, err
				}
				break
			}
			if s.stable {
				s.flushHunk(&res.sum)
			}
			before, after = -1, -1
		}
		if len(line) > 0 {
			if line[0] == '-' || line[0] == ' ' {
				before--
			}
			if line[0] == '+' || line[0] == ' ' {
				after--
			}
		}
		res.length += s.hashLine(line)
		if rest {
			if err := s.restOfLine(cut, func(seg []byte) { res.length += s.hashLine(seg) }); err != nil {
				return res, err
			}
		}
	}
	s.flushHunk(&res.sum)
	return res, nil
}
