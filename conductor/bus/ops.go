package bus

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/patch"
	pgit "github.com/conductor-dev/conductor/patch/git" // git names a test helper in this package
)

// RaiseRequest is a decision raise as the operator states it: the commit may
// be abbreviated or a revision name when the repository is known.
type RaiseRequest struct {
	Kind    string
	WorkRef string
	Commit  string
	Target  string
	// RepoDir is a directory inside the repository the work ref lives in;
	// empty means the repository containing Dir, if any.
	RepoDir string
	// Dir is where to start looking when RepoDir is empty (the current
	// directory).
	Dir     string
	RunID   string
	Issue   int64
	By      string
	Options []string
}

var fullSHA = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// FindRepo returns the repository containing dir (dir itself or a parent).
func FindRepo(dir string) (patch.Git, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return patch.Git{}, err
	}
	for d := abs; ; {
		if g, err := pgit.OpenRepo(d); err == nil {
			return g, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return patch.Git{}, fmt.Errorf("%s is not inside a git repository", abs)
		}
		d = parent
	}
}

// Raise resolves a RaiseRequest against its repository and raises the
// decision. With a repository, the commit is resolved to its full id and the
// work ref must exist; the repository's (common) git dir is recorded.
// Without one, the commit must already be a full id.
func Raise(ctx context.Context, s Store, req RaiseRequest) (Decision, error) {
	d := Decision{
		Kind: req.Kind, WorkRef: req.WorkRef, Commit: strings.TrimSpace(req.Commit), Target: req.Target,
		RunID: req.RunID, Issue: req.Issue, RaisedBy: req.By, Options: req.Options,
	}
	for _, f := range []struct{ name, val string }{{"--commit", d.Commit}, {"--work-ref", d.WorkRef}, {"--target", d.Target}} {
		if strings.HasPrefix(f.val, "-") {
			return Decision{}, fmt.Errorf("raise decision: %s %q must not start with '-'", f.name, f.val)
		}
	}
	var (
		g   patch.Git
		err error
	)
	switch {
	case req.RepoDir != "":
		if g, err = FindRepo(req.RepoDir); err != nil {
			return Decision{}, fmt.Errorf("raise decision: --repo %s: %w", req.RepoDir, err)
		}
	case req.Dir != "":
		g, _ = FindRepo(req.Dir) // no repository here: record none
	}
	if g.GitDir != "" {
		d.Repo = g.CommonDir()
		bare := patch.Git{GitDir: d.Repo}
		if d.Commit != "" {
			full, err := bare.Line(ctx, "rev-parse", "--verify", "--quiet", d.Commit+"^{commit}")
			if err != nil || full == "" {
				return Decision{}, fmt.Errorf("raise decision: commit %q not found in %s", d.Commit, d.Repo)
			}
			d.Commit = full
		}
		if d.WorkRef != "" {
			if _, err := bare.Line(ctx, "rev-parse", "--verify", "--quiet", d.WorkRef+"^{commit}"); err != nil {
				return Decision{}, fmt.Errorf("raise decision: work ref %q does not exist in %s", d.WorkRef, d.Repo)
			}
		}
		if d.Target != "" {
			if _, err := bare.Run(ctx, "check-ref-format", "--branch", d.Target); err != nil {
				return Decision{}, fmt.Errorf("raise decision: target %q is not a valid branch name", d.Target)
			}
		}
	} else if d.Commit != "" && !fullSHA.MatchString(d.Commit) {
		return Decision{}, fmt.Errorf("raise decision: commit %q is not a full commit id and there is no repository to resolve it in (give --repo)", d.Commit)
	}
	return s.RaiseDecision(ctx, d)
}

// DecisionView is a decision with its landing, if it landed.
type DecisionView struct {
	Decision
	Landing *Landing `json:"landing,omitempty"`
}

// ShowDecision reads a decision and its landing.
func ShowDecision(ctx context.Context, s Store, id string) (DecisionView, error) {
	d, err := s.GetDecision(ctx, id)
	if err != nil {
		return DecisionView{}, err
	}
	v := DecisionView{Decision: d}
	l, err := s.GetLanding(ctx, id)
	switch {
	case err == nil:
		v.Landing = &l
	case !errors.Is(err, ErrNotFound):
		return DecisionView{}, err
	}
	return v, nil
}

