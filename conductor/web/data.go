package web

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/review"
	"github.com/conductor-dev/conductor/conductor/runrec"
	"github.com/conductor-dev/conductor/patch"
)

// Limits on what a page reads from a run folder.
const (
	maxTranscript = 8 << 20 // bytes of transcript.jsonl read for a page (its end)
	maxDiff       = 2 << 20 // bytes of patch.diff shown
	maxEntryText  = 8 << 10 // characters of one transcript entry's text shown
)

// runRow is one line of the runs table.
type runRow struct {
	bus.RunSummary
	Task           taskInfo
	Checkpoints    int
	LastCheckpoint time.Time
	Elapsed        time.Duration
}

// taskInfo is what the run folder's task.json says of how the run is
// driven (the fields are optional in a task file).
type taskInfo struct {
	Runtime  string `json:"runtime"`
	Harness  string `json:"harness"`
	MaxSteps int    `json:"maxSteps"`
	Known    bool   `json:"-"` // the task file was read
}

// RuntimeName is the runtime the task asked for ("builtin" by default).
func (t taskInfo) RuntimeName() string {
	switch {
	case !t.Known:
		return ""
	case t.Runtime == "":
		return "builtin"
	}
	return t.Runtime
}

// taskOf reads a run's task.json once (it is written when the run starts
// and never changes).
func (s *Server) taskOf(id string) taskInfo {
	t, ok := s.git.tasks.get(id)
	if ok {
		return t
	}
	f, err := os.Open(s.runDir(id).Path(runrec.TaskFile))
	if err != nil {
		return taskInfo{}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil || json.Unmarshal(b, &t) != nil {
		return taskInfo{}
	}
	t.Known = true
	s.git.tasks.put(id, t)
	return t
}

func (s *Server) runRows(ctx context.Context) ([]runRow, error) {
	runs, err := bus.ListRunSummaries(ctx, s.o.Store, s.o.RunsDir, bus.RunFilter{})
	if err != nil {
		return nil, err
	}
	stats := map[string]bus.CheckpointStat{}
	if s.views != nil {
		if stats, err = s.views.CheckpointStatsAll(ctx); err != nil {
			return nil, err
		}
	}
	out := make([]runRow, 0, len(runs))
	for _, r := range runs {
		st := stats[r.ID]
		row := runRow{RunSummary: r, Checkpoints: st.Count, LastCheckpoint: st.LastAt, Elapsed: s.elapsed(r)}
		if runrec.ValidRunID(r.ID) == nil {
			row.Task = s.taskOf(r.ID)
		}
		out = append(out, row)
	}
	return out, nil
}

func (s *Server) elapsed(r bus.RunSummary) time.Duration {
	switch {
	case r.StartedAt.IsZero():
		return 0
	case !r.FinishedAt.IsZero():
		return r.FinishedAt.Sub(r.StartedAt)
	case r.Status == runrec.StatusRunning:
		return s.o.Now().Sub(r.StartedAt)
	}
	return 0
}

// runPage is everything the run page shows.
type runPage struct {
	View        bus.RunView
	Task        taskInfo
	Elapsed     time.Duration
	Running     bool
	Checkpoints []bus.CheckpointSummary
	Notes       []bus.Note
	Verdicts    []bus.Verdict
	Decisions   []bus.Decision
	Review      *review.Report
	ReviewError string
	Transcript  []entry
	// TranscriptFrom is where the shown transcript starts (non-zero: its
	// beginning was left out); TranscriptEnd the offset after the last
	// complete line, where live updates continue.
	TranscriptFrom int64
	TranscriptEnd  int64
	Diff           []diffLine
	DiffCut        bool
}

func (s *Server) runDir(id string) runrec.Dir { return runrec.Dir(filepath.Join(s.o.RunsDir, id)) }

func (s *Server) loadRun(ctx context.Context, id string) (runPage, error) {
	v, err := bus.ShowRun(ctx, s.o.Store, s.o.RunsDir, id)
	if err != nil {
		return runPage{}, err
	}
	p := runPage{View: v, Task: s.taskOf(id), Elapsed: s.elapsed(v.RunSummary), Running: v.Status == runrec.StatusRunning}
	if s.views != nil {
		if p.Checkpoints, err = s.views.ListCheckpoints(ctx, id); err != nil {
			return runPage{}, err
		}
		if p.Notes, err = s.views.ListNotes(ctx, id); err != nil {
			return runPage{}, err
		}
		if p.Verdicts, err = s.views.ListVerdicts(ctx, id, ""); err != nil {
			return runPage{}, err
		}
	}
	ds, err := s.o.Store.ListDecisions(ctx, false)
	if err != nil {
		return runPage{}, err
	}
	for _, d := range ds {
		if d.RunID == id {
			p.Decisions = append(p.Decisions, d)
		}
	}
	dir := s.runDir(id)
	if v.Folder != "" {
		p.Review, p.ReviewError = readReview(dir)
		p.Transcript, p.TranscriptFrom, p.TranscriptEnd = readTranscript(dir.Path(runrec.TranscriptFile), -1)
		p.Diff, p.DiffCut = readDiff(dir.Path(runrec.PatchFile))
	}
	return p, nil
}

// readReview reads the run's last review record (nil when there is none).
func readReview(dir runrec.Dir) (*review.Report, string) {
	b, err := os.ReadFile(dir.Path(review.RecordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ""
	}
	if err != nil {
		return nil, err.Error()
	}
	var rep review.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Sprintf("%s: %v", review.RecordFile, err)
	}
	return &rep, ""
}

// readTranscript reads complete lines of a transcript from offset (-1: the
// last maxTranscript bytes, from a line start). It returns the entries, where
// reading started and the offset after the last complete line.
func readTranscript(path string, offset int64) ([]entry, int64, int64) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, max(offset, 0)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, max(offset, 0)
	}
	from := offset
	if from < 0 {
		from = max(fi.Size()-maxTranscript, 0)
	}
	if from > fi.Size() {
		// The file was replaced by a shorter one: start again.
		from = 0
	}
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return nil, from, from
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTranscript))
	if err != nil {
		return nil, from, from
	}
	start := from
	if offset < 0 && from > 0 {
		// Skip the partial first line.
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b, start = b[i+1:], from+int64(i+1)
		}
	}
	end := bytes.LastIndexByte(b, '\n')
	if end < 0 {
		return nil, start, start
	}
	b = b[:end+1]
	var out []entry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), maxTranscript)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		out = append(out, parseEntry(sc.Bytes()))
	}
	if offset < 0 && from > 0 {
		return out, start, start + int64(len(b))
	}
	return out, 0, start + int64(len(b))
}

