package land

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/filelock"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/patch/git"
	"github.com/conductor-dev/conductor/policy"
)

// Rules is what land asks the landing policy (policy.Landing implements it).
type Rules interface {
	TargetAllowed(target string) error
	CheckChangesOn(changes []policy.Change, tip policy.Tree) []*refusal.Refusal
	Gate() []policy.GateCommand
	RequiredOption() string
	RequiredVerdict() string
}

// Store is the part of the bus store land uses. Everything but PutLanding is
// a read.
type Store interface {
	GetDecision(ctx context.Context, id string) (bus.Decision, error)
	LatestVerdict(ctx context.Context, workRef string) (bus.Verdict, error)
	GetRun(ctx context.Context, id string) (bus.Run, error)
	GetLanding(ctx context.Context, decisionID string) (bus.Landing, error)
	PutLanding(ctx context.Context, l bus.Landing) error
}

// Identity names the committer of landed commits.
type Identity struct {
	Name, Email string
}

// Options configure one landing.
type Options struct {
	Store      Store
	Rules      Rules
	DecisionID string
	// DryRun does every check, the squash, the patch-id check and the gate,
	// and reports what it would commit; it moves no ref and writes no row.
	DryRun bool
	// DataRoot holds the landing locks and scratch worktrees.
	DataRoot string
	// Repo overrides the decision's repository (tests); zero means the
	// decision's Repo.
	Repo git.Git
	// Committer of the landed commit; zero means "conductor".
	Committer Identity
	Now       func() time.Time
	// Getenv feeds the gate's environment allowlist (default os.Getenv).
	Getenv func(string) string
	// Worktree forces the checkout path (a scratch worktree) even when no
	// gate command needs files.
	Worktree bool
	// Sandbox runs the gate commands (they run worker-written code). nil:
	// the default backend (bubblewrap); when none works a landing whose
	// gate has commands is refused (sandbox-unavailable), never run
	// unisolated.
	Sandbox sandbox.Sandbox
	Log     *slog.Logger
	// Fault, when set, is called at each named step (tests kill the
	// process there).
	Fault func(step string)

	preview *preview // set by Preview (preview.go): the decision is open
}

// Outcome statuses.
const (
	StatusLanded        = "landed"
	StatusAlreadyLanded = "already-landed"
	StatusDryRun        = "dry-run"
	StatusRefused       = "refused"
)

// Outcome says what a landing did (or, in a dry run, would do).
type Outcome struct {
	Decision       string               `json:"decision"`
	Status         string               `json:"status"`
	Commit         string               `json:"commit,omitempty"`
	Target         string               `json:"target,omitempty"`
	Parent         string               `json:"parent,omitempty"` // the target tip the commit sits on
	Tree           string               `json:"tree,omitempty"`
	ReviewedCommit string               `json:"reviewedCommit,omitempty"`
	PatchID        string               `json:"patchId,omitempty"`
	Mode           string               `json:"mode,omitempty"` // "tree" (no checkout) or "worktree"
	Attempts       int                  `json:"attempts,omitempty"`
	Gate           []sandbox.GateResult `json:"gate,omitempty"`
	Message        string               `json:"message,omitempty"` // the commit message (dry run)
	Files          []string             `json:"files,omitempty"`
	Refusal        *refusal.Refusal     `json:"refusal,omitempty"`
	Warning        string               `json:"warning,omitempty"`
}

// Modes of the squash and gate.
const (
	ModeTree     = "tree"
	ModeWorktree = "worktree"
)