// RunSummary is one run as `runs list` shows it, merged from the store row
// and the run folder's result.json.
type RunSummary struct {
	ID               string    `json:"id"`
	Status           string    `json:"status"`
	TaskID           string    `json:"taskId"`
	Session          string    `json:"session"`
	Role             string    `json:"role"`
	ModelAlias       string    `json:"modelAlias"`
	HarnessAlias     string    `json:"harnessAlias,omitempty"`
	Model            string    `json:"model"`
	Steps            int       `json:"steps"`
	PromptTokens     *int64    `json:"promptTokens"`
	CompletionTokens *int64    `json:"completionTokens"`
	TotalTokens      *int64    `json:"totalTokens"`
	BaseCommit       string    `json:"baseCommit"`
	Branch           string    `json:"branch"`
	PatchID          string    `json:"patchId"`
	StartedAt        time.Time `json:"startedAt,omitzero"`
	FinishedAt       time.Time `json:"finishedAt,omitzero"`
	Outcome          string    `json:"outcome,omitempty"`
	// Source says where the run is known: "store", "folder" or "both".
	Source string `json:"source"`
}

// RunFile is a file of a run folder.
type RunFile struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
}

// RunView is everything known about one run.
type RunView struct {
	RunSummary
	Store           *Run           `json:"store"`  // nil: not in the store
	Result          *runrec.Result `json:"result"` // nil: no readable result.json
	ResultError     string         `json:"resultError,omitempty"`
	Folder          string         `json:"folder,omitempty"` // "" : no run folder
	Files           []RunFile      `json:"files,omitempty"`
	TranscriptLines int            `json:"transcriptLines"`
	StderrTail      string         `json:"stderrTail,omitempty"`
	// The latest checkpoint (nil: none) and the operator notes not yet
	// delivered to the session.
	Checkpoint   *CheckpointSummary `json:"checkpoint,omitempty"`
	Checkpoints  int                `json:"checkpoints"` // how many the run has
	PendingNotes int                `json:"pendingNotes"`
}

// CheckpointSummary is the latest checkpoint of a run, without its history.
type CheckpointSummary struct {
	Step      int       `json:"step"`
	Files     int       `json:"files"` // files touched so far
	CreatedAt time.Time `json:"createdAt"`
	Workspace string    `json:"workspace,omitempty"`
	Branch    string    `json:"branch,omitempty"` // the work branch, when the run has one
}

func terminal(status string) bool { return status != "" && status != runrec.StatusRunning }

// summarize merges what the store and the folder say. The store wins, except
// where it is empty, or where it still says running and the folder's
// receipt says how the run ended (the process died before updating the
// store).
func summarize(id string, r *Run, res *runrec.Result) RunSummary {
	s := RunSummary{ID: id}
	if res != nil {
		s = RunSummary{ID: id, Status: res.Status, TaskID: res.TaskID, Session: res.Session, Role: res.Role,
			ModelAlias: res.ModelAlias, HarnessAlias: res.HarnessAlias, Model: res.Model, Steps: res.Steps, PromptTokens: res.PromptTokens,
			CompletionTokens: res.CompletionTokens, TotalTokens: res.TotalTokens, BaseCommit: res.BaseCommit,
			Branch: res.Branch, PatchID: res.PatchID, StartedAt: res.StartedAt, FinishedAt: res.FinishedAt,
			Outcome: res.Error, Source: "folder"}
	}
	if r == nil {
		return s
	}
	pick := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	folderEnded := res != nil && terminal(res.Status)
	storeEnded := terminal(r.Status)
	if !folderEnded || storeEnded {
		pick(&s.Status, r.Status)
		if r.Steps > s.Steps || res == nil {
			s.Steps = r.Steps
		}
		if r.TotalTokens != nil || res == nil {
			s.PromptTokens, s.CompletionTokens, s.TotalTokens = r.PromptTokens, r.CompletionTokens, r.TotalTokens
		}
		if !r.FinishedAt.IsZero() {
			s.FinishedAt = r.FinishedAt
		}
		pick(&s.Outcome, r.Outcome)
		pick(&s.PatchID, r.PatchID)
	}
	pick(&s.TaskID, r.TaskID)
	pick(&s.Session, r.Session)
	pick(&s.Role, r.Role)
	pick(&s.ModelAlias, r.ModelAlias)
	pick(&s.HarnessAlias, r.HarnessAlias)
	pick(&s.Model, r.Model)
	pick(&s.BaseCommit, r.BaseCommit)
	pick(&s.Branch, r.Branch)
	if s.StartedAt.IsZero() || !r.StartedAt.IsZero() {
		s.StartedAt = r.StartedAt
	}
	if res != nil {
		s.Source = "both"
	} else {
		s.Source = "store"
	}
	return s
}