// decisionCard is one decision with what it would land (or landed).
type decisionCard struct {
	bus.Decision
	Landing *bus.Landing
	Verdict *bus.Verdict
	// VerdictMatches: the latest verdict approves exactly the raised commit.
	VerdictMatches bool
	Review         *review.Report
	// Files is the diffstat of what the decision would land: computed
	// from the repository (merge base of the target and the commit), else
	// the review record's.
	Files     []review.FileStat
	FilesFrom string
	Added     int64
	Deleted   int64
	Problem   string       // why something could not be read
	Preview   *previewView // the latest landing preview (nil: none)
}

func (s *Server) decisionCards(ctx context.Context) (open, resolved []decisionCard, err error) {
	ds, err := s.o.Store.ListDecisions(ctx, false)
	if err != nil {
		return nil, nil, err
	}
	for _, d := range ds {
		c, err := s.decisionCard(ctx, d)
		if err != nil {
			return nil, nil, err
		}
		if d.Open() {
			open = append(open, c)
		} else {
			resolved = append(resolved, c)
		}
	}
	return open, resolved, nil
}

func (s *Server) decisionCard(ctx context.Context, d bus.Decision) (decisionCard, error) {
	c := decisionCard{Decision: d}
	l, err := s.o.Store.GetLanding(ctx, d.ID)
	switch {
	case err == nil:
		c.Landing = &l
	case !errors.Is(err, bus.ErrNotFound):
		return c, err
	}
	if d.WorkRef != "" {
		v, err := s.o.Store.LatestVerdict(ctx, d.WorkRef)
		switch {
		case err == nil:
			c.Verdict = &v
			c.VerdictMatches = v.Verdict == bus.VerdictApprove && v.Commit == d.Commit
		case !errors.Is(err, bus.ErrNotFound):
			return c, err
		}
	}
	if d.RunID != "" && runrec.ValidRunID(d.RunID) == nil {
		var problem string
		c.Review, problem = readReview(s.runDir(d.RunID))
		if problem != "" {
			c.Problem = problem
		}
	}
	if d.Open() && d.Repo != "" && d.Commit != "" && d.Target != "" {
		files, err := s.cachedDiffstat(ctx, d)
		if err == nil {
			c.Files, c.FilesFrom = files, "repository"
		} else if c.Problem == "" {
			c.Problem = "diffstat: " + err.Error()
		}
	}
	if d.Open() {
		c.Preview = s.previewOf(ctx, d)
	}
	if c.Files == nil && c.Review != nil {
		c.Files, c.FilesFrom = c.Review.Files, "review record"
	}
	for _, f := range c.Files {
		c.Added += f.Added
		c.Deleted += f.Deleted
	}
	return c, nil
}

