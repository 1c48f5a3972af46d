package land

import (
	"context"
	"fmt"
	"strings"

	"github.com/conductor-dev/conductor/patch/git"
)

// Objects are read through patch/git (go-git's reader, one cat-file for
// names git must resolve); this file keeps land's few helpers around it
// and the receipt trailers' format.

// lookup resolves names through the landing's reader.
func (l *lander) lookup(names ...string) ([]git.Object, error) { return l.cat.GetAll(names...) }

// readCommit resolves rev to a commit and parses it.
func readCommit(ctx context.Context, g git.Git, rev string) (git.Commit, error) {
	objs, err := git.Lookup(ctx, g, rev+"^{commit}")
	if err != nil {
		return git.Commit{}, err
	}
	if objs[0].ID == "" {
		return git.Commit{}, fmt.Errorf("%s: no such commit", rev)
	}
	return git.ParseCommit(objs[0].ID, objs[0].Content)
}

// treeEntries reads a tree ("" is the empty tree).
func (l *lander) treeEntries(id string) ([]git.TreeEntry, bool) {
	if id == "" {
		return nil, true
	}
	o, err := l.cat.Get(id)
	if err != nil || o.Type != "tree" {
		return nil, false
	}
	es, err := git.ParseTree(o.Content)
	return es, err == nil
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