// ShowRun reads a run from the store and from its folder under runsDir; it
// is found if either knows it.
func ShowRun(ctx context.Context, s Store, runsDir, id string) (RunView, error) {
	if err := runrec.ValidRunID(id); err != nil {
		return RunView{}, err
	}
	v := RunView{}
	r, err := s.GetRun(ctx, id)
	switch {
	case err == nil:
		v.Store = &r
	case !errors.Is(err, ErrNotFound):
		return RunView{}, err
	}
	dir := runrec.Dir(filepath.Join(runsDir, id))
	if fi, err := os.Stat(string(dir)); err == nil && fi.IsDir() {
		v.Folder = string(dir)
		entries, err := os.ReadDir(string(dir))
		if err != nil {
			return RunView{}, fmt.Errorf("run %s: %w", id, err)
		}
		for _, e := range entries {
			if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
				v.Files = append(v.Files, RunFile{Name: e.Name(), Size: fi.Size()})
			}
		}
		res, err := dir.ReadResult()
		switch {
		case err == nil:
			v.Result = &res
		case errors.Is(err, fs.ErrNotExist):
		default:
			v.ResultError = err.Error()
		}
		v.TranscriptLines = countLines(dir.Path(runrec.TranscriptFile))
		v.StderrTail = tail(dir.Path(runrec.StderrFile), 10)
	}
	if v.Store == nil && v.Folder == "" {
		return RunView{}, notFound("run %s (not in the store, no folder %s)", id, dir)
	}
	cp, err := s.LatestCheckpoint(ctx, id)
	switch {
	case err == nil:
		v.Checkpoint = &CheckpointSummary{Step: cp.Step, Files: len(cp.Files), CreatedAt: cp.CreatedAt, Workspace: cp.Workspace, Branch: cp.Branch}
	case !errors.Is(err, ErrNotFound):
		return RunView{}, err
	}
	if v.Checkpoint != nil {
		if cs, ok := s.(interface {
			CheckpointStats(ctx context.Context, runID string) (int, time.Time, error)
		}); ok {
			n, _, err := cs.CheckpointStats(ctx, id)
			if err != nil {
				return RunView{}, err
			}
			v.Checkpoints = n
		} else {
			v.Checkpoints = 1 // a store that cannot count: at least the latest
		}
	}
	notes, err := s.PendingNotes(ctx, id)
	if err != nil {
		return RunView{}, err
	}
	v.PendingNotes = len(notes)
	v.RunSummary = summarize(id, v.Store, v.Result)
	return v, nil
}