// Run lands one decision and returns what it did (it prints nothing: the
// command line renders the Outcome). A refusal is returned as an error
// wrapping *refusal.Refusal, with the Outcome saying refused, and changes
// nothing.
func Run(ctx context.Context, o Options) (Outcome, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Fault == nil {
		o.Fault = func(string) {}
	}
	if o.Committer.Name == "" {
		o.Committer = Identity{Name: "conductor", Email: "conductor@localhost"}
	}
	var out Outcome
	var err error
	if verr := validDecisionID(o.DecisionID); verr != nil {
		out = Outcome{Decision: o.DecisionID, Status: StatusRefused, Refusal: verr}
		return out, fmt.Errorf("land %q: %w", o.DecisionID, verr)
	}
	var box func() (sandbox.Sandbox, error)
	if o.Rules != nil && len(o.Rules.Gate()) > 0 {
		box = gateBox(o.Sandbox)
		if o.Sandbox == nil {
			// The one opened here is ours to release (a docker backend's
			// container); one passed in is the caller's.
			defer func() {
				if sb, err := box(); err == nil {
					_ = sandbox.Close(sb)
				}
			}()
		}
	}
	out, err = run(ctx, &o, box)
	out.Decision = o.DecisionID
	var rf *refusal.Refusal
	if errors.As(err, &rf) {
		out.Status = StatusRefused
		out.Refusal = rf
	}
	if out.Warning != "" && rf == nil {
		o.Log.Warn("land: " + out.Warning)
	}
	if err != nil {
		return out, fmt.Errorf("land %s: %w", o.DecisionID, err)
	}
	return out, nil
}

// gateBox opens the gate's sandbox (given, or the default backend) in the
// background and returns the wait for it. A landing refused before its
// gate names that reason (no such decision, a moved work ref), not a
// missing sandbox, and the backend's probe runs beside the landing's
// first steps. When no backend works the wait is the refusal
// (sandbox-unavailable): the gate is never run unisolated.
func gateBox(given sandbox.Sandbox) func() (sandbox.Sandbox, error) {
	done := make(chan struct{})
	var sb sandbox.Sandbox
	var err error
	go func() {
		defer close(done)
		sb, err = sandbox.ForGate(given)
	}()
	return sync.OnceValues(func() (sandbox.Sandbox, error) {
		<-done
		if err != nil {
			return nil, refusal.NoSandbox("the gate",
				"the gate runs worker-written code and no sandbox works here: %v", err)
		}
		return sb, nil
	})
}

// gateSandbox waits for the gate's sandbox (nil when the gate has no
// commands).
func (l *lander) gateSandbox() (sandbox.Sandbox, error) {
	if l.box == nil {
		return nil, nil
	}
	return l.box()
}

// lander carries one landing's state between steps.
type lander struct {
	o        *Options
	box      func() (sandbox.Sandbox, error) // the gate's sandbox (nil: no gate commands)
	g        git.Git                         // the repository's common git dir, no work tree
	d        bus.Decision
	v        bus.Verdict
	run      bus.Run
	target   string // branch name
	ref      string // refs/heads/<target>
	workRef  string
	workAt   string // the work ref's value as read first (an id; a tag's, if it names a tag)
	approved git.Commit
	cat      *git.Objects // the landing's object reader
	update   *git.Started // `update-ref --stdin`, started early (nil: start one when needed)
	now      time.Time    // its commit's and note's committer date: the landing's start, or the gate's end

	// Git work started early (speculate.go), waited for before returning.
	bg     context.Context
	wg     sync.WaitGroup
	specMu sync.Mutex
	specs  map[string]*speculation
	diff   *differ // the neutral git dir of the landing's diffs

	baseMu sync.Mutex
	bases  map[string]string // merge base of the approved commit with a tip, by tip

	dataDir string // DataRoot/land/<key>
	key     string
}

