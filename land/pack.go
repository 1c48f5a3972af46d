package land

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
)

// packs reads objects from the repository's pack files in process, so that
// a landing on a repository whose history is packed (most are) needs no
// cat-file process for the commits and trees it reads. A pack's .idx
// (version 2) finds an object's offset: the fan-out table narrows the
// sorted names to the ones sharing the first byte, those are read and
// searched. The .pack entry is inflated and, when it is a delta, applied to
// its base, read the same way. Every object read is checked against its id.
//
// Anything unusual — an index of another version, a pack being replaced
// by a repack, a damaged entry, an object only in an alternate — answers
// "not here", and the landing asks cat-file, which says what is wrong.
type packs struct {
	dir   string // objects/pack
	limit int64  // maxObject (smaller in the fuzz test)
	once  sync.Once
	list  []*pack

	mu        sync.Mutex // guards the packs' lazily opened files and what follows
	zr        io.ReadCloser
	kept      map[packed]keptObject
	keptBytes int
}

// pack is one .idx/.pack pair, opened on first use.
type pack struct {
	name   string // path without the extension
	opened bool
	bad    bool // unreadable: skipped
	files  []*os.File
	idx    io.ReaderAt
	data   io.ReaderAt
	size   int64 // of data
	count  uint32
	fanout [256]uint32
}

// maxObject bounds what is read in process (cat-file answers the rest):
// the size of an object, and of what one read produces along its delta
// chain (twice that).
const maxObject = 64 << 20

// maxDeltaChain bounds a delta chain (git's own default depth is 50; a
// deeper chain is handed to cat-file).
const maxDeltaChain = 4096

func newPacks(objects string) *packs {
	return &packs{dir: filepath.Join(objects, "pack"), limit: maxObject}
}

// read returns the object id (40 hex) from a pack; false when no pack has
// it or it cannot be read here.
func (p *packs) read(id string) (object, bool) {
	var want [20]byte
	if _, err := hex.Decode(want[:], []byte(id)); err != nil {
		return object{}, false
	}
	p.once.Do(p.scan)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pk := range p.list {
		off, ok := pk.find(want)
		if !ok {
			continue
		}
		typ, content, err := pk.entry(p, off, 0)
		if err != nil || len(typ) == 0 {
			return object{}, false
		}
		if looseID(typ, content) != id {
			return object{}, false // cat-file says what is wrong
		}
		return object{OID: id, Type: typ, Content: content}, true
	}
	return object{}, false
}

// has reports whether a pack lists the object id (40 hex).
func (p *packs) has(id string) bool {
	var want [20]byte
	if _, err := hex.Decode(want[:], []byte(id)); err != nil {
		return false
	}
	p.once.Do(p.scan)
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.findAny(want)
	return ok
}

// close closes the packs' files.
func (p *packs) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pk := range p.list {
		for _, f := range pk.files {
			f.Close()
		}
	}
}

// scan lists the packs, newest first (as git searches them).
func (p *packs) scan() {
	des, err := os.ReadDir(p.dir)
	if err != nil {
		return
	}
	type named struct {
		pk    *pack
		mtime int64
	}
	var ns []named
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), ".idx")
		if !ok || !strings.HasPrefix(name, "pack-") {
			continue
		}
		var mtime int64
		if fi, err := de.Info(); err == nil {
			mtime = fi.ModTime().UnixNano()
		}
		ns = append(ns, named{&pack{name: filepath.Join(p.dir, name)}, mtime})
	}
	slices.SortStableFunc(ns, func(a, b named) int { return cmp.Compare(b.mtime, a.mtime) })
	for _, n := range ns {
		p.list = append(p.list, n.pk)
	}
}

// open opens the index and the pack and loads the index's header.
func (pk *pack) open() bool {
	if pk.opened {
		return !pk.bad
	}
	pk.opened, pk.bad = true, true
	idx, err := os.Open(pk.name + ".idx")
	if err != nil {
		return false
	}
	pk.files = append(pk.files, idx)
	data, err := os.Open(pk.name + ".pack")
	if err != nil {
		return false
	}
	pk.files = append(pk.files, data)
	ifi, err := idx.Stat()
	if err != nil {
		return false
	}
	dfi, err := data.Stat()
	if err != nil {
		return false
	}
	pk.bad = !pk.load(idx, ifi.Size(), data, dfi.Size())
	return !pk.bad
}

// load reads the index's header and fan-out table, and checks that the
// index is as long as they say.
func (pk *pack) load(idx io.ReaderAt, idxSize int64, data io.ReaderAt, size int64) bool {
	pk.idx, pk.data, pk.size = idx, data, size
	var head [8 + 256*4]byte
	if _, err := idx.ReadAt(head[:], 0); err != nil || !bytes.Equal(head[:8], []byte{0xff, 't', 'O', 'c', 0, 0, 0, 2}) {
		return false
	}
	for i := range pk.fanout {
		pk.fanout[i] = binary.BigEndian.Uint32(head[8+4*i:])
		if i > 0 && pk.fanout[i] < pk.fanout[i-1] {
			return false
		}
	}
	pk.count = pk.fanout[255]
	// Names, CRCs and offsets, then the two checksums (64-bit offsets may follow).
	return size >= 32 && idxSize >= int64(8+256*4)+28*int64(pk.count)+40
}

