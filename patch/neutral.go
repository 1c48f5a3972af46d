package patch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/conductor-dev/conductor/conductor/filelock"
	"github.com/conductor-dev/conductor/patch/git"
)

// neutralAttributes is the attributes file of a neutral git dir. The
// repository's $GIT_DIR/info/attributes has the highest precedence of all
// attribute sources, so these lines override every .gitattributes a worker
// could write: no clean/smudge filter or process can run, no end-of-line,
// ident or working-tree-encoding conversion can alter bytes, and no diff
// driver (textconv, external diff, binary marking) applies.
const neutralAttributes = "* -text !eol -filter -ident !working-tree-encoding !diff !merge -export-subst\n"

// neutralConfig holds per-command settings pinned for canonical output, on
// top of the guards every Git carries.
var neutralConfig = []string{
	"core.attributesFile=/dev/null",
	"core.excludesFile=",
	"core.fileMode=true",
	"core.symlinks=true",
	"core.ignoreCase=false",
	"core.precomposeUnicode=false",
	"core.checkStat=default",
	"core.trustctime=true",
	"core.splitIndex=false",
	"core.sparseCheckout=false",
	"index.sparse=false",
	"diff.suppressBlankEmpty=false",
	"diff.algorithm=default",
	"diff.indentHeuristic=true",
	"diff.interHunkContext=0",
	"diff.orderFile=",
	"diff.ignoreSubmodules=none",
	"diff.submodule=short",
	"core.abbrev=40",
	"feature.manyFiles=false",
}

// neutralRepo is a throw-away git dir that shares the object store of a
// real repository and nothing else: its config, hooks, attributes and index
// are ours. Every operation that reads a worker's files or must produce
// canonical bytes runs in one, so nothing the worker or the repository's
// configuration says can run a program or change the output.
type neutralRepo struct {
	Git
	dir  string
	lock *os.File // flock held while the git dir is in use (CleanScratch)
}

// newNeutralRepo creates a neutral git dir for repo. workTree may be empty.
// The caller must call close.
func newNeutralRepo(repo Git, workTree string) (*neutralRepo, error) {
	common := repo.CommonDir()
	objects := filepath.Join(common, "objects")
	if fi, err := os.Stat(objects); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("repository %s: no object store at %s", repo.GitDir, objects)
	}
	dir, lock, err := makeScratch(repo.Scratch)
	if err != nil {
		return nil, err
	}
	n := &neutralRepo{dir: dir, lock: lock}
	config := "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tlogAllRefUpdates = false\n"
	files := map[string]string{
		"HEAD":            "ref: refs/heads/conductor-neutral\n",
		"config":          config,
		"info/attributes": neutralAttributes,
		"info/exclude":    "",
	}
	// The operator's own exclude file still decides what is ignored.
	if b, err := os.ReadFile(filepath.Join(common, "info", "exclude")); err == nil {
		files["info/exclude"] = string(b)
	}
	for _, sub := range []string{"refs", "info"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			n.close()
			return nil, err
		}
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), []byte(content), 0o600); err != nil {
			n.close()
			return nil, err
		}
	}
	env := dropEnv(append([]string(nil), repo.Env...),
		"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_CEILING_DIRECTORIES")
	env = append(env,
		"GIT_OBJECT_DIRECTORY="+objects,
		"GIT_INDEX_FILE="+filepath.Join(dir, "index"),
	)
	n.Git = Git{GitDir: dir, WorkTree: workTree, Env: env, Config: append([]string(nil), neutralConfig...)}
	return n, nil
}

// dropEnv removes the named variables from env.
func dropEnv(env []string, names ...string) []string {
	out := env[:0]
next:
	for _, kv := range env {
		for _, name := range names {
			if strings.HasPrefix(kv, name+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

func (n *neutralRepo) close() {
	if n != nil && n.dir != "" {
		os.RemoveAll(n.dir)
		if n.lock != nil {
			filelock.Unlock(n.lock)
		}
	}
}

// indexFile is the neutral repository's index.
func (n *neutralRepo) indexFile() string { return filepath.Join(n.dir, "index") }

// resolveTree returns the tree id of rev (a commit, tag or tree) in repo.
// what names rev in errors ("base", "from").
func resolveTree(ctx context.Context, repo Git, what, rev string) (string, error) {
	if rev == "" {
		return "", fmt.Errorf("%s: no revision given", what)
	}
	if strings.HasPrefix(rev, "-") || strings.ContainsAny(rev, "\x00\n") {
		return "", fmt.Errorf("%s %q: not a revision", what, rev)
	}
	var tree string
	var err error
	if git.IsObjectID(rev) {
		// An id (what runs and landings pass) is peeled in process; a
		// name, or what go-git cannot read, goes to git.
		var objs []git.Object
		if objs, err = git.Lookup(ctx, repo, rev+"^{tree}"); err == nil && objs[0].Type == "tree" {
			tree = objs[0].ID
		}
	}
	if tree == "" {
		tree, err = repo.WithWorkTree("").Line(ctx, "rev-parse", "--verify", "--quiet", rev+"^{tree}")
	}
	if err != nil || tree == "" {
		return "", fmt.Errorf("%s %q: no such commit or tree in %s", what, rev, repo.GitDir)
	}
	if len(tree) != 40 {
		// The neutral git dir, patch-ids and Apply are SHA-1 only.
		return "", fmt.Errorf("%s %q: repository %s does not use SHA-1 object ids (not supported)", what, rev, repo.GitDir)
	}
	return tree, nil
}
