package forge

import (
	"context"
	"fmt"

	"github.com/conductor-dev/conductor/patch"
)

// CloseIssueAfterLanding is the --close-issue act of `conductor land`, run
// after the local commit exists: it comments on the issue with the landed
// commit and target, then closes it. It changes nothing locally; an error
// leaves the landing in place (the commit is already made) and says which
// step failed so the operator can finish by hand.
func CloseIssueAfterLanding(ctx context.Context, f Forge, issue int64, sha, target string) error {
	if f == nil {
		return fmt.Errorf("close issue #%d: no forge configured", issue)
	}
	if issue <= 0 {
		return fmt.Errorf("close issue: %d is not an issue number", issue)
	}
	if sha == "" || target == "" {
		return fmt.Errorf("close issue #%d: landed commit and target are required", issue)
	}
	body := fmt.Sprintf("Landed as %s on `%s` by conductor.\n\nThe commit is local until `conductor push %s` publishes it.", sha, target, target)
	if err := f.CommentIssue(ctx, issue, body); err != nil {
		return fmt.Errorf("close issue #%d after landing %s: comment: %w", issue, patch.Short(sha), err)
	}
	if err := f.CloseIssue(ctx, issue); err != nil {
		return fmt.Errorf("close issue #%d after landing %s: commented, but close failed: %w", issue, patch.Short(sha), err)
	}
	return nil
}
