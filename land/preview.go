package land

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
)

// StatusPreview is the status of a preview that would land: a dry run of
// a decision that is still open.
const StatusPreview = "preview"

// preview marks a landing as the preview of an open decision (Preview sets
// it; Options cannot be given one from outside the package).
type preview struct {
	as string // the operator the preview answers merge as ("" : unnamed)
}

// Preview is `land --dry-run` for a decision that is still open: everything
// a dry run does (the decision's work ref still at the approved commit, the
// verdict, the landing policy, the squash onto the target's tip, the
// patch-id binding, the gate in the sandbox, the re-check before the
// compare-and-swap) as if the decision were resolved now with the merge
// option by `as`. It changes nothing: no ref moves, no row is written, the
// decision stays open. The Outcome is the dry run's, with StatusPreview for
// "would land"; a refusal is the one the dry run after a merge by `as`
// would give. A decision that is already resolved is refused
// (decision-already-resolved: `land --dry-run` is its preview), and so is
// one that does not offer the merge option (decision-not-merge).
func Preview(ctx context.Context, o Options, as string) (Outcome, error) {
	o.DryRun = true
	o.preview = &preview{as: as}
	out, err := Run(ctx, o)
	if out.Status == StatusDryRun {
		out.Status = StatusPreview
	}
	return out, err
}

// decision is the open decision d as the dry run after its resolution
// would read it: the merge option, answered by p.as. It refuses a decision
// that is not open, or does not offer the option landing needs.
func (p *preview) decision(d bus.Decision, rules Rules) (bus.Decision, error) {
	want := rules.RequiredOption()
	if !d.Open() {
		fix := fmt.Sprintf("nothing to preview: `conductor land --dry-run %s` shows what landing it does", d.ID)
		if d.Option != want {
			fix = "nothing to land: raise a new merge decision once the work is ready"
		}
		return d, refusal.New("decision-already-resolved",
			fmt.Sprintf("decision %s is already resolved (%q by %s): a preview is for an open decision", d.ID, d.Option, orUnnamed(d.ResolvedBy)),
			fix)
	}
	if d.Kind != "" && d.Kind != bus.KindMergeProtected {
		return d, refusal.New("decision-not-merge",
			fmt.Sprintf("decision %s is a %q decision, not a merge decision: it cannot land", d.ID, d.Kind),
			"nothing to land: raise a new merge decision once the work is ready")
	}
	if len(d.Options) > 0 && !slices.Contains(d.Options, want) {
		return d, refusal.New("decision-not-merge",
			fmt.Sprintf("decision %s (%s) offers %s, not %q: it cannot land", d.ID, d.Kind, strings.Join(d.Options, ", "), want),
			"nothing to land: raise a new merge decision once the work is ready")
	}
	d.Option, d.ResolvedBy = want, p.as
	return d, nil
}

func orUnnamed(who string) string {
	if who == "" {
		return "an unnamed operator"
	}
	return who
}
