// Package record is the protocol's Record step (`conductor record`, `land
// --record`): after a landing, one line is appended to the build log
// (BUILD-LOG.md, or the path the landing policy names), the status section
// of CURRENT.md is rewritten, and the forge issue the decision names is
// closed.
//
// The landing policy's "record" object says where the two files live:
// outside the repository under the data root (mode "files", the default),
// or in the repository as one local commit on the target that changes
// those two files only, checked like a landing (target allowed, paths not
// forbidden, the target checked out elsewhere able to follow) and moved by
// compare-and-swap (mode "commit").
//
// It records only what the store says was landed: a decision with a
// landing row, or a commit whose Decision-Id trailer names one. It never
// lands, never pushes, and a refusal changes nothing (no file, no ref, no
// forge call but the read that found the issue missing). Recording the
// same landing again writes nothing.
package record

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/policy"
)

// Store is what recording reads from the bus store.
type Store interface {
	GetDecision(ctx context.Context, id string) (bus.Decision, error)
	GetLanding(ctx context.Context, decisionID string) (bus.Landing, error)
}

// Forge closes the issue a landing resolves (*forge.Gitea).
type Forge interface {
	forge.Forge
	RequireIssue(ctx context.Context, n int64) error
	IssueClosed(ctx context.Context, n int64) (bool, error)
}

// Identity is who makes the record commit (mode commit).
type Identity struct{ Name, Email string }

// Options configures one Record step.
type Options struct {
	Store Store
	// What to record: a decision id, or a landed commit of Repo.
	Ref string
	// Repo is the git dir a COMMIT is looked up in (a decision names its
	// own repository).
	Repo string
	// Rules returns the landing policy in force for a repository's target
	// (its committed tip, or the operator's roles folder): where to write.
	Rules func(ctx context.Context, repo, target string) (*policy.Landing, error)
	// DataRoot holds the record folder (mode files): <DataRoot>/records/<repo key>/.
	DataRoot string
	// Issue overrides the decision's issue (0: the decision's, -1: none).
	Issue int64
	// Forge, dialled by the caller, closes the issue; nil with an issue
	// to close is an error before anything is written.
	Forge func(repo string) (Forge, error)
	// Committer returns who makes the record commit (mode commit).
	Committer func(repo string) Identity
	Now       func() time.Time
}

// Entry is one landing as recorded.
type Entry struct {
	Decision string    `json:"decision"`
	Commit   string    `json:"commit"`
	Target   string    `json:"target"`
	PatchID  string    `json:"patchId"`
	RunID    string    `json:"runId,omitempty"`
	Model    string    `json:"model,omitempty"`
	Issue    int64     `json:"issue,omitempty"`
	LandedAt time.Time `json:"landedAt"`
}

// Result is what the Record step did.
type Result struct {
	Entry    Entry  `json:"entry"`
	Mode     string `json:"mode"`
	BuildLog string `json:"buildLog"` // the file's path (in the repository for mode commit)
	Current  string `json:"current"`
	// Commit is the record commit on the target (mode commit).
	Commit string `json:"commit,omitempty"`
	// Already: the build log held this landing; nothing was written.
	Already bool `json:"already,omitempty"`
	// IssueClosed: the issue was closed now; IssueWasClosed: it already was.
	IssueClosed    bool `json:"issueClosed,omitempty"`
	IssueWasClosed bool `json:"issueWasClosed,omitempty"`
}