func run(ctx context.Context, o *Options, box func() (sandbox.Sandbox, error)) (Outcome, error) {
	out := Outcome{}
	if o.Store == nil || o.Rules == nil {
		return out, errors.New("no store or no landing rules")
	}
	if o.DataRoot == "" {
		return out, errors.New("no data root")
	}
	d, target, err := readDecision(ctx, o)
	out.Target = target
	if err != nil {
		return out, err
	}
	if l, err := o.Store.GetLanding(ctx, d.ID); err == nil {
		return landedOutcome(l), nil
	} else if !errors.Is(err, bus.ErrNotFound) {
		return out, fmt.Errorf("read landing: %w", err)
	}
	g, err := repoOf(o, d)
	if err != nil {
		return out, err
	}
	l := &lander{o: o, box: box, g: g, d: d, target: target, ref: "refs/heads/" + target, workRef: fullRef(d.WorkRef),
		now: o.Now()}
	l.key = lockKey(g.GitDir, l.ref)
	l.dataDir = filepath.Join(o.DataRoot, "land", l.key)

	// What every landing needs starts now, beside the lock and the reads:
	// the neutral git dir of its diffs and, unless it is a dry run, the
	// compare-and-swap's git (given its transaction once the commit is
	// written, commit.go).
	bg, cancel := context.WithCancel(ctx)
	l.bg = bg
	l.startDiffer()
	if !o.DryRun {
		l.update = l.startUpdate(bg)
	}
	defer func() {
		if l.update != nil {
			l.update.Abandon() // a refusal: an empty transaction
		}
		cancel() // stops what a refusal left running
		l.wg.Wait()
		l.closeDiffer()
		if l.cat != nil {
			l.cat.Close()
		}
	}()

	// Landings on one target serialize on this lock (held through the gate).
	lock, err := filelock.Wait(ctx, filepath.Join(o.DataRoot, "land", "locks", l.key+".lock"))
	if err != nil {
		return out, err
	}
	defer filelock.Unlock(lock)
	o.Fault("lock")
	if err := l.cleanStale(ctx); err != nil {
		o.Log.Warn("land: cleaning stale scratch worktrees", "err", err)
	}
	return l.land(ctx)
}

// readDecision is step 1: the decision, read-only, resolved with the merge
// option, naming a target branch and a work ref; it returns the decision
// and its target's branch name.
func readDecision(ctx context.Context, o *Options) (bus.Decision, string, error) {
	d, err := o.Store.GetDecision(ctx, o.DecisionID)
	if errors.Is(err, bus.ErrNotFound) {
		return d, "", refusal.New("decision-not-found",
			fmt.Sprintf("no decision %q in the store", o.DecisionID),
			"check the id with `conductor decision list`")
	}
	if err != nil {
		return d, "", fmt.Errorf("read decision: %w", err)
	}
	o.Fault("decision")
	if o.preview != nil {
		if d, err = o.preview.decision(d, o.Rules); err != nil {
			return d, "", err
		}
	}
	if d.Open() {
		return d, "", refusal.New("decision-not-resolved",
			fmt.Sprintf("decision %s is still open", d.ID),
			fmt.Sprintf("resolve it first: conductor decision resolve %s --option %s", d.ID, o.Rules.RequiredOption()))
	}
	if d.Option != o.Rules.RequiredOption() || (d.Kind != "" && d.Kind != bus.KindMergeProtected) {
		return d, "", refusal.New("decision-not-merge",
			fmt.Sprintf("decision %s (%s) was resolved %q, landing needs %q", d.ID, d.Kind, d.Option, o.Rules.RequiredOption()),
			"nothing to land: raise a new merge decision once the work is ready")
	}
	target, err := branchName(d.Target)
	if err != nil {
		return d, "", refusal.New("target-invalid",
			fmt.Sprintf("decision %s names the target %q, which is not a branch name (%v)", d.ID, d.Target, err),
			"raise a new decision against a branch name git accepts (git check-ref-format --branch NAME)")
	}
	if strings.ContainsFunc(d.WorkRef, func(r rune) bool { return r <= ' ' || r == 0x7f }) || strings.HasPrefix(d.WorkRef, "-") || d.WorkRef == "" {
		return d, target, refusal.New("work-ref-invalid",
			fmt.Sprintf("decision %s names the work ref %q, which is not a ref name", d.ID, d.WorkRef),
			"raise a new decision for the work ref review recorded")
	}
	return d, target, nil
}

