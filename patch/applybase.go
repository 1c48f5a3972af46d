package patch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// ApplyToBase applies diff (a git diff, paths a/ and b/) to base's tree in a
// temporary index, with git's own `apply --cached`, and returns the id of the
// resulting tree. The repository gains the new blobs and trees, unreferenced
// until a commit names them; nothing else in it changes. Review makes a run's
// work commit with it, and `conductor mcp` checks an agent's patch with it,
// so both agree on what applies.
func ApplyToBase(ctx context.Context, g Git, base string, diff []byte) (string, error) {
	tmp, err := os.MkdirTemp("", "conductor-apply-index-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	ig := g.WithEnv("GIT_INDEX_FILE=" + filepath.Join(tmp, "index"))
	ig.Config = append(ig.Config, "core.attributesFile=/dev/null", "apply.whitespace=nowarn")
	if _, err := ig.Run(ctx, "read-tree", base); err != nil {
		return "", fmt.Errorf("read the base tree: %w", err)
	}
	if _, err := ig.RunInput(ctx, bytes.NewReader(diff), "apply", "--cached", "--binary", "--whitespace=nowarn", "-p1", "-"); err != nil {
		return "", fmt.Errorf("the patch does not apply to its base %s: %w", Short(base), err)
	}
	tree, err := ig.Line(ctx, "write-tree")
	if err != nil {
		return "", fmt.Errorf("write the tree: %w", err)
	}
	return tree, nil
}