var (
	hexID      = regexp.MustCompile(`^[0-9a-f]{4,64}$`)
	decisionID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	modelName  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$`)
)

// Run records one landing. A refusal (*refusal.Refusal) changes nothing.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	var res Result
	if o.Store == nil || o.Rules == nil {
		return res, errors.New("record: needs the bus store and the landing policy")
	}
	dec, land, err := resolve(ctx, o)
	if err != nil {
		return res, err
	}
	res.Entry = entryOf(ctx, dec, land)
	lr, err := o.Rules(ctx, dec.Repo, res.Entry.Target)
	if err != nil {
		return res, fmt.Errorf("record %s: %w", dec.ID, err)
	}
	rules := lr.Record()
	res.Mode, res.BuildLog, res.Current = rules.Mode, rules.BuildLog, rules.Current
	switch {
	case o.Issue > 0:
		res.Entry.Issue = o.Issue
	case o.Issue < 0:
		res.Entry.Issue = 0
	}
	g := patch.Git{GitDir: dec.Repo}

	// Everything that can refuse is asked before anything is written.
	var f Forge
	if n := res.Entry.Issue; n > 0 {
		if o.Forge == nil {
			return res, fmt.Errorf("record %s: issue #%d: no forge configured (nothing recorded)", dec.ID, n)
		}
		if f, err = o.Forge(dec.Repo); err != nil {
			return res, fmt.Errorf("record %s: issue #%d: %w (nothing recorded)", dec.ID, n, err)
		}
		if err := f.RequireIssue(ctx, n); err != nil {
			return res, fmt.Errorf("record %s: issue #%d: %w (nothing recorded)", dec.ID, n, err)
		}
	}
	switch rules.Mode {
	case policy.RecordCommit:
		err = recordCommit(ctx, o, g, lr, rules, &res)
	default:
		dir := filepath.Join(o.DataRoot, "records", repoKey(dec.Repo))
		res.BuildLog, res.Current = filepath.Join(dir, filepath.FromSlash(rules.BuildLog)), filepath.Join(dir, filepath.FromSlash(rules.Current))
		err = recordFiles(o, &res)
	}
	if err != nil {
		return res, err
	}
	if f != nil {
		closed, err := f.IssueClosed(ctx, res.Entry.Issue)
		if err == nil && closed {
			res.IssueWasClosed = true
			return res, nil
		}
		if err == nil {
			err = forge.CloseIssueAfterLanding(ctx, f, res.Entry.Issue, res.Entry.Commit, res.Entry.Target)
		}
		if err != nil {
			// %v: the record stands, so this is a failure, not a refusal.
			return res, fmt.Errorf("recorded %s, but closing issue #%d failed: %v", dec.ID, res.Entry.Issue, err)
		}
		res.IssueClosed = true
	}
	return res, nil
}

// resolve finds the decision and its landing: Ref is a decision id, or a
// commit of Repo whose Decision-Id trailer names a decision landed as
// exactly that commit.
func resolve(ctx context.Context, o Options) (bus.Decision, bus.Landing, error) {
	ref := strings.TrimSpace(o.Ref)
	if ref == "" || strings.ContainsAny(ref, "\x00\n") {
		return bus.Decision{}, bus.Landing{}, fmt.Errorf("record: %q is neither a decision id nor a commit", o.Ref)
	}
	id, commit, isDecision := ref, "", false
	if decisionID.MatchString(ref) {
		_, err := o.Store.GetDecision(ctx, ref)
		switch {
		case err == nil:
			isDecision = true
		case !errors.Is(err, bus.ErrNotFound):
			return bus.Decision{}, bus.Landing{}, fmt.Errorf("record %s: %w", ref, err)
		}
	}
	if !isDecision {
		// Not a decision: a commit of the repository.
		if o.Repo == "" {
			return bus.Decision{}, bus.Landing{}, fmt.Errorf("record: no decision %s, and no repository to look for a commit in: %w", ref, bus.ErrNotFound)
		}
		g := patch.Git{GitDir: o.Repo}
		c, err := g.Line(ctx, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}")
		if err != nil || c == "" {
			return bus.Decision{}, bus.Landing{}, fmt.Errorf("record: %s is neither a decision nor a commit of %s: %w", ref, o.Repo, bus.ErrNotFound)
		}
		commit = c
		msg, err := g.Run(ctx, "show", "-s", "--format=%B", c)
		if err != nil {
			return bus.Decision{}, bus.Landing{}, fmt.Errorf("record: read commit %s: %w", patch.Short(c), err)
		}
		if id = trailer(string(msg), "Decision-Id"); id == "" || !decisionID.MatchString(id) {
			return bus.Decision{}, bus.Landing{}, refusal.Newf(refusal.RecordNotLanded, "record the landing commit conductor land printed (or its decision id)",
				"commit %s is not a landing: it has no Decision-Id trailer", patch.Short(c))
		}
	}
	dec, err := o.Store.GetDecision(ctx, id)
	if err != nil {
		return dec, bus.Landing{}, fmt.Errorf("record %s: decision %s: %w", ref, id, err)
	}
	land, err := o.Store.GetLanding(ctx, id)
	if errors.Is(err, bus.ErrNotFound) {
		return dec, land, refusal.Newf(refusal.RecordNotLanded, "land it first (conductor land "+id+"), then record",
			"decision %s has not landed: there is nothing to record", id)
	}
	if err != nil {
		return dec, land, fmt.Errorf("record %s: landing: %w", id, err)
	}
	if commit != "" && land.Commit != commit {
		return dec, land, refusal.Newf(refusal.RecordNotLanded, "record the commit the decision landed as ("+patch.Short(land.Commit)+"), or the decision id",
			"commit %s names decision %s, which landed as %s", patch.Short(commit), id, patch.Short(land.Commit))
	}
	if !hexID.MatchString(land.Commit) || (land.PatchID != "" && !hexID.MatchString(land.PatchID)) {
		return dec, land, fmt.Errorf("record %s: the store's landing row is malformed (commit %q, patch-id %q)", id, land.Commit, land.PatchID)
	}
	if dec.Repo == "" {
		return dec, land, fmt.Errorf("record %s: the decision names no repository", id)
	}
	return dec, land, nil
}

// entryOf is the landing as recorded: only names that are safe on one
// line of Markdown (worker-influenced text, such as a model name, is
// dropped when it is not).
func entryOf(ctx context.Context, dec bus.Decision, land bus.Landing) Entry {
	e := Entry{Decision: dec.ID, Commit: land.Commit, Target: strings.TrimPrefix(cmp.Or(land.Target, dec.Target), "refs/heads/"),
		PatchID: land.PatchID, Issue: dec.Issue, LandedAt: land.LandedAt.UTC()}
	if runrec.ValidName(dec.RunID) {
		e.RunID = dec.RunID
	}
	if msg, err := (patch.Git{GitDir: dec.Repo}).Run(ctx, "show", "-s", "--format=%B", land.Commit); err == nil {
		if m := trailer(string(msg), "Model"); modelName.MatchString(m) {
			e.Model = m
		}
	}
	if !safeRef(e.Target) {
		e.Target = "?"
	}
	return e
}

var refName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,200}$`)

