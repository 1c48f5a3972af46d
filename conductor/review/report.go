package review

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/conductor-dev/conductor/conductor/runrec"
)

// RecordFile is the review's record in the run folder (the last review).
const RecordFile = "review.json"

func writeRecord(dir runrec.Dir, rep Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return runrec.WriteFileAtomic(dir.Path(RecordFile), append(b, '\n'), 0o644)
}

func printReport(w io.Writer, rep Report, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(w, "review of run %s (task %s, model %s)\n", rep.RunID, rep.TaskID, orDash(rep.Model))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  work ref\t%s\n", rep.WorkRef)
	fmt.Fprintf(tw, "  commit\t%s (parent %s, base %s)\n", rep.Commit, short(rep.Parent), short(rep.Base))
	fmt.Fprintf(tw, "  patch-id\t%s\n", rep.PatchID)
	tw.Flush()

	fmt.Fprintln(w, "\ndiffstat:")
	var added, deleted int64
	width := 0
	for _, f := range rep.Files {
		width = max(width, len(f.Path))
	}
	for _, f := range rep.Files {
		added += f.Added
		deleted += f.Deleted
		stat := fmt.Sprintf("+%d -%d", f.Added, f.Deleted)
		if f.Binary {
			stat = "binary"
		}
		fmt.Fprintf(w, "  %s %-*s  %s\n", f.Status, width, f.Path, stat)
	}
	fmt.Fprintf(w, "  %d file(s) changed, %d insertion(s), %d deletion(s)\n", len(rep.Files), added, deleted)

	fmt.Fprintln(w, "\nchecks:")
	for _, c := range rep.Checks {
		fmt.Fprintf(w, "  %-4s  %-6s  %s\n", strings.ToUpper(c.Status), c.Name, c.Summary)
		for _, f := range c.Findings {
			fmt.Fprintln(w, indent(f, "          "))
		}
	}
	switch {
	case rep.GateNotRun != "":
		fmt.Fprintln(w, "  SKIP  gate    "+rep.GateNotRun)
	case len(rep.Gate) == 0:
		fmt.Fprintln(w, "  SKIP  gate    no gate command in the policy")
	}
	for _, g := range rep.Gate {
		what := fmt.Sprintf("exit %d in %s", g.ExitCode, g.Duration.Round(1e6))
		if g.TimedOut {
			what = fmt.Sprintf("timed out after %s, killed", g.Duration.Round(1e6))
		}
		fmt.Fprintf(w, "  %-4s  gate    %s: %s (%s)\n", strings.ToUpper(g.Status), g.Name, strings.Join(g.Argv, " "), what)
		if g.Status == StatusFail && g.OutputTail != "" {
			fmt.Fprintln(w, "          output tail:")
			fmt.Fprintln(w, indent(lastLines(g.OutputTail, 20), "          | "))
		}
	}

	fmt.Fprintln(w)
	switch {
	case rep.Verdict != nil:
		fmt.Fprintf(w, "verdict: %s (#%d) by %s on %s at %s, patch-id %s\n", rep.Verdict.Verdict, rep.Verdict.ID,
			rep.Verdict.Reviewer, rep.WorkRef, short(rep.Commit), rep.PatchID)
	case rep.Clean:
		fmt.Fprintln(w, "result: clean (no verdict recorded; use --approve or --request-changes TEXT)")
	default:
		fmt.Fprintf(w, "result: %d finding(s); nothing recorded\n", len(rep.Findings))
	}
	if rep.Decision != nil {
		fmt.Fprintf(w, "decision: %s raised (%s, target %s)\n", rep.Decision.ID, rep.Decision.Kind, rep.Decision.Target)
	}
	return nil
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}