// ListRunSummaries lists the runs the store knows and those that exist only
// as folders under runsDir, newest first. The filter applies to the merged
// view (so a run whose folder says it failed is found by Status "failed").
func ListRunSummaries(ctx context.Context, s Store, runsDir string, f RunFilter) ([]RunSummary, error) {
	runs, err := s.ListRuns(ctx, RunFilter{})
	if err != nil {
		return nil, err
	}
	byID := map[string]*Run{}
	for i := range runs {
		byID[runs[i].ID] = &runs[i]
	}
	entries, err := os.ReadDir(runsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	results := map[string]*runrec.Result{}
	var folderOnly []string
	for _, e := range entries {
		if !e.IsDir() || runrec.ValidRunID(e.Name()) != nil {
			continue
		}
		if res, err := runrec.Dir(filepath.Join(runsDir, e.Name())).ReadResult(); err == nil {
			results[e.Name()] = &res
		}
		if byID[e.Name()] == nil {
			folderOnly = append(folderOnly, e.Name())
		}
	}
	var all []RunSummary
	for _, r := range runs {
		all = append(all, summarize(r.ID, byID[r.ID], results[r.ID]))
	}
	for _, id := range folderOnly {
		sum := summarize(id, nil, results[id])
		sum.Source = "folder"
		all = append(all, sum)
	}
	out := all[:0]
	for _, sum := range all {
		if (f.TaskID == "" || sum.TaskID == f.TaskID) && (f.Session == "" || sum.Session == f.Session) &&
			(f.Status == "" || sum.Status == f.Status) {
			out = append(out, sum)
		}
	}
	slices.SortStableFunc(out, func(a, b RunSummary) int {
		if c := b.StartedAt.Compare(a.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

func countLines(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		n++
	}
	return n
}

// tail returns the last n lines of a file (at most 64 KiB are read).
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		f.Seek(fi.Size()-max, 0)
	}
	b := make([]byte, max)
	k, _ := f.Read(b)
	b = bytes.TrimRight(b[:k], "\n")
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// RunFromResult is the store row of a run receipt (result.json).
func RunFromResult(res runrec.Result) Run {
	return Run{ID: res.RunID, TaskID: res.TaskID, Session: res.Session, Role: res.Role, Status: res.Status,
		ModelAlias: res.ModelAlias, HarnessAlias: res.HarnessAlias, Model: res.Model, PromptTokens: res.PromptTokens, CompletionTokens: res.CompletionTokens,
		TotalTokens: res.TotalTokens, Steps: res.Steps, Repo: res.Repo, BaseCommit: res.BaseCommit, Worktree: res.Worktree,
		Branch: res.Branch, PatchID: res.PatchID, StartedAt: res.StartedAt, FinishedAt: res.FinishedAt, Outcome: res.Error}
}

// Repair is one store record Reconcile rewrote from a run folder.
type Repair struct {
	RunID  string `json:"runId"`
	Status string `json:"status"` // the folder's final status, now the store's
	// Claim is set when the run's open backlog claim was completed too.
	Claim string `json:"claim,omitempty"`
}

// Reconcile repairs the store from the run folders, the source of truth: a
// run the store still shows running (or does not know) whose folder says it
// ended is recorded as the folder says, and its open backlog claim is
// completed. This is what a completion lost to a store outage (or written by
// an older conductor) leaves behind. Idempotent.
func Reconcile(ctx context.Context, s Store, runsDir string) ([]Repair, error) {
	entries, err := os.ReadDir(runsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	var out []Repair
	for _, e := range entries {
		if !e.IsDir() || runrec.ValidRunID(e.Name()) != nil {
			continue
		}
		res, err := runrec.Dir(filepath.Join(runsDir, e.Name())).ReadResult()
		if err != nil || !terminal(res.Status) || res.RunID != e.Name() {
			continue
		}
		var rep *Repair
		run, err := s.GetRun(ctx, res.RunID)
		switch {
		case errors.Is(err, ErrNotFound) || (err == nil && !terminal(run.Status)):
			if err := s.PutRun(ctx, RunFromResult(res)); err != nil {
				return out, fmt.Errorf("reconcile %s: %w", res.RunID, err)
			}
			rep = &Repair{RunID: res.RunID, Status: res.Status}
		case err != nil:
			return out, fmt.Errorf("reconcile %s: %w", res.RunID, err)
		}
		if res.TaskID != "" {
			cl, err := s.GetClaim(ctx, res.TaskID)
			if err == nil && cl.Claimant == res.RunID && cl.Completion == nil {
				err = s.CompleteTask(ctx, Completion{TaskID: res.TaskID, Claimant: res.RunID, RunID: res.RunID,
					Outcome: res.Status, ModelAlias: res.ModelAlias, HarnessAlias: res.HarnessAlias, PromptTokens: res.PromptTokens,
					CompletionTokens: res.CompletionTokens, TotalTokens: res.TotalTokens})
				if err != nil && !errors.Is(err, ErrConflict) {
					return out, fmt.Errorf("reconcile %s: %w", res.RunID, err)
				}
				if rep == nil {
					rep = &Repair{RunID: res.RunID, Status: res.Status}
				}
				rep.Claim = res.TaskID
			} else if err != nil && !errors.Is(err, ErrNotFound) {
				return out, fmt.Errorf("reconcile %s: %w", res.RunID, err)
			}
		}
		if rep != nil {
			out = append(out, *rep)
		}
	}
	return out, nil
}