// repoOf is the repository a landing works in: Options.Repo or the
// decision's, as its common git dir with no work tree, its throw-away git
// dirs under the data root's scratch folder (where the next landing
// removes those a killed one left, patch.CleanScratch).
func repoOf(o *Options, d bus.Decision) (git.Git, error) {
	g := o.Repo
	if g.GitDir == "" {
		if d.Repo == "" {
			return g, fmt.Errorf("decision %s names no repository", d.ID)
		}
		var err error
		if g, err = git.OpenRepo(d.Repo); err != nil {
			// A linked worktree's private git dir names its repository.
			if _, serr := os.Stat(filepath.Join(d.Repo, "commondir")); serr != nil {
				return g, fmt.Errorf("decision %s: %w", d.ID, err)
			}
			g = git.Git{GitDir: d.Repo}
		}
	}
	scratch := filepath.Join(o.DataRoot, "scratch", "git")
	if n, err := patch.CleanScratch(scratch); err != nil {
		o.Log.Warn("land: cleaning stale scratch git dirs", "err", err)
	} else if n > 0 {
		o.Log.Debug("land: removed stale scratch git dirs", "count", n)
	}
	return git.Git{GitDir: g.CommonDir(), Env: g.Env, Config: g.Config, Scratch: scratch}, nil
}

func landedOutcome(l bus.Landing) Outcome {
	return Outcome{Decision: l.DecisionID, Status: StatusAlreadyLanded, Commit: l.Commit, Target: l.Target, PatchID: l.PatchID}
}

// branchName turns "main" or "refs/heads/main" into "main", rejecting names
// git would not accept as a branch (`git check-ref-format --branch`), and
// a few more it would: "HEAD", names under "refs/", non-ASCII names.
func branchName(target string) (string, error) {
	t := strings.TrimPrefix(target, "refs/heads/")
	why := ""
	switch {
	case t == "":
		why = "empty"
	case t == "@" || t == "HEAD":
		why = "reserved"
	case strings.HasPrefix(t, "-"):
		why = "starts with '-'"
	case strings.HasPrefix(t, "refs/"):
		why = "names a ref, not a branch"
	case strings.HasPrefix(t, "/") || strings.HasSuffix(t, "/") || strings.Contains(t, "//"):
		why = "empty path component"
	case strings.HasSuffix(t, "."):
		why = "ends with '.'"
	case strings.Contains(t, ".."):
		why = "contains '..'"
	case strings.Contains(t, "@{"):
		why = "contains '@{'"
	case strings.ContainsFunc(t, func(r rune) bool {
		return r < 0x20 || r >= 0x7f || strings.ContainsRune(" ~^:?*[\\", r)
	}):
		why = "contains a space, a control, non-ASCII or special character"
	}
	for _, c := range strings.Split(t, "/") {
		if why == "" && (strings.HasPrefix(c, ".") || strings.HasSuffix(c, ".lock")) {
			why = fmt.Sprintf("component %q starts with '.' or ends with '.lock'", c)
		}
	}
	if why != "" {
		return "", fmt.Errorf("bad target branch name %q: %s", target, why)
	}
	return t, nil
}

// decisionIDPattern is what a decision id may look like (the store makes
// "d-" and 8 base32 characters): never a path, a control character or a
// line break, which would reach messages, trailers and terminals.
var decisionIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func validDecisionID(id string) *refusal.Refusal {
	if decisionIDPattern.MatchString(id) && !strings.Contains(id, "..") {
		return nil
	}
	return refusal.New("decision-id-invalid",
		fmt.Sprintf("%q is not a decision id (letters, digits, '.', '_', '-' only, at most 128)", id),
		"pass the id `conductor decision list` shows")
}

func fullRef(ref string) string {
	if strings.HasPrefix(ref, "refs/") {
		return ref
	}
	return "refs/heads/" + ref
}

