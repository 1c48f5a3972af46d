package land

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// packHistory writes, with fast-import, a history whose blobs and trees
// change a little per commit (so a repack deltifies them), with a binary
// blob and a deep folder, and returns every object id in the repository.
func packHistory(t *testing.T, f *fixture) []string {
	t.Helper()
	var s bytes.Buffer
	body := func(i, n int) string {
		var b strings.Builder
		for j := range n {
			fmt.Fprintf(&b, "line %d of version %d\n", j, min(j, i))
		}
		return b.String()
	}
	data := func(d string) { fmt.Fprintf(&s, "data %d\n%s\n", len(d), d) }
	for i := range 40 {
		fmt.Fprintf(&s, "commit refs/heads/packed\ncommitter T <t@example.test> %d +0000\n", 1700000000+i)
		data(fmt.Sprintf("version %d", i))
		if i == 0 {
			fmt.Fprintf(&s, "from refs/heads/main\n")
		}
		for k := range 5 {
			fmt.Fprintf(&s, "M 100644 inline dir%d/deep/er/file%d.txt\n", k%3, k)
			data(body(i+k, 200+i))
		}
		bin := bytes.Repeat([]byte{0, 1, 2, byte(i)}, 3000)
		fmt.Fprintf(&s, "M 100755 inline tools/blob.bin\ndata %d\n%s\n", len(bin), bin)
	}
	f.runIn("", &s, "git", "--git-dir="+f.gitdir, "fast-import", "--quiet")
	return strings.Fields(f.git("cat-file", "--batch-all-objects", "--batch-check=%(objectname)"))
}

// catFileAnswers reads ids through cat-file only (no loose or pack reads).
func catFileAnswers(t *testing.T, f *fixture, ids []string) map[string]object {
	t.Helper()
	b := newBatch(context.Background(), f.g)
	nowhere := filepath.Join(t.TempDir(), "nothing-here")
	b.objects, b.packs = nowhere, newPacks(nowhere)
	defer b.close()
	objs, err := b.getAll(ids...)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]object{}
	for _, o := range objs {
		o.Name = ""
		m[o.OID] = o
	}
	return m
}

// packTypesOf counts the pack entry types the ids are stored as.
func packTypesOf(t *testing.T, p *packs, ids []string) map[byte]int {
	t.Helper()
	p.once.Do(p.scan)
	counts := map[byte]int{}
	for _, id := range ids {
		var want [20]byte
		hex.Decode(want[:], []byte(id))
		at, ok := p.findAny(want)
		if !ok {
			t.Fatalf("%s: in no pack", id)
		}
		f, err := os.Open(at.pk.name + ".pack")
		if err != nil {
			t.Fatal(err)
		}
		var head [1]byte
		f.ReadAt(head[:], at.off)
		f.Close()
		counts[(head[0]>>4)&7]++
	}
	return counts
}

