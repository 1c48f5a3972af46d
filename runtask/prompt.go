package runtask

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/conductor-dev/conductor/patch"
	pgit "github.com/conductor-dev/conductor/patch/git"
)

// DefaultPromptLimit bounds each file the system prompt is built from (the
// role file and the brief) when the role sets no limits.promptBytes.
const DefaultPromptLimit = 256 << 10

// RoleFileDir is where a repository keeps its role prompts, one
// role-<name>.md per role (the seed's .cursor/agents/role-*.md).
const RoleFileDir = ".cursor/agents"

// Prompt source kinds.
const (
	SourceRoleFile     = "role-file"     // .cursor/agents/role-<name>.md at the base commit
	SourceRoleContract = "role-contract" // the contract's systemPrompt (no role file)
	SourceBrief        = "brief"
)

// PromptSource names one file the system prompt was built from; the
// transcript's first entry lists them.
type PromptSource struct {
	Kind string `json:"kind"`
	// Path is the repository path (read at Commit) or, for a run-task
	// brief beside its task file, the file's path on disk.
	Path   string `json:"path"`
	Commit string `json:"commit,omitempty"`
	// Blob is the file's git blob id (for a file on disk, the id git gives
	// its content).
	Blob  string `json:"blob,omitempty"`
	Bytes int    `json:"bytes"`
}

// promptLimiter is implemented by roles that bound their prompt files
// (*policy.Role: limits.promptBytes).
type promptLimiter interface{ PromptLimit() int }

// builtPrompt is what the model is told first, and where it came from.
type builtPrompt struct {
	Text    string
	Sources []PromptSource
}

// buildPrompt builds the system prompt of a new run: the repository's
// .cursor/agents/role-<name>.md at the base commit, else the contract's
// systemPrompt; then the task's brief.
//
// Both files are read from the base commit through git, never from a
// working tree a worker, a gate or a landing could have written. A brief is
// a path in the repository, except for a task dispatched from a task file
// (taskPath set): then a relative brief is beside the task file and an
// absolute one is the operator's file.
func buildPrompt(ctx context.Context, repo patch.Git, base string, role RolePolicy, task Task, taskPath string) (builtPrompt, error) {
	limit := DefaultPromptLimit
	if pl, ok := role.(promptLimiter); ok && pl.PromptLimit() > 0 {
		limit = pl.PromptLimit()
	}
	git := patch.Git{GitDir: repo.CommonDir()}
	var sp builtPrompt
	roleFile := RoleFileDir + "/role-" + role.Name() + ".md"
	body, src, err := readAtBase(ctx, git, base, roleFile, limit)
	switch {
	case err != nil:
		return sp, fmt.Errorf("task %s: role %s: %w", task.ID, role.Name(), err)
	case body != nil:
		src.Kind = SourceRoleFile
		sp.Text = strings.TrimSpace(string(body))
		sp.Sources = append(sp.Sources, src)
	default:
		sp.Text = strings.TrimSpace(role.SystemPrompt())
		cs := PromptSource{Kind: SourceRoleContract, Path: "roles/" + role.Name() + ".json", Bytes: len(role.SystemPrompt())}
		if s, ok := role.(interface{ Source() string }); ok && s.Source() != "" {
			cs.Path = s.Source()
		}
		sp.Sources = append(sp.Sources, cs)
	}
	if task.Brief == "" {
		return sp, nil
	}
	var brief []byte
	if taskPath != "" {
		p := task.Brief
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(taskPath), p)
		}
		if brief, src, err = readBriefFile(ctx, git, p, limit); err != nil {
			return sp, fmt.Errorf("task %s: %w", task.ID, err)
		}
	} else {
		rel, err := repoPath(task.Brief)
		if err != nil {
			return sp, fmt.Errorf("task %s: brief %q: %w", task.ID, task.Brief, err)
		}
		brief, src, err = readAtBase(ctx, git, base, rel, limit)
		if err != nil {
			return sp, fmt.Errorf("task %s: brief: %w", task.ID, err)
		}
		if brief == nil {
			return sp, fmt.Errorf("task %s: brief %s: not in the repository at the base commit %s (a job's brief is read from the repository, never a working tree: commit it)", task.ID, rel, patch.Short(base))
		}
	}
	src.Kind = SourceBrief
	sp.Sources = append(sp.Sources, src)
	if b := strings.TrimSpace(string(brief)); sp.Text == "" {
		sp.Text = b
	} else {
		sp.Text += "\n\n" + b
	}
	return sp, nil
}

// repoPath is p as a clean repository path, or why it is not one.
func repoPath(p string) (string, error) {
	if filepath.IsAbs(p) || strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("outside the repository: a job's brief is a path in the repository (e.g. .convoys/brief.md)")
	}
	c := path.Clean(strings.ReplaceAll(p, "\\", "/"))
	if c == "." || c == ".." || strings.HasPrefix(c, "../") || !filepath.IsLocal(c) {
		return "", fmt.Errorf("outside the repository: a job's brief is a path in the repository (e.g. .convoys/brief.md)")
	}
	return c, nil
}