func (l *lander) land(ctx context.Context) (Outcome, error) {
	o, d := l.o, l.d
	out := Outcome{Target: l.target}
	// Re-check under the lock: a landing of the same decision may just have
	// finished.
	if ld, err := o.Store.GetLanding(ctx, d.ID); err == nil {
		return landedOutcome(ld), nil
	}
	refs, err := git.ReadRefs(l.g.GitDir, l.ref, l.workRef)
	if err != nil {
		refs = []string{"", ""} // git resolves them by name below
	}
	l.cat = git.NewObjects(ctx, l.g) // closed by run, once nothing started reads it
	if err := l.checkRefs(ctx); err != nil {
		return out, err
	}
	if refs[0] != "" && git.IsObjectID(d.Commit) {
		l.at(refs[0], d.Commit) // the squash of the likely case, early
	}
	names := []string{l.ref + "^{commit}", l.workRef + "^{commit}", d.Commit + "^{commit}"}
	for i, id := range refs {
		if id != "" {
			names[i] = id + "^{commit}" // the value read above, not a second read
		}
	}
	objs, err := l.lookup(names...)
	if err != nil {
		return out, err
	}
	tipObj, workObj, apprObj := objs[0], objs[1], objs[2]
	l.workAt = cmp.Or(refs[1], workObj.ID)
	if tipObj.ID == "" {
		return out, refusal.New("target-not-found",
			fmt.Sprintf("target branch %s does not exist in %s", l.target, l.g.GitDir),
			"create the branch, or raise the decision against an existing target")
	}
	if apprObj.ID != "" {
		if l.approved, err = git.ParseCommit(apprObj.ID, apprObj.Content); err != nil {
			return out, err
		}
	}
	out, err = l.landFrom(ctx, tipObj, workObj, apprObj)
	var rf *refusal.Refusal
	if errors.As(err, &rf) && l.approved.ID != "" {
		// Idempotency and crash recovery: a landing killed after moving the
		// target but before its store row is refused like any change that
		// is already there (its squash is empty). Before refusing, look for
		// it on the target's history.
		if tip, terr := l.cat.Get(l.ref + "^{commit}"); terr == nil {
			if c, found, ferr := l.findLanded(ctx, tip.ID); ferr == nil && found {
				return l.recover(ctx, c)
			}
		}
	}
	return out, err
}

// landFrom runs steps 2–8 from the objects land read first.
func (l *lander) landFrom(ctx context.Context, tipObj, workObj, apprObj git.Object) (Outcome, error) {
	out := Outcome{Target: l.target}
	if err := l.checkVerdict(ctx, apprObj); err != nil {
		return out, err
	}
	l.o.Fault("verdict")
	if err := l.checkWorkRef(workObj, apprObj); err != nil {
		return out, err
	}
	out.ReviewedCommit = apprObj.ID
	if err := l.readRun(ctx); err != nil {
		return out, err
	}
	return l.attempts(ctx, tipObj.ID, out)
}

// checkVerdict is step 2: the latest verdict approves exactly the raised
// commit, bound to a patch-id.
func (l *lander) checkVerdict(ctx context.Context, apprObj git.Object) error {
	o, d := l.o, l.d
	v, err := l.latestVerdict(ctx)
	if errors.Is(err, bus.ErrNotFound) {
		return refusal.New("no-approval",
			fmt.Sprintf("no verdict is recorded for %s", d.WorkRef),
			"review the run first: conductor review RUN --approve")
	}
	if err != nil {
		return fmt.Errorf("read verdict: %w", err)
	}
	if v.Verdict != o.Rules.RequiredVerdict() {
		return refusal.New("no-approval",
			fmt.Sprintf("the latest verdict on %s is %q, landing needs %q", d.WorkRef, v.Verdict, o.Rules.RequiredVerdict()),
			"address the findings, review again and approve")
	}
	if v.PatchID == "" {
		return refusal.New("no-approval",
			fmt.Sprintf("the approving verdict %d on %s carries no patch-id", v.ID, d.WorkRef),
			"review again so the verdict is bound to the commit's patch-id")
	}
	if !sameCommit(v.Commit, d.Commit, apprObj.ID) {
		return refusal.New("verdict-stale",
			fmt.Sprintf("the latest verdict approves %s, the decision raised %s", orNoneID(v.Commit), orNoneID(d.Commit)),
			"review the raised commit (or raise a decision for the approved one), then land")
	}
	l.v = v
	return nil
}

