package mcp

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/conductor-dev/conductor/conductor/bus"
)

// FuzzReadRunFile: whatever URI an agent asks for, the only files served
// are a run folder's transcript.jsonl and patch.diff; nothing outside the
// runs folder (here: a secret beside it, and one reached by a symlink).
func FuzzReadRunFile(f *testing.F) {
	root := f.TempDir()
	runs := filepath.Join(root, "runs")
	for _, p := range []string{"runs/r-1/transcript.jsonl", "runs/r-1/patch.diff", "secret", "runs/r-1/secret"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte("content of "+p), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "secret"), filepath.Join(runs, "r-1", "link")); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink(root, filepath.Join(runs, "r-up")); err != nil {
		f.Fatal(err)
	}
	st, err := bus.Open(context.Background(), bus.Options{DataRoot: root})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	s, err := New(Options{Store: st, RunsDir: runs, BacklogDir: filepath.Join(root, "backlog")})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		"conductor://runs/r-1/transcript", "conductor://runs/r-1/patch", "conductor://runs/../secret",
		"conductor://runs/r-1/../../secret/patch", "conductor://runs/r-up/secret", "conductor://runs/r-1/link",
		"conductor://runs/r-up/runs/patch", "conductor://runs/%2e%2e/patch", "conductor://runs//patch", "file:///etc/passwd",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		res, err := s.readRunFile(context.Background(), &sdk.ReadResourceRequest{Params: &sdk.ReadResourceParams{URI: uri}})
		if err != nil {
			return
		}
		if len(res.Contents) != 1 {
			t.Fatalf("%q: %d contents", uri, len(res.Contents))
		}
		got := res.Contents[0].Text
		if got != "content of runs/r-1/transcript.jsonl" && got != "content of runs/r-1/patch.diff" {
			t.Fatalf("%q served %q", uri, got)
		}
		if !strings.HasPrefix(uri, uriPrefix+"r-1/") {
			t.Fatalf("%q served a run file of another name", uri)
		}
	})
}