// readAtBase reads the regular file p of the base commit's tree: nil (and
// no error) when the tree has no such path; an error when it is not a
// regular file, larger than limit or not UTF-8 text. The trees and the
// blob are read in process (patch/git's object reader, each object checked
// against its id; what it cannot read goes to its cat-file): no git
// process per prompt file.
func readAtBase(ctx context.Context, g patch.Git, base, p string, limit int) ([]byte, PromptSource, error) {
	src := PromptSource{Path: p, Commit: base}
	objs := pgit.NewObjects(ctx, g)
	defer objs.Close()
	cur, err := objs.Get(base + "^{tree}")
	if err != nil {
		return nil, src, fmt.Errorf("%s at %s: %w", p, patch.Short(base), err)
	}
	if cur.ID == "" || cur.Type != "tree" {
		return nil, src, fmt.Errorf("%s at %s: no such commit in %s", p, patch.Short(base), g.CommonDir())
	}
	parts := strings.Split(p, "/")
	var entry pgit.TreeEntry
	for i, part := range parts {
		es, err := pgit.ParseTree(cur.Content)
		if err != nil {
			return nil, src, fmt.Errorf("%s at %s: tree %s: %w", p, patch.Short(base), cur.ID, err)
		}
		j := slices.IndexFunc(es, func(e pgit.TreeEntry) bool { return e.Name == part })
		if j < 0 {
			return nil, src, nil
		}
		entry = es[j]
		if i == len(parts)-1 {
			break
		}
		if entry.Mode != pgit.ModeTree {
			return nil, src, nil // a file where a folder was named
		}
		if cur, err = objs.Get(entry.Hash.String()); err != nil || cur.Type != "tree" {
			return nil, src, fmt.Errorf("%s at %s: tree %s unreadable: %v", p, patch.Short(base), entry.Hash, err)
		}
	}
	switch entry.Mode {
	case pgit.ModeTree:
		return nil, src, nil // p names a folder
	case pgit.ModeFile, pgit.ModeExec:
	default:
		kind := "blob"
		if entry.Mode == pgit.ModeGitlink {
			kind = "commit"
		}
		return nil, src, fmt.Errorf("%s at %s: not a regular file (mode %06o %s)", p, patch.Short(base), uint32(entry.Mode), kind)
	}
	src.Blob = entry.Hash.String()
	blob, err := objs.Get(src.Blob)
	if err != nil || blob.ID == "" || blob.Type != "blob" {
		return nil, src, fmt.Errorf("%s at %s: blob %s unreadable: %v", p, patch.Short(base), src.Blob, err)
	}
	body := blob.Content
	if len(body) > limit {
		return nil, src, fmt.Errorf("%s at %s: %d bytes is larger than the role's prompt limit of %d bytes (limits.promptBytes)", p, patch.Short(base), len(body), limit)
	}
	if !utf8.Valid(body) || bytes.IndexByte(body, 0) >= 0 {
		return nil, src, fmt.Errorf("%s at %s: not UTF-8 text", p, patch.Short(base))
	}
	src.Bytes = len(body)
	return body, src, nil
}

// readBriefFile reads a run-task brief from disk, within limit and UTF-8.
func readBriefFile(ctx context.Context, git patch.Git, p string, limit int) ([]byte, PromptSource, error) {
	src := PromptSource{Path: p}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, src, fmt.Errorf("brief: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, src, fmt.Errorf("brief %s: not a regular file", p)
	}
	if fi.Size() > int64(limit) {
		return nil, src, fmt.Errorf("brief %s: %d bytes is larger than the role's prompt limit of %d bytes (limits.promptBytes)", p, fi.Size(), limit)
	}
	body, err := os.ReadFile(p)
	if err != nil {
		return nil, src, fmt.Errorf("brief: %w", err)
	}
	if !utf8.Valid(body) || bytes.IndexByte(body, 0) >= 0 {
		return nil, src, fmt.Errorf("brief %s: not UTF-8 text", p)
	}
	src.Bytes = len(body)
	if id, err := git.RunInput(ctx, bytes.NewReader(body), "hash-object", "--stdin"); err == nil {
		src.Blob = strings.TrimSpace(string(id))
	}
	return body, src, nil
}

// CheckPrompt builds the system prompt a new run of opts.Task would start
// with, without creating anything: the dispatcher refuses a job whose role
// file or brief cannot be used before it claims or creates anything.
func CheckPrompt(ctx context.Context, opts Options) ([]PromptSource, error) {
	if opts.Role == nil {
		return nil, fmt.Errorf("task %s: no role contract given", opts.Task.ID)
	}
	cfg := opts.Config.WithDefaults()
	repo, err := ResolveRepo(opts.Repo, opts.Task.Workspace, cfg)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", opts.Task.ID, err)
	}
	base, err := ResolveBase(ctx, repo, opts.Task.Base)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", opts.Task.ID, err)
	}
	sp, err := buildPrompt(ctx, repo, base, opts.Role, opts.Task, opts.TaskPath)
	return sp.Sources, err
}