// checkWorkRef is step 3: the work ref is at the approved commit now.
func (l *lander) checkWorkRef(workObj, apprObj git.Object) error {
	d := l.d
	switch {
	case apprObj.ID == "":
		return refusal.New("work-ref-moved",
			fmt.Sprintf("the approved commit %s does not exist in %s", patch.Short(d.Commit), l.g.GitDir),
			"review the work ref's current commit and raise a new decision")
	case workObj.ID == "":
		return refusal.New("work-ref-moved",
			fmt.Sprintf("work ref %s no longer exists (approved %s)", d.WorkRef, patch.Short(apprObj.ID)),
			"restore the work ref to the approved commit, or review and raise again")
	case workObj.ID != apprObj.ID:
		return refusal.New("work-ref-moved",
			fmt.Sprintf("work ref %s is at %s, the approved commit is %s", d.WorkRef, patch.Short(workObj.ID), patch.Short(apprObj.ID)),
			"review the new commit and raise a new decision; the approval covers only what was reviewed")
	}
	return nil
}

// readRun reads the run the work came from (for the receipt), when known.
func (l *lander) readRun(ctx context.Context) error {
	runID := cmp.Or(l.d.RunID, l.v.RunID)
	if runID == "" {
		return nil
	}
	r, err := l.o.Store.GetRun(ctx, runID)
	if err == nil {
		l.run = r
	} else if !errors.Is(err, bus.ErrNotFound) {
		return fmt.Errorf("read run %s: %w", runID, err)
	}
	return nil
}

// attempts runs steps 4–8 from tip, and once more from the new tip when
// the target moves (then target-moved).
func (l *lander) attempts(ctx context.Context, tip string, out Outcome) (Outcome, error) {
	for attempt := 1; ; attempt++ {
		res, err := l.attempt(ctx, tip, &out)
		out.Attempts = attempt
		if err != nil || res != "" {
			return out, err
		}
		// The target moved under us.
		tipObj, err := l.cat.Get(l.ref + "^{commit}")
		if err != nil {
			return out, err
		}
		newTip := tipObj.ID
		if c, found, err := l.findLanded(ctx, newTip); err != nil {
			return out, err
		} else if found {
			return l.recover(ctx, c)
		}
		if attempt >= 2 || newTip == "" {
			return out, refusal.New("target-moved",
				fmt.Sprintf("%s moved from %s to %s while landing (after %d attempts)", l.target, patch.Short(tip), patch.Short(newTip), attempt),
				"land again once the target is quiet; nothing was committed")
		}
		l.o.Log.Info("land: target moved, retrying from the new tip", "target", l.target, "from", tip, "to", newTip)
		tip = newTip
	}
}

func sameCommit(verdictCommit, decisionCommit, resolved string) bool {
	if verdictCommit == "" {
		return false
	}
	if verdictCommit == decisionCommit || (resolved != "" && verdictCommit == resolved) {
		return true
	}
	return false
}

