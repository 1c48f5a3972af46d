package land

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
)

// AuditStore is what audit reads from the bus store.
type AuditStore interface {
	GetDecision(ctx context.Context, id string) (bus.Decision, error)
	LatestVerdict(ctx context.Context, workRef string) (bus.Verdict, error)
	GetLanding(ctx context.Context, decisionID string) (bus.Landing, error)
}

// AuditOptions select the commit to audit.
type AuditOptions struct {
	Git    git.Git
	Store  AuditStore // nil: the store checks are skipped (and say so)
	Commit string
}

// AuditCheck is one comparison of an audit.
type AuditCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Want   string `json:"want,omitempty"`
	Got    string `json:"got,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// AuditReport is the outcome of an audit.
type AuditReport struct {
	Commit   string       `json:"commit"`
	PatchID  string       `json:"patchId"` // re-derived from the first-parent diff
	Decision string       `json:"decision,omitempty"`
	OK       bool         `json:"ok"`
	Checks   []AuditCheck `json:"checks"`
}

// Refusal is nil when every check passed, else an audit-mismatch refusal
// listing what does not match.
func (r AuditReport) Refusal() *refusal.Refusal {
	if r.OK {
		return nil
	}
	if len(r.Checks) == 1 && r.Checks[0].Name == "receipt trailers" {
		return refusal.New("audit-mismatch",
			fmt.Sprintf("commit %s has no receipt trailers: it was not landed by conductor land", patch.Short(r.Commit)),
			"audit a commit `conductor land` made (git log --grep '^Decision-Id:' shows them)")
	}
	var bad []string
	for _, c := range r.Checks {
		if !c.OK {
			s := c.Name
			if c.Want != "" || c.Got != "" {
				s += fmt.Sprintf(": want %s, got %s", orNone(c.Want), orNone(c.Got))
			}
			if c.Detail != "" {
				s += " (" + c.Detail + ")"
			}
			bad = append(bad, s)
		}
	}
	rf := refusal.New("audit-mismatch",
		fmt.Sprintf("commit %s does not match its receipt (%d mismatch(es))", patch.Short(r.Commit), len(bad)),
		"find out how the commit was made: it was not landed as recorded (rewritten history, edited note or store)")
	rf.Detail = strings.Join(bad, "\n")
	return rf
}

// Audit re-derives the binding patch-id of commit from its first-parent
// diff and checks it against the commit's trailers, its receipt note on
// NotesRef and the store's landing, decision and verdict.
func Audit(ctx context.Context, o AuditOptions) (AuditReport, error) {
	g := git.Git{GitDir: o.Git.CommonDir(), Env: o.Git.Env, Config: o.Git.Config, Scratch: o.Git.Scratch}
	c, err := readCommit(ctx, g, o.Commit)
	if err != nil {
		return AuditReport{}, fmt.Errorf("audit %s: %w", o.Commit, err)
	}
	rep := AuditReport{Commit: c.ID}
	parent := git.EmptyTree
	if len(c.Parents) > 0 {
		parent = c.Parents[0]
	}
	if rep.PatchID, err = patch.DiffTrees(ctx, g, parent, c.ID, io.Discard); err != nil {
		return rep, fmt.Errorf("audit %s: %w", o.Commit, err)
	}
	tr, ok := rep.checkTrailers(c.Message)
	if !ok {
		return rep, nil
	}
	rep.checkNote(ctx, g, c.ID, tr)
	if err := rep.checkStore(ctx, o.Store, c.ID, tr); err != nil {
		return rep, fmt.Errorf("audit %s: %w", o.Commit, err)
	}
	rep.OK = true
	for _, ch := range rep.Checks {
		rep.OK = rep.OK && ch.OK
	}
	return rep, nil
}

func (rep *AuditReport) check(name, want, got string) {
	rep.Checks = append(rep.Checks, AuditCheck{Name: name, OK: want == got && want != "", Want: want, Got: got})
}

func (rep *AuditReport) note(name, detail string, ok bool) {
	rep.Checks = append(rep.Checks, AuditCheck{Name: name, OK: ok, Detail: detail})
}

// checkTrailers reads the receipt trailers of msg and checks the Patch-Id
// one against the re-derived patch-id; false when msg has none at all (not
// a landing: the report says that, not a list of everything missing).
func (rep *AuditReport) checkTrailers(msg string) (map[string]string, bool) {
	_, ts := splitTrailers(msg)
	tr := map[string]string{}
	keys := []string{"Decision-Id", "Reviewed-Commit", "Patch-Id", "Run-Id", "Model"}
	for _, k := range keys {
		tr[k] = trailer(ts, k)
	}
	if tr["Decision-Id"] == "" && tr["Reviewed-Commit"] == "" && tr["Patch-Id"] == "" {
		rep.note("receipt trailers", "none: this commit was not landed by conductor land (no Decision-Id, Reviewed-Commit or Patch-Id)", false)
		return tr, false
	}
	for _, k := range keys {
		if tr[k] == "" {
			rep.note("trailer "+k, "missing", false)
		}
	}
	rep.Decision = tr["Decision-Id"]
	rep.check("trailer Patch-Id = re-derived patch-id", rep.PatchID, tr["Patch-Id"])
	return tr, true
}

// checkNote checks the receipt note on NotesRef against the trailers and
// the re-derived patch-id.
func (rep *AuditReport) checkNote(ctx context.Context, g git.Git, commit string, tr map[string]string) {
	raw, err := g.Run(ctx, "notes", "--ref="+NotesRef, "show", commit)
	var rc Receipt
	switch {
	case err != nil:
		rep.note("note on "+NotesRef, "missing", false)
	case json.Unmarshal(raw, &rc) != nil:
		rep.note("note on "+NotesRef, "not a conductor receipt (bad JSON)", false)
	default:
		rep.check("note patchId = re-derived patch-id", rep.PatchID, rc.PatchID)
		rep.check("note decision = trailer Decision-Id", tr["Decision-Id"], rc.Decision)
		rep.check("note reviewedCommit = trailer Reviewed-Commit", tr["Reviewed-Commit"], rc.ReviewedCommit)
		rep.check("note run = trailer Run-Id", tr["Run-Id"], rc.Run)
		rep.check("note model = trailer Model", tr["Model"], rc.Model)
	}
}

// checkStore checks the store's landing, decision and verdict (when there
// is a store).
func (rep *AuditReport) checkStore(ctx context.Context, st AuditStore, commit string, tr map[string]string) error {
	switch {
	case st == nil:
		rep.note("store", "not checked (no store)", true)
		return nil
	case rep.Decision == "":
		return nil
	}
	l, err := st.GetLanding(ctx, rep.Decision)
	switch {
	case errors.Is(err, bus.ErrNotFound):
		rep.note("store landing", "no landing recorded for "+rep.Decision, false)
	case err != nil:
		return err
	default:
		rep.check("store landing commit = commit", commit, l.Commit)
		rep.check("store landing patchId = re-derived patch-id", rep.PatchID, l.PatchID)
	}
	d, err := st.GetDecision(ctx, rep.Decision)
	switch {
	case errors.Is(err, bus.ErrNotFound):
		rep.note("store decision", "no decision "+rep.Decision, false)
		return nil
	case err != nil:
		return err
	}
	rep.check("store decision commit = trailer Reviewed-Commit", tr["Reviewed-Commit"], d.Commit)
	v, err := st.LatestVerdict(ctx, d.WorkRef)
	switch {
	case errors.Is(err, bus.ErrNotFound):
		rep.note("store verdict", "no verdict for "+d.WorkRef, false)
	case err != nil:
		return err
	case v.Commit != d.Commit:
		rep.note("store verdict", "the latest verdict on "+d.WorkRef+" is for a later commit; not compared", true)
	default:
		rep.check("store verdict patchId = re-derived patch-id", rep.PatchID, v.PatchID)
	}
	return nil
}