// diffstat is `git diff --numstat TARGET...COMMIT` in the decision's
// repository: what squashing the commit onto the target would change, as
// far as the merge base tells (land computes the exact squash).
func (s *Server) diffstat(ctx context.Context, d bus.Decision) ([]review.FileStat, error) {
	if strings.HasPrefix(d.Target, "-") || strings.HasPrefix(d.Commit, "-") {
		return nil, errors.New("refusing an argument that starts with '-'")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	g := patch.Git{GitDir: d.Repo}
	target := "refs/heads/" + strings.TrimPrefix(d.Target, "refs/heads/")
	out, err := g.Run(ctx, "diff", "--no-ext-diff", "--no-textconv", "--no-renames", "--numstat", "-z", target+"..."+d.Commit, "--")
	if err != nil {
		return nil, errors.New(strings.TrimSpace(firstLine(err.Error())))
	}
	var files []review.FileStat
	for _, rec := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if rec == "" {
			continue
		}
		parts := strings.SplitN(rec, "\t", 3)
		if len(parts) != 3 {
			continue
		}
		f := review.FileStat{Status: "M", Path: parts[2]}
		if parts[0] == "-" {
			f.Binary = true
		} else {
			fmt.Sscan(parts[0], &f.Added)
			fmt.Sscan(parts[1], &f.Deleted)
		}
		files = append(files, f)
	}
	return files, nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// landedRow is one landing with the decision it answered.
type landedRow struct {
	bus.Landing
	Decision   *bus.Decision
	Trailers   []string // the landed commit's receipt trailers, when readable
	Audit      *Audit
	AuditError string
}

// Audit is `conductor audit`'s verdict on a landed commit.
type Audit struct {
	OK      bool         `json:"ok"`
	PatchID string       `json:"patchId"` // re-derived
	Checks  []AuditCheck `json:"checks"`
}

// AuditCheck is one comparison of an audit.
type AuditCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Want   string `json:"want,omitempty"`
	Got    string `json:"got,omitempty"`
	Detail string `json:"detail,omitempty"`
}

type cachedAudit struct {
	a   *Audit
	err string
	at  time.Time
}

// auditTTL: an audit reads the store too, which may change (a landing row
// written late), so it is redone now and then.
const auditTTL = time.Minute

func (s *Server) cachedAudit(ctx context.Context, repo, commit string) (*Audit, string) {
	if s.o.Audit == nil || repo == "" || commit == "" {
		return nil, ""
	}
	key := repo + "\x00" + commit
	now := time.Now()
	c, ok := s.git.audits.get(key)
	if ok && now.Sub(c.at) < auditTTL {
		return c.a, c.err
	}
	actx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	a, err := s.o.Audit(actx, repo, commit)
	if ctx.Err() != nil {
		return nil, ""
	}
	c = cachedAudit{at: now}
	if err != nil {
		c.err = err.Error()
	} else {
		c.a = &a
	}
	s.git.audits.put(key, c)
	return c.a, c.err
}

func (s *Server) landedRows(ctx context.Context) ([]landedRow, error) {
	if s.views == nil {
		return nil, nil
	}
	ls, err := s.views.ListLandings(ctx)
	if err != nil {
		return nil, err
	}
	var out []landedRow
	for _, l := range ls {
		row := landedRow{Landing: l}
		d, err := s.o.Store.GetDecision(ctx, l.DecisionID)
		switch {
		case err == nil:
			row.Decision = &d
			row.Trailers = s.cachedTrailers(ctx, d.Repo, l.Commit)
			row.Audit, row.AuditError = s.cachedAudit(ctx, d.Repo, l.Commit)
		case !errors.Is(err, bus.ErrNotFound):
			return nil, err
		}
		out = append(out, row)
	}
	return out, nil
}