// attempt runs steps 4–8 from tip. It returns ("", nil) when the target moved
// before the compare-and-swap, a non-empty status when done.
func (l *lander) attempt(ctx context.Context, tip string, out *Outcome) (string, error) {
	o := l.o
	out.Parent = tip
	// The squash and its patch-id run beside the merge base, the policy
	// diff and the policy (most likely started before the checks).
	sp := l.at(tip, l.approved.ID)
	// 4. Landing policy on the diff from the merge base to the approved commit.
	if err := l.checkPolicy(sp, tip, out); err != nil {
		return "", err
	}
	o.Fault("policy")

	// 5. Squash onto the tip: a tree, no checkout; its patch-id measured
	// from that tree (patchid.go).
	res := sp.squash()
	if res.err != nil {
		var rf *refusal.Refusal
		if errors.As(res.err, &rf) {
			return "", rf
		}
		return "", res.err
	}
	out.Tree = res.tree
	o.Fault("squash")

	// 6. The squash's patch-id, measured from its tree, equals the
	// reviewed one (patchid.go).
	if rf := checkPatchID(tip, res, l.v.PatchID); rf != nil {
		return "", rf
	}
	out.PatchID = res.pid

	// The target's checked-out worktree, if any, must be able to follow.
	wt, err := l.targetWorktree(ctx)
	if err != nil {
		return "", err
	}
	if wt != nil {
		if err := wt.check(ctx, tip, res.tree); err != nil {
			return "", err
		}
	}

	// 7. The gate, on exactly this tree.
	if err := l.gateTree(ctx, tip, res.tree, out); err != nil {
		return "", err
	}

	msg := l.message(res.pid, l.narrative(ctx, tip, out))
	if o.DryRun {
		// What a real landing checks right before its compare-and-swap.
		if err := l.recheck(ctx, false); err != nil {
			return "", err
		}
		out.Message = msg
		out.Status = StatusDryRun
		return StatusDryRun, nil
	}

	// 8. Commit once, move the target by compare-and-swap.
	return l.commit(ctx, tip, res.tree, msg, wt, out)
}

// checkPolicy is step 4: the target is one the policy lets land on, and
// the changes from the merge base to the approved commit obey the landing
// policy on the tip's tree. It lists the changed files in out.
func (l *lander) checkPolicy(sp *speculation, tip string, out *Outcome) error {
	o := l.o
	if err := o.Rules.TargetAllowed(l.target); err != nil {
		return err
	}
	tipTree, err := l.cat.Get(tip + "^{tree}")
	if err != nil {
		return err
	}
	changes, err := sp.policyChanges()
	if errors.Is(err, patch.ErrNoMergeBase) {
		return refusal.New("conflict",
			fmt.Sprintf("%s and %s share no history", l.target, patch.Short(l.approved.ID)),
			"rebase the work onto the target and review again")
	}
	if err != nil {
		return err
	}
	out.Files = out.Files[:0]
	for _, c := range changes {
		out.Files = append(out.Files, c.Path)
	}
	exists, err := l.existsAt(tipTree)
	if err != nil {
		return err
	}
	if rs := o.Rules.CheckChangesOn(changes, policy.Tree{Exists: exists, Link: l.linkAt(tipTree)}); len(rs) > 0 {
		return combine(rs)
	}
	return nil
}

// gateTree is step 7: the gate runs on exactly tree (in a scratch
// worktree when a command needs files, else in an empty folder) and must
// pass (gate-failed). A landing with a gate commits at the gate's end.
func (l *lander) gateTree(ctx context.Context, tip, tree string, out *Outcome) error {
	o := l.o
	gate := o.Rules.Gate()
	out.Mode = ModeTree
	if o.Worktree || needsFiles(gate) {
		out.Mode = ModeWorktree
	}
	results, err := l.gate(ctx, gate, out.Mode, tip, tree)
	out.Gate = results
	if err != nil {
		return err
	}
	if len(results) > 0 && !results[len(results)-1].OK() {
		return gateFailed(results)
	}
	o.Fault("gate")
	if len(results) > 0 {
		l.now = o.Now() // the commit is made after its gate
	}
	return nil
}

// orNoneID abbreviates an id read from the store or a note, where it may
// be missing.
func orNoneID(id string) string { return cmp.Or(patch.Short(id), "(none)") }

// orNone names a patch-id, which is empty for an empty diff.
func orNone(s string) string {
	if s == "" {
		return "(empty diff)"
	}
	return s
}

