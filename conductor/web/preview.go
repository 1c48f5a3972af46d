package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/patch"
)

// Preview is what a landing preview said: `conductor land DECISION
// --preview`, the dry run of an open decision as if merged now (the CLI
// passes land.Preview). It changes nothing; it runs the gate, in the
// sandbox.
type Preview struct {
	Status         string // "preview" (it would land) or "refused"
	Target         string
	Parent         string // the target tip the squash sits on ("" : refused before it was read)
	Tree           string
	ReviewedCommit string
	PatchID        string // the squash's patch-id, which equals the reviewed one
	Mode           string
	Message        string // the commit message it would write
	Files          []string
	Gate           []sandbox.GateResult
	Refusal        *refusal.Refusal
}

// Would says the preview would land.
func (p Preview) Would() bool { return p.Refusal == nil && p.Status == "preview" }

// Subject is the first line of the commit message it would write.
func (p Preview) Subject() string { return firstLine(p.Message) }

// maxPreviews bounds the previews kept (the oldest finished go first).
const maxPreviews = 256

// previews are the landing previews the server ran or runs: one at a time
// per decision, in the background, kept in memory until replaced.
type previews struct {
	mu sync.Mutex
	by map[string]*previewRun
	wg sync.WaitGroup
}

// previewRun is one preview of one decision.
type previewRun struct {
	Decision string
	RunID    string // the run the decision's work came from
	By       string // the operator who asked
	Started  time.Time
	Finished time.Time // zero: still running
	Against  string    // the target tip when it started (Result.Parent once known)
	Result   Preview
	Err      string // it failed (not a refusal: an error)
}

// previewView is a decision card's preview, as of now.
type previewView struct {
	previewRun
	Running bool
	Age     string // how long ago it finished, coarse (a page re-renders only when it changes)
	TipNow  string // the target's tip now ("" : unreadable)
	Stale   bool   // the target moved since the preview was made
}

func (p *previews) get(id string) (previewRun, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.by[id]
	if !ok {
		return previewRun{}, false
	}
	return *r, true
}

// start records a preview of id as running, unless one is (then it returns
// the running one and false).
func (p *previews) start(r previewRun) (previewRun, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.by == nil {
		p.by = map[string]*previewRun{}
	}
	if cur, ok := p.by[r.Decision]; ok && cur.Finished.IsZero() {
		return *cur, false
	}
	for len(p.by) >= maxPreviews {
		oldest := ""
		for id, c := range p.by {
			if !c.Finished.IsZero() && (oldest == "" || c.Finished.Before(p.by[oldest].Finished)) {
				oldest = id
			}
		}
		if oldest == "" {
			break // all running: keep them
		}
		delete(p.by, oldest)
	}
	p.by[r.Decision] = &r
	p.wg.Add(1)
	return r, true
}

func (p *previews) finish(r previewRun) {
	p.mu.Lock()
	p.by[r.Decision] = &r
	p.mu.Unlock()
	p.wg.Done()
}

// preview starts a landing preview of an open decision, as the operator:
// `land --preview` in the background, one at a time per decision. It is a
// mutation (it runs worker-written code in the sandbox): token and CSRF.
func (s *Server) preview(w http.ResponseWriter, r *http.Request) {
	who, ok := s.mutation(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if id == "" || len(id) > 128 || strings.ContainsFunc(id, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		s.fail(w, r, http.StatusBadRequest, "refused: a decision id is required")
		return
	}
	if s.o.Preview == nil {
		s.fail(w, r, http.StatusNotImplemented, "refused: this server runs no landing previews (conductor serve wires them; nothing was run)")
		return
	}
	d, err := s.o.Store.GetDecision(r.Context(), id)
	switch {
	case errors.Is(err, bus.ErrNotFound):
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("refused: there is no decision %s, so there is nothing to preview (nothing was run)", id))
		return
	case err != nil:
		s.storeError(w, r, err)
		return
	case !d.Open():
		s.fail(w, r, http.StatusConflict, fmt.Sprintf("refused: decision %s is already resolved (%s by %s at %s): a preview is for an open decision — nothing was run (conductor land %s --dry-run previews a resolved merge decision)",
			d.ID, d.Option, cmpOr(d.ResolvedBy, "an unnamed operator"), d.ResolvedAt.UTC().Format(time.RFC3339), d.ID))
		return
	}
	tip, _ := s.cachedTip(r.Context(), d, true)
	run, ok := s.prev.start(previewRun{Decision: d.ID, RunID: d.RunID, By: who.operator, Started: s.o.Now(), Against: tip})
	if !ok {
		s.fail(w, r, http.StatusConflict, fmt.Sprintf("refused: a preview of %s is already running (started by %s at %s): its result appears on the decisions page when it ends — nothing new was started",
			d.ID, run.By, run.Started.UTC().Format("15:04:05Z")))
		return
	}
	s.o.Log.Info("serve: landing preview started", "decision", d.ID, "operator", who.operator)
	go s.runPreview(run)
	http.Redirect(w, r, "/decisions#"+d.ID, http.StatusSeeOther)
}