// trailers reads the receipt trailers of a landed commit (nil when the
// repository or the commit cannot be read).
func (s *Server) trailers(ctx context.Context, repo, commit string) []string {
	if repo == "" || commit == "" || strings.HasPrefix(commit, "-") {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := patch.Git{GitDir: repo}.Run(ctx, "log", "-1", "--no-show-signature",
		"--format=%(trailers:only,unfold)", commit, "--")
	if err != nil {
		return nil
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// queuePage is the queue and the workers' pool.
type queuePage struct {
	Jobs   []bus.JobView
	Counts map[string]int // by state
	Pools  []Pool
	PoolOK bool
	Claims string

	QueueName    string
	Dead         []deadLetter // the queue's dead letters (DeadShown: a queue was given)
	DeadShown    bool
	DeadError    string
	Workers      []workerRow // heartbeats of the last hour, live ones first
	WorkersShown bool
	WorkersError string
	Slots        []bus.SlotUse // model slots in use per alias
	SlotsShown   bool
	SlotsError   string
}

// Pool is one repository's warm worktree pool as the CLI reads it.
type Pool struct {
	Dir   string     `json:"dir"`
	Repo  string     `json:"repo"`
	Slots []PoolSlot `json:"slots"`
}

// PoolSlot is one worktree of a pool.
type PoolSlot struct {
	Slot     string    `json:"slot"`
	State    string    `json:"state"` // free, busy, in use, broken
	Owner    string    `json:"owner"`
	Base     string    `json:"base"`
	LastUsed time.Time `json:"lastUsed"`
	Bytes    int64     `json:"bytes"`
}

func (s *Server) queuePage(ctx context.Context) (queuePage, error) {
	p := queuePage{Counts: map[string]int{"queued": 0, "taken": 0, "dead": 0}}
	if s.views != nil {
		jobs, err := s.views.ListJobs(ctx)
		if err != nil {
			return p, err
		}
		p.Jobs = jobs
		for _, j := range jobs {
			p.Counts[j.State()]++
		}
	}
	s.fleet(ctx, &p)
	if s.o.Pools != nil {
		pools, err := s.o.Pools(ctx)
		if err == nil {
			p.Pools, p.PoolOK = pools, true
		}
	}
	return p, nil
}

// gitCache keeps what live pages read from repositories, so that polling
// does not run git every second: a diffstat for a while (the target may
// move), a landed commit's trailers for good (a commit never changes).
type gitCache struct {
	diffstats memo[cachedStat]
	trailers  memo[[]string]
	tasks     memo[taskInfo]
	audits    memo[cachedAudit]
	tips      memo[cachedTipValue] // a decision target's tip, for a preview's staleness
}

func newGitCache() gitCache {
	return gitCache{diffstats: newMemo[cachedStat](1024), trailers: newMemo[[]string](4096),
		tasks: newMemo[taskInfo](8192), audits: newMemo[cachedAudit](4096), tips: newMemo[cachedTipValue](1024)}
}

// memo is a bounded map of what the pages read again: when it holds max
// entries it starts over empty (the values are cheap to read again).
type memo[V any] struct {
	mu  *sync.Mutex
	m   map[string]V
	max int
}

func newMemo[V any](max int) memo[V] { return memo[V]{mu: &sync.Mutex{}, m: map[string]V{}, max: max} }

func (c memo[V]) get(k string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c memo[V]) put(k string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[k] = v
}

type cachedStat struct {
	files []review.FileStat
	err   error
	at    time.Time
}

const diffstatTTL = 15 * time.Second

func (s *Server) cachedDiffstat(ctx context.Context, d bus.Decision) ([]review.FileStat, error) {
	key := d.Repo + "\x00" + d.Target + "\x00" + d.Commit
	now := time.Now()
	c, ok := s.git.diffstats.get(key)
	if ok && now.Sub(c.at) < diffstatTTL {
		return c.files, c.err
	}
	files, err := s.diffstat(ctx, d)
	if ctx.Err() != nil {
		return files, err // not cached: the request went away
	}
	s.git.diffstats.put(key, cachedStat{files: files, err: err, at: now})
	return files, err
}

func (s *Server) cachedTrailers(ctx context.Context, repo, commit string) []string {
	key := repo + "\x00" + commit
	t, ok := s.git.trailers.get(key)
	if ok {
		return t
	}
	t = s.trailers(ctx, repo, commit)
	if t == nil {
		return nil // retried next time (the repository may come back)
	}
	s.git.trailers.put(key, t)
	return t
}