func safeRef(s string) bool { return refName.MatchString(s) && !strings.Contains(s, "..") }

// trailer returns the last value of key among the message's trailer lines.
func trailer(msg, key string) string {
	v := ""
	sc := bufio.NewScanner(strings.NewReader(msg))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			v = strings.TrimSpace(rest)
		}
	}
	return v
}

// Line is the build log's line for e. It names the landed commit in full,
// so a line already there is found again (recording twice writes nothing).
func Line(e Entry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "- %s landed %s as %s on %s", e.LandedAt.Format(time.RFC3339), e.Decision, e.Commit, e.Target)
	var more []string
	if e.RunID != "" {
		more = append(more, "run "+e.RunID)
	}
	if e.PatchID != "" {
		more = append(more, "patch-id "+e.PatchID)
	}
	if e.Model != "" {
		more = append(more, "model "+e.Model)
	}
	if e.Issue > 0 {
		more = append(more, "issue #"+strconv.FormatInt(e.Issue, 10))
	}
	if len(more) > 0 {
		b.WriteString(" (" + strings.Join(more, ", ") + ")")
	}
	return b.String()
}

const buildLogHead = "# Build log\n\nOne line per landing, appended by `conductor record` (oldest first).\n\n"

// appendLine returns the build log with e's line appended, and whether it
// was there already.
func appendLine(log []byte, e Entry) ([]byte, bool) {
	if bytes.Contains(log, []byte(" as "+e.Commit+" on ")) {
		return log, true
	}
	if len(bytes.TrimSpace(log)) == 0 {
		log = []byte(buildLogHead)
	} else if !bytes.HasSuffix(log, []byte("\n")) {
		log = append(log, '\n')
	}
	return append(log, Line(e)+"\n"...), false
}

// The status section of CURRENT.md lies between these markers; the rest of
// the file is the people's and is never touched.
const (
	StatusStart = "<!-- conductor:status:start -->"
	StatusEnd   = "<!-- conductor:status:end -->"
)