// find returns the pack offset of the object id.
func (pk *pack) find(id [20]byte) (int64, bool) {
	if !pk.open() {
		return 0, false
	}
	lo := uint32(0)
	if id[0] > 0 {
		lo = pk.fanout[id[0]-1]
	}
	hi := pk.fanout[id[0]]
	if hi <= lo || hi > pk.count {
		return 0, false
	}
	names := make([]byte, 20*(hi-lo))
	if _, err := pk.idx.ReadAt(names, int64(8+256*4)+20*int64(lo)); err != nil {
		return 0, false
	}
	n := int(hi - lo)
	i := sort.Search(n, func(i int) bool { return bytes.Compare(names[20*i:20*i+20], id[:]) >= 0 })
	if i == n || !bytes.Equal(names[20*i:20*i+20], id[:]) {
		return 0, false
	}
	pos := int64(lo) + int64(i)
	offsets := int64(8+256*4) + 24*int64(pk.count) // names, then CRCs
	var b [8]byte
	if _, err := pk.idx.ReadAt(b[:4], offsets+4*pos); err != nil {
		return 0, false
	}
	off := int64(binary.BigEndian.Uint32(b[:4]))
	if off&(1<<31) != 0 { // an index into the 64-bit offsets
		if _, err := pk.idx.ReadAt(b[:], offsets+4*int64(pk.count)+8*(off&(1<<31-1))); err != nil {
			return 0, false
		}
		off = int64(binary.BigEndian.Uint64(b[:]))
	}
	if off < 12 || off >= pk.size-20 {
		return 0, false
	}
	return off, true
}

// Pack entry types.
const (
	packCommit   = 1
	packTree     = 2
	packBlob     = 3
	packTag      = 4
	packOfsDelta = 6
	packRefDelta = 7
)

var packTypes = map[byte]string{packCommit: "commit", packTree: "tree", packBlob: "blob", packTag: "tag"}

// entry returns the object at off: its type and content, deltas applied.
// The objects met along a delta chain are kept (small ones, up to a
// budget): a landing reads several trees whose chains share their bases.
// The work is bounded: a chain that loops, or whose deltas together would
// produce more than twice the size limit, is left to cat-file.
func (pk *pack) entry(ps *packs, off int64, depth int) (string, []byte, error) {
	type link struct {
		at    packed
		delta []byte
	}
	var chain []link // outermost first
	seen := map[packed]bool{}
	var typ string
	var body []byte
	for ; ; depth++ {
		at := packed{pk, off}
		if c, ok := ps.kept[at]; ok {
			typ, body = c.typ, c.body
			break
		}
		if depth > maxDeltaChain || seen[at] {
			return "", nil, errors.New("delta chain too deep, or looping")
		}
		seen[at] = true
		r := bufio.NewReaderSize(io.NewSectionReader(pk.data, off, pk.size-20-off), 4096)
		kind, size, err := entryHeader(r, ps.limit)
		if err != nil {
			return "", nil, err
		}
		var baseOff int64
		var baseID [20]byte
		switch kind {
		case packOfsDelta:
			rel, err := ofsDelta(r)
			if err != nil || rel <= 0 || rel > off {
				return "", nil, errors.New("bad delta base offset")
			}
			baseOff = off - rel
		case packRefDelta:
			if _, err := io.ReadFull(r, baseID[:]); err != nil {
				return "", nil, err
			}
		}
		data, err := ps.inflate(r, size)
		if err != nil {
			return "", nil, err
		}
		if name, plain := packTypes[kind]; plain {
			typ, body = name, data
			ps.keep(at, typ, body)
			break
		}
		chain = append(chain, link{at, data})
		switch kind {
		case packOfsDelta:
			off = baseOff
		case packRefDelta:
			base, ok := ps.findAny(baseID)
			if !ok {
				return "", nil, errors.New("delta base not in a pack")
			}
			pk, off = base.pk, base.off
		default:
			return "", nil, fmt.Errorf("unknown pack entry type %d", kind)
		}
	}
	work := int64(len(body))
	for i := len(chain) - 1; i >= 0; i-- {
		var err error
		if body, err = applyDelta(body, chain[i].delta, ps.limit); err != nil {
			return "", nil, err
		}
		if work += int64(len(body)); work > 2*ps.limit {
			return "", nil, errors.New("delta chain too costly to read here")
		}
		ps.keep(chain[i].at, typ, body)
	}
	return typ, body, nil
}

// keptObject is an object read along a delta chain.
type keptObject struct {
	typ  string
	body []byte
}

