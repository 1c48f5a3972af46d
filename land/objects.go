package land

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	gitobject "github.com/go-git/go-git/v5/plumbing/object"

	"github.com/conductor-dev/conductor/patch"
)

// emptyTree is the id of the empty tree (SHA-1 repositories).
const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// object is one answer of `git cat-file --batch`.
type object struct {
	Name    string // what was asked
	OID     string // "" when missing
	Type    string
	Content []byte
}

// lookup resolves names (refs, ids) in one git process and returns their
// object ids, types and contents, in order. Missing names have OID "".
func lookup(ctx context.Context, g patch.Git, names ...string) ([]object, error) {
	var in bytes.Buffer
	for _, n := range names {
		if n == "" || strings.ContainsAny(n, "\n\r") {
			return nil, fmt.Errorf("lookup: bad object name %q", n)
		}
		in.WriteString(n)
		in.WriteByte('\n')
	}
	out, err := g.RunInput(ctx, &in, "cat-file", "--batch")
	if err != nil {
		return nil, err
	}
	r := bufio.NewReader(bytes.NewReader(out))
	objs := make([]object, 0, len(names))
	for _, n := range names {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("lookup %s: short cat-file output", n)
		}
		f := strings.Fields(line)
		if len(f) == 2 && (f[1] == "missing" || f[1] == "ambiguous") {
			objs = append(objs, object{Name: n})
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("lookup %s: unexpected cat-file output %q", n, line)
		}
		size, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, fmt.Errorf("lookup %s: bad size in %q", n, line)
		}
		body := make([]byte, size+1)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, fmt.Errorf("lookup %s: short object: %w", n, err)
		}
		objs = append(objs, object{Name: n, OID: f[0], Type: f[1], Content: body[:size]})
	}
	return objs, nil
}

// commit is the part of a commit object land reads.
type commit struct {
	OID     string
	Tree    string
	Parents []string
	Author  ident
	Message string
}

// ident is an author or committer line: name, email, raw date ("<unix> <tz>").
type ident struct {
	Name, Email, Date string
}

func (i ident) env(prefix string) []string {
	return []string{prefix + "_NAME=" + i.Name, prefix + "_EMAIL=" + i.Email, prefix + "_DATE=@" + i.Date}
}

func parseIdent(s string) (ident, bool) {
	lt := strings.IndexByte(s, '<')
	gt := strings.LastIndexByte(s, '>')
	if lt < 0 || gt < lt {
		return ident{}, false
	}
	return ident{
		Name:  strings.TrimSpace(s[:lt]),
		Email: s[lt+1 : gt],
		Date:  strings.TrimSpace(s[gt+1:]),
	}, true
}

// parseCommit decodes a raw commit object with go-git's commit decoder (it
// knows every header, multi-line signatures included).
func parseCommit(oid string, raw []byte) (commit, error) {
	obj := &plumbing.MemoryObject{}
	obj.SetType(plumbing.CommitObject)
	if _, err := obj.Write(raw); err != nil {
		return commit{OID: oid}, err
	}
	var gc gitobject.Commit
	if err := gc.Decode(obj); err != nil {
		return commit{OID: oid}, fmt.Errorf("commit %s: %w", oid, err)
	}
	if gc.TreeHash.IsZero() {
		return commit{OID: oid}, fmt.Errorf("commit %s: no tree", oid)
	}
	if gc.Author.Email == "" && gc.Author.Name == "" {
		return commit{OID: oid}, fmt.Errorf("commit %s: bad author line", oid)
	}
	c := commit{OID: oid, Tree: gc.TreeHash.String(), Message: gc.Message,
		Author: ident{Name: gc.Author.Name, Email: gc.Author.Email,
			Date: fmt.Sprintf("%d %s", gc.Author.When.Unix(), gc.Author.When.Format("-0700"))}}
	for _, p := range gc.ParentHashes {
		c.Parents = append(c.Parents, p.String())
	}
	return c, nil
}

// readCommit resolves rev to a commit and parses it.
func readCommit(ctx context.Context, g patch.Git, rev string) (commit, error) {
	objs, err := lookup(ctx, g, rev+"^{commit}")
	if err != nil {
		return commit{}, err
	}
	if objs[0].OID == "" {
		return commit{}, fmt.Errorf("%s: no such commit", rev)
	}
	return parseCommit(objs[0].OID, objs[0].Content)
}

// Trailer is one "Key: value" line of a commit message's trailer block.
type Trailer struct {
	Key, Value string
}

// splitTrailers returns the message without its trailing trailer block and
// the trailers of that block. A block is the last paragraph (not the first)
// when every line of it is "Token: value".
func splitTrailers(msg string) (string, []Trailer) {
	body := strings.TrimRight(msg, "\n")
	i := strings.LastIndex(body, "\n\n")
	if i < 0 {
		// The first paragraph is the subject, never a trailer block.
		return msg, nil
	}
	var ts []Trailer
	for _, line := range strings.Split(strings.TrimSpace(body[i+2:]), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok || !isToken(k) {
			return msg, nil
		}
		ts = append(ts, Trailer{Key: k, Value: strings.TrimSpace(v)})
	}
	if len(ts) == 0 {
		return msg, nil
	}
	return strings.TrimRight(body[:i], "\n") + "\n", ts
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// trailer returns the last value of key (case-insensitive) or "".
func trailer(ts []Trailer, key string) string {
	v := ""
	for _, t := range ts {
		if strings.EqualFold(t.Key, key) {
			v = t.Value
		}
	}
	return v
}