// updateStatus rewrites CURRENT.md's status section for e (count is the
// number of landings in the build log), adding the section at the end when
// the file has none.
func updateStatus(cur []byte, e Entry, count int) ([]byte, error) {
	var b strings.Builder
	b.WriteString(StatusStart + "\n## Status\n\n")
	fmt.Fprintf(&b, "Last landed: %s as `%s` on `%s` at %s", e.Decision, patch.Short(e.Commit), e.Target, e.LandedAt.Format(time.RFC3339))
	if e.RunID != "" {
		fmt.Fprintf(&b, " (run %s)", e.RunID)
	}
	b.WriteString(".\n\n")
	fmt.Fprintf(&b, "Landings recorded: %d.\n", count)
	if e.Issue > 0 {
		fmt.Fprintf(&b, "Issue #%d: closed by this landing.\n", e.Issue)
	}
	b.WriteString(StatusEnd)
	section := b.String()

	s := string(cur)
	i, j := strings.Index(s, StatusStart), strings.Index(s, StatusEnd)
	switch {
	case i < 0 && j < 0:
		if strings.TrimSpace(s) == "" {
			s = "# Current\n"
		}
		return []byte(strings.TrimRight(s, "\n") + "\n\n" + section + "\n"), nil
	case i < 0 || j < i || strings.Count(s, StatusStart) != 1 || strings.Count(s, StatusEnd) != 1:
		return nil, refusal.Newf(refusal.RecordStatusMalformed, "keep exactly one "+StatusStart+" … "+StatusEnd+" pair in the file (or remove both: the section is added at the end)",
			"the status file's markers are broken: %d start and %d end marker(s), in that order: %v", strings.Count(s, StatusStart), strings.Count(s, StatusEnd), i >= 0 && j > i)
	}
	return []byte(s[:i] + section + s[j+len(StatusEnd):]), nil
}

// countLines counts the landings in a build log.
func countLines(log []byte) int {
	n := 0
	for _, l := range strings.Split(string(log), "\n") {
		if strings.HasPrefix(l, "- ") && strings.Contains(l, " landed ") {
			n++
		}
	}
	return n
}

// render computes the two files' new contents from their old ones.
func render(oldLog, oldCur []byte, e Entry) (newLog, newCur []byte, already bool, err error) {
	newLog, already = appendLine(oldLog, e)
	newCur, err = updateStatus(oldCur, e, countLines(newLog))
	return newLog, newCur, already, err
}

// recordFiles writes the two files under the record folder, atomically
// each, the build log last (it is what says "recorded").
func recordFiles(o Options, res *Result) error {
	oldLog, err := readOptional(res.BuildLog)
	if err != nil {
		return err
	}
	oldCur, err := readOptional(res.Current)
	if err != nil {
		return err
	}
	newLog, newCur, already, err := render(oldLog, oldCur, res.Entry)
	if err != nil {
		return err
	}
	if already && bytes.Equal(newCur, oldCur) {
		res.Already = true
		return nil
	}
	if !bytes.Equal(newCur, oldCur) {
		if err := runrec.WriteFileAtomic(res.Current, newCur, 0o644); err != nil {
			return fmt.Errorf("record: %w", err)
		}
	}
	if !already {
		if err := runrec.WriteFileAtomic(res.BuildLog, newLog, 0o644); err != nil {
			return fmt.Errorf("record: %w", err)
		}
	}
	res.Already = already
	return nil
}

func readOptional(p string) ([]byte, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	return b, nil
}

// repoKey names a repository's record folder: its folder name and a hash
// of its absolute git dir.
func repoKey(gitDir string) string {
	abs, _ := filepath.Abs(gitDir)
	name := filepath.Base(strings.TrimSuffix(abs, string(filepath.Separator)+".git"))
	name = strings.TrimSuffix(name, ".git")
	name = strings.Map(func(r rune) rune {
		if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return r
		}
		return '_'
	}, name)
	if len(name) > 40 {
		name = name[:40]
	}
	sum := sha256.Sum256([]byte(abs))
	return strings.TrimLeft(name, ".") + "-" + hex.EncodeToString(sum[:5])
}