func needsFiles(gate []policy.GateCommand) bool {
	for _, g := range gate {
		if g.NeedsFiles {
			return true
		}
	}
	return false
}

// combine turns several policy refusals into one: the first one's code, the
// rest listed in the detail.
func combine(rs []*refusal.Refusal) *refusal.Refusal {
	first := *rs[0]
	if len(rs) > 1 {
		var b strings.Builder
		for _, r := range rs {
			fmt.Fprintf(&b, "%s: %s\n", r.Code, r.Reason)
		}
		first.Detail = strings.TrimRight(strings.TrimSpace(first.Detail+"\n"+b.String()), "\n")
	}
	return &first
}

// latestVerdict is the newest verdict on the work ref, whichever way it was
// spelled when recorded ("work/x" or "refs/heads/work/x").
func (l *lander) latestVerdict(ctx context.Context) (bus.Verdict, error) {
	names := []string{l.d.WorkRef}
	for _, n := range []string{l.workRef, strings.TrimPrefix(l.workRef, "refs/heads/")} {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	var best bus.Verdict
	found := false
	for _, n := range names {
		v, err := l.o.Store.LatestVerdict(ctx, n)
		if errors.Is(err, bus.ErrNotFound) {
			continue
		}
		if err != nil {
			return v, err
		}
		if !found || v.CreatedAt.After(best.CreatedAt) || (v.CreatedAt.Equal(best.CreatedAt) && v.ID > best.ID) {
			best, found = v, true
		}
	}
	if !found {
		return best, fmt.Errorf("verdict on %s: %w", l.d.WorkRef, bus.ErrNotFound)
	}
	return best, nil
}

// checkRefs refuses a target that is a symbolic ref (moving it would move
// the branch it points to, which the policy never allowed) and a notes ref
// that does not hold a notes commit (a blob, a tag): a receipt cannot be
// added to it.
func (l *lander) checkRefs(ctx context.Context) error {
	to, err := git.SymbolicRef(l.g.GitDir, l.ref)
	if err != nil {
		return fmt.Errorf("read %s: %w", l.ref, err)
	}
	if to != "" {
		return refusal.New("target-symbolic",
			fmt.Sprintf("target %s is a symbolic ref to %s: landing on it would move %s", l.ref, to, to),
			fmt.Sprintf("raise the decision against the branch itself (%s), if the policy allows it", strings.TrimPrefix(to, "refs/heads/")))
	}
	if to, err = git.SymbolicRef(l.g.GitDir, NotesRef); err != nil || to != "" {
		return refusal.New("notes-ref-invalid",
			fmt.Sprintf("%s is not a notes ref (a symbolic ref to %q, or unreadable: %v)", NotesRef, to, err),
			"point "+NotesRef+" at the receipts' notes commit (or delete it if it holds none): git update-ref "+NotesRef+" COMMIT")
	}
	name := NotesRef // broken: git says what it is
	if ids, err := git.ReadRefs(l.g.GitDir, NotesRef); err == nil {
		if ids[0] == "" {
			return nil
		}
		name = ids[0] // read in process when the object is at hand
	}
	n, err := l.cat.Get(name)
	if err != nil {
		return err
	}
	if n.ID == "" {
		// It exists (ReadRefs said so, or could not read it) but names
		// nothing git has.
		return refusal.New("notes-ref-invalid",
			fmt.Sprintf("%s exists but names no object in the repository (damaged or garbage value)", NotesRef),
			"point "+NotesRef+" at the receipts' notes commit (see its reflog), or delete it if it never held receipts: git update-ref -d "+NotesRef)
	}
	if n.Type != "commit" {
		return refusal.New("notes-ref-invalid",
			fmt.Sprintf("%s points at a %s (%s), not a notes commit", NotesRef, n.Type, patch.Short(n.ID)),
			"point "+NotesRef+" at the receipts' notes commit (or delete it if it holds none): git update-ref "+NotesRef+" COMMIT")
	}
	return nil
}