// Bounds of what packs keeps: objects up to keepObject bytes, keepTotal in
// all (a landing's commits and trees are a few KB each).
const (
	keepObject = 256 << 10
	keepTotal  = 16 << 20
)

// keep remembers the object at at; p.mu is held. Kept bodies are shared:
// nobody writes to an object's content.
func (p *packs) keep(at packed, typ string, body []byte) {
	if len(body) > keepObject || p.keptBytes+len(body) > keepTotal {
		return
	}
	if p.kept == nil {
		p.kept = map[packed]keptObject{}
	}
	p.kept[at] = keptObject{typ, body}
	p.keptBytes += len(body)
}

type packed struct {
	pk  *pack
	off int64
}

// findAny finds id in any pack (a REF_DELTA's base); p.mu is held.
func (p *packs) findAny(id [20]byte) (packed, bool) {
	for _, pk := range p.list {
		if off, ok := pk.find(id); ok {
			return packed{pk, off}, true
		}
	}
	return packed{}, false
}

// entryHeader reads a pack entry's type and inflated size.
func entryHeader(r io.ByteReader, limit int64) (byte, int64, error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	typ, size := (c>>4)&7, int64(c&15)
	for shift := 4; c&0x80 != 0; shift += 7 {
		if shift > 56 {
			return 0, 0, errors.New("bad entry size")
		}
		if c, err = r.ReadByte(); err != nil {
			return 0, 0, err
		}
		size |= int64(c&0x7f) << shift
	}
	if size > limit {
		return 0, 0, errors.New("object too large to read here")
	}
	return typ, size, nil
}

// ofsDelta reads an OFS_DELTA's distance back to its base.
func ofsDelta(r io.ByteReader) (int64, error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	rel := int64(c & 0x7f)
	for c&0x80 != 0 {
		if rel > 1<<55 {
			return 0, errors.New("bad delta offset")
		}
		if c, err = r.ReadByte(); err != nil {
			return 0, err
		}
		rel = (rel+1)<<7 | int64(c&0x7f)
	}
	return rel, nil
}

// inflate reads exactly size bytes of zlib data from r, with one
// decompressor reused for every read (p.mu is held).
func (p *packs) inflate(r io.Reader, size int64) ([]byte, error) {
	var err error
	if p.zr == nil {
		p.zr, err = zlib.NewReader(r)
	} else {
		err = p.zr.(zlib.Resetter).Reset(r, nil)
	}
	if err != nil {
		return nil, err
	}
	// Read as it inflates (a damaged entry fails before its stated size is
	// ever allocated).
	var body bytes.Buffer
	body.Grow(int(min(size, 64<<10)))
	if _, err := io.Copy(&body, io.LimitReader(p.zr, size)); err != nil {
		return nil, err
	}
	if int64(body.Len()) != size {
		return nil, errors.New("short pack entry")
	}
	return body.Bytes(), nil
}

// applyDelta applies a git delta (base size, result size, then copy and
// insert instructions) to base.
func applyDelta(base, delta []byte, limit int64) ([]byte, error) {
	bad := errors.New("malformed delta")
	varint := func() (int, bool) {
		v, shift := 0, 0
		for {
			if len(delta) == 0 || shift > 56 {
				return 0, false
			}
			c := delta[0]
			delta = delta[1:]
			v |= int(c&0x7f) << shift
			if c&0x80 == 0 {
				return v, true
			}
			shift += 7
		}
	}
	srcSize, ok := varint()
	if !ok || srcSize != len(base) {
		return nil, bad
	}
	dstSize, ok := varint()
	if !ok || int64(dstSize) > limit {
		return nil, bad
	}
	out := make([]byte, 0, min(dstSize, 1<<20)) // grows as the instructions prove the size
	for len(delta) > 0 {
		op := delta[0]
		delta = delta[1:]
		switch {
		case op&0x80 != 0: // copy from base
			var off, n int
			for i := range 7 {
				if op&(1<<i) == 0 {
					continue
				}
				if len(delta) == 0 {
					return nil, bad
				}
				if i < 4 {
					off |= int(delta[0]) << (8 * i)
				} else {
					n |= int(delta[0]) << (8 * (i - 4))
				}
				delta = delta[1:]
			}
			if n == 0 {
				n = 0x10000
			}
			if off+n > len(base) || len(out)+n > dstSize {
				return nil, bad
			}
			out = append(out, base[off:off+n]...)
		case op != 0: // insert op bytes
			n := int(op)
			if n > len(delta) || len(out)+n > dstSize {
				return nil, bad
			}
			out = append(out, delta[:n]...)
			delta = delta[n:]
		default:
			return nil, bad
		}
	}
	if len(out) != dstSize {
		return nil, bad
	}
	return out, nil
}

// looseID is the id of an object of type typ with content.
func looseID(typ string, content []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "%s %d\x00", typ, len(content))
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil))
}