// TestPacksMatchCatFile: every object of a packed repository read in
// process is exactly what cat-file gives, with offset deltas, ref deltas,
// 64-bit offsets and several packs; an index git would write in version 1
// and a damaged pack are not read here (cat-file answers instead).
func TestPacksMatchCatFile(t *testing.T) {
	f := newFixture(t)
	ids := packHistory(t, f)
	want := catFileAnswers(t, f, ids)
	objects := filepath.Join(f.gitdir, "objects")
	packDir := filepath.Join(objects, "pack")
	onlyPack := func() string {
		m, _ := filepath.Glob(filepath.Join(packDir, "pack-*.pack"))
		if len(m) != 1 {
			t.Fatalf("packs: %v", m)
		}
		return m[0]
	}
	reindex := func(args ...string) {
		p := onlyPack()
		os.Remove(strings.TrimSuffix(p, ".pack") + ".idx")
		f.run("git", append([]string{"--git-dir=" + f.gitdir, "index-pack"}, append(args, p)...)...)
	}
	check := func(name string, wantTypes ...byte) {
		t.Helper()
		p := newPacks(objects)
		defer p.close()
		for _, id := range ids {
			got, ok := p.read(id)
			if !ok {
				t.Fatalf("%s: %s not read from the packs", name, id)
			}
			if w := want[id]; got.Type != w.Type || !bytes.Equal(got.Content, w.Content) {
				t.Fatalf("%s: %s read as %s (%d bytes), cat-file says %s (%d bytes)", name, id, got.Type, len(got.Content), w.Type, len(w.Content))
			}
		}
		types := packTypesOf(t, p, ids)
		for _, typ := range wantTypes {
			if types[typ] == 0 {
				t.Fatalf("%s: no entry of type %d (the case is not covered): %v", name, typ, types)
			}
		}
	}

	f.git("repack", "-adfq")
	f.git("prune-packed")
	check("offset deltas", packOfsDelta)
	f.git("-c", "repack.useDeltaBaseOffset=false", "repack", "-adfq")
	check("ref deltas", packRefDelta)
	reindex("--index-version=2,4096")
	if fi, err := os.Stat(strings.TrimSuffix(onlyPack(), ".pack") + ".idx"); err != nil || fi.Size() < int64(8+1024+28*len(ids)+40+8*10) {
		t.Fatalf("the index has (almost) no 64-bit offsets: %v %v", fi.Size(), err)
	}
	check("64-bit offsets", packRefDelta)

	// Two packs: half the objects written again into a second one.
	f.git("repack", "-adfq")
	var half bytes.Buffer
	for _, id := range ids[:len(ids)/2] {
		half.WriteString(id + "\n")
	}
	f.runIn("", &half, "git", "--git-dir="+f.gitdir, "pack-objects", "-q", filepath.Join(packDir, "pack"))
	check("two packs", packOfsDelta)

	// What is not read here still reads right through the landing's batch.
	f.git("repack", "-adfq")
	reindex("--index-version=1")
	p := newPacks(objects)
	if _, ok := p.read(ids[0]); ok {
		t.Fatal("an index of version 1 was read")
	}
	p.close()
	f.git("repack", "-adfq")
	pk := onlyPack()
	raw, err := os.ReadFile(pk)
	if err != nil {
		t.Fatal(err)
	}
	for i := 40; i < len(raw)-20; i += 97 { // damage every entry, not the trailer
		raw[i] ^= 0x55
	}
	os.Chmod(pk, 0o644)
	if err := os.WriteFile(pk, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	p = newPacks(objects)
	defer p.close()
	read := 0
	for _, id := range ids {
		if got, ok := p.read(id); ok {
			read++
			if w := want[id]; got.Type != w.Type || !bytes.Equal(got.Content, w.Content) {
				t.Fatalf("damaged pack: %s read wrong", id)
			}
		}
	}
	if read == len(ids) {
		t.Fatal("a damaged pack read completely")
	}
}

// TestApplyDelta: git's delta format, and malformed deltas refused without
// a panic.
func TestApplyDelta(t *testing.T) {
	base := []byte("0123456789abcdef")
	// source 16, result 10: copy 4 bytes at offset 2, insert "xyz", copy 3 at 13.
	delta := []byte{16, 10, 0x80 | 0x01 | 0x10, 2, 4, 3, 'x', 'y', 'z', 0x80 | 0x01 | 0x10, 13, 3}
	got, err := applyDelta(base, delta, maxObject)
	if err != nil || string(got) != "2345xyzdef" {
		t.Fatalf("got %q, %v", got, err)
	}
	for _, bad := range [][]byte{
		{},                                 // no sizes
		{15, 10},                           // wrong source size
		{16, 11, 0x80 | 0x01 | 0x10, 2, 4}, // shorter result than said
		{16, 4, 0x80 | 0x01 | 0x10, 14, 4}, // copy past the base
		{16, 4, 0},                         // reserved instruction
		{16, 4, 5, 'a'},                    // insert past the delta
		{16, 2, 3, 'a', 'b', 'c'},          // result longer than said
		{16, 4, 0x80 | 0x01},               // copy with a missing offset byte
	} {
		if out, err := applyDelta(base, bad, maxObject); err == nil {
			t.Errorf("delta %v applied: %q", bad, out)
		}
	}
}

func FuzzApplyDelta(f *testing.F) {
	f.Add([]byte("0123456789abcdef"), []byte{16, 10, 0x91, 2, 4, 3, 'x', 'y', 'z', 0x91, 13, 3})
	f.Fuzz(func(t *testing.T, base, delta []byte) {
		out, err := applyDelta(base, delta, 1<<16)
		if err == nil && len(out) > 1<<16 {
			t.Fatal("result over the bound")
		}
	})
}

// FuzzPackRead: any index and pack bytes are read without a panic or an
// unbounded allocation, and whatever is read is the object asked for.
func FuzzPackRead(f *testing.F) {
	// A real pair as the seed: a small repository, packed.
	dir := f.TempDir()
	run := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = gitEnv(dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			f.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run("init", "-q")
	os.WriteFile(filepath.Join(dir, "a.txt"), bytes.Repeat([]byte("line\n"), 50), 0o644)
	run("add", ".")
	run("commit", "-qm", "one")
	os.WriteFile(filepath.Join(dir, "a.txt"), bytes.Repeat([]byte("line!\n"), 50), 0o644)
	run("commit", "-qam", "two")
	run("repack", "-adq")
	idxs, _ := filepath.Glob(filepath.Join(dir, ".git", "objects", "pack", "*.idx"))
	if len(idxs) != 1 {
		f.Fatalf("packs: %v", idxs)
	}
	idx, err := os.ReadFile(idxs[0])
	if err != nil {
		f.Fatal(err)
	}
	data, err := os.ReadFile(strings.TrimSuffix(idxs[0], ".idx") + ".pack")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(idx, data, 0)
	f.Add(idx, data, 3)
	f.Fuzz(func(t *testing.T, idx, data []byte, which int) {
		pk := &pack{opened: true}
		pk.bad = !pk.load(bytes.NewReader(idx), int64(len(idx)), bytes.NewReader(data), int64(len(data)))
		p := &packs{list: []*pack{pk}, limit: 1 << 16} // small: every input stays quick
		p.once.Do(func() {})
		// Ask for a name the index lists (when it has one), else any id.
		id := strings.Repeat("ab", 20)
		if n := int(pk.count); !pk.bad && n > 0 {
			i := (which%n + n) % n
			id = hex.EncodeToString(idx[8+256*4+20*i : 8+256*4+20*i+20])
		}
		if o, ok := p.read(id); ok && (o.OID != id || looseID(o.Type, o.Content) != id) {
			t.Fatalf("read %s as %s", id, o.OID)
		}
	})
}