// runPreview runs one preview to its end (or the server's).
func (s *Server) runPreview(run previewRun) {
	defer func() {
		if v := recover(); v != nil {
			run.Err = fmt.Sprintf("the preview panicked: %v", v)
			run.Finished = s.o.Now()
			s.prev.finish(run)
		}
	}()
	res, err := s.o.Preview(s.bg, run.Decision, run.By)
	var rf *refusal.Refusal
	switch {
	case errors.As(err, &rf):
		if res.Refusal == nil {
			res.Refusal = rf
		}
		res.Status = "refused"
	case err != nil:
		run.Err = err.Error()
	}
	run.Result = res
	if res.Parent != "" {
		run.Against = res.Parent
	}
	run.Finished = s.o.Now()
	s.o.Log.Info("serve: landing preview finished", "decision", run.Decision, "status", res.Status, "err", run.Err)
	// The one row a preview writes: the lifecycle event saying who ran
	// worker code through this page, and what it said.
	md := map[string]any{"decision": run.Decision, "status": cmpOr(res.Status, "error"), "target": res.Target, "tip": run.Against}
	if res.Refusal != nil {
		md["code"] = string(res.Refusal.Code)
	}
	if res.PatchID != "" {
		md["patchId"] = res.PatchID
	}
	if run.Err != "" {
		md["error"] = run.Err
	}
	if err := bus.Emit(s.bg, s.o.Store, bus.EventLandPreviewed, run.RunID, "", run.By, md); err != nil {
		s.o.Log.Warn("serve: lifecycle event not recorded", "kind", bus.EventLandPreviewed, "err", err)
	}
	s.prev.finish(run)
}

// previewOf is the decision card's view of its preview (nil: none).
func (s *Server) previewOf(ctx context.Context, d bus.Decision) *previewView {
	run, ok := s.prev.get(d.ID)
	if !ok {
		return nil
	}
	v := &previewView{previewRun: run, Running: run.Finished.IsZero()}
	if v.Running {
		return v
	}
	v.Age = ago(s.o.Now().Sub(run.Finished))
	v.TipNow, _ = s.cachedTip(ctx, d, false)
	v.Stale = v.TipNow != "" && run.Against != "" && v.TipNow != run.Against
	return v
}

func ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "less than a minute ago"
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%d days ago", int(d/(24*time.Hour)))
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

type cachedTipValue struct {
	tip string
	err error
	at  time.Time
}

const tipTTL = 2 * time.Second

// cachedTip is the decision's target tip (fresh: read it now).
func (s *Server) cachedTip(ctx context.Context, d bus.Decision, fresh bool) (string, error) {
	key := d.Repo + "\x00" + d.Target
	now := time.Now()
	c, ok := s.git.tips.get(key)
	if ok && !fresh && now.Sub(c.at) < tipTTL {
		return c.tip, c.err
	}
	tip, err := s.targetTip(ctx, d)
	if ctx.Err() != nil {
		return tip, err
	}
	s.git.tips.put(key, cachedTipValue{tip: tip, err: err, at: now})
	return tip, err
}

// targetTip reads the commit the decision's target branch is at.
func (s *Server) targetTip(ctx context.Context, d bus.Decision) (string, error) {
	if d.Repo == "" || d.Target == "" || strings.HasPrefix(d.Target, "-") {
		return "", errors.New("the decision names no repository or target")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	g := patch.Git{GitDir: d.Repo}
	ref := "refs/heads/" + strings.TrimPrefix(d.Target, "refs/heads/")
	out, err := g.Run(ctx, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}")
	if err != nil {
		return "", errors.New(strings.TrimSpace(firstLine(err.Error())))
	}
	return strings.TrimSpace(string(out)), nil
}
