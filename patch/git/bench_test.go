package git

import (
	"bytes"
	"context"
	"fmt"
	"testing"
)

// BenchmarkObjectsCold: what a landing's first reads cost through go-git
// on a fresh reader (a fresh process, as `conductor land` is): a packed
// repository of 10,000 files in 2,000 folders, its ref read, its commit,
// root tree and one folder read by id. docs/adr-git-objects.md quotes it.
func BenchmarkObjectsCold(b *testing.B) {
	r := &repo{t: b, gitDir: b.TempDir() + "/r.git", home: b.TempDir()}
	var s bytes.Buffer
	s.WriteString("commit refs/heads/main\ncommitter T <t@example.test> 1 +0000\ndata 1\nx\n")
	for i := range 10000 {
		body := fmt.Sprintf("package p%d\n// %d\n", i/200, i)
		fmt.Fprintf(&s, "M 100644 inline pkg%02d/d%04d/f%d.go\ndata %d\n%s\n", i/200, i/5, i%5, len(body), body)
	}
	r.run(nil, "init", "-q", "--bare", r.gitDir)
	r.run(s.Bytes(), "fast-import", "--quiet")
	g := Git{GitDir: r.gitDir}
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		o := NewObjects(ctx, g)
		ids, err := ReadRefs(r.gitDir, "refs/heads/main")
		if err != nil {
			b.Fatal(err)
		}
		objs, err := o.GetAll(ids[0]+"^{commit}", ids[0]+"^{tree}")
		if err != nil || objs[1].ID == "" {
			b.Fatal(err)
		}
		if d, err := o.Get(objs[1].ID + ":pkg01/d0040"); err != nil || d.ID == "" {
			b.Fatal("folder not found", err)
		}
		if o.cmd != nil {
			b.Fatal("cat-file was started")
		}
		o.Close()
	}
}
