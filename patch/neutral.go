package patch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
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
	kept bool     // a kept git dir (keptNeutralRepo, keptExtractRepo): close leaves it
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
	files := extractFiles(repo)
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
	n.Git = neutralGit(repo, objects, dir, workTree)
	return n, nil
}

// neutralGit runs git in the neutral git dir dir on repo's object store.
func neutralGit(repo Git, objects, dir, workTree string) Git {
	env := dropEnv(append([]string(nil), repo.Env...),
		"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_CEILING_DIRECTORIES")
	env = append(env,
		"GIT_OBJECT_DIRECTORY="+objects,
		"GIT_INDEX_FILE="+filepath.Join(dir, "index"),
	)
	return Git{GitDir: dir, WorkTree: workTree, Env: env, Config: append([]string(nil), neutralConfig...)}
}

// A kept neutral git dir serves tree diffs (no work tree: git reads no
// index, exclude file or worktree attributes, and writes nothing there)
// for any repository, whose object store each git is given by
// GIT_OBJECT_DIRECTORY. It holds only what git needs to take it for a git
// dir, and the attributes that pin a diff's bytes. It is made once under
// the caller's data root, checked before every use (exactly these files,
// these bytes, nothing else: a commondir or a config.worktree would bring
// configuration that is not ours) and replaced when it does not check
// out; several processes may diff through it at once, and it is never
// removed by its users. keptNeutralFiles are its files, which every
// neutral git dir has (a throw-away one adds info/exclude).
var keptNeutralFiles = map[string]string{
	"HEAD":            "ref: refs/heads/conductor-neutral\n",
	"config":          "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tlogAllRefUpdates = false\n",
	"info/attributes": neutralAttributes,
}

// keptNeutralRepo returns the kept neutral git dir at dir for repo's tree
// diffs, making or replacing it first when it does not check out. Its
// close leaves it in place.
func keptNeutralRepo(repo Git, dir string) (*neutralRepo, error) {
	objects := filepath.Join(repo.CommonDir(), "objects")
	if fi, err := os.Stat(objects); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("repository %s: no object store at %s", repo.GitDir, objects)
	}
	if !keptNeutralOK(dir, keptNeutralFiles) {
		if err := makeKeptNeutral(dir, keptNeutralFiles); err != nil {
			return nil, fmt.Errorf("neutral git dir %s: %w", dir, err)
		}
	}
	return &neutralRepo{Git: neutralGit(repo, objects, dir, ""), dir: dir, kept: true}, nil
}

// keptExtractRepo returns the neutral git dir kept at dir for extractions
// from workTree, one at a time (ExtractOptions.NeutralDir): what a
// throw-away one holds (newNeutralRepo), with no index yet. The index and
// its lock a previous extraction left are removed first; anything else
// that is not exactly ours has the whole dir replaced.
func keptExtractRepo(repo Git, dir, workTree string) (*neutralRepo, error) {
	objects := filepath.Join(repo.CommonDir(), "objects")
	if fi, err := os.Stat(objects); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("repository %s: no object store at %s", repo.GitDir, objects)
	}
	files := extractFiles(repo)
	for _, name := range []string{"index", "index.lock"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			break // not a file: the check below replaces the dir
		}
	}
	if !keptNeutralOK(dir, files) {
		if err := makeKeptNeutral(dir, files); err != nil {
			return nil, fmt.Errorf("neutral git dir %s: %w", dir, err)
		}
	}
	return &neutralRepo{Git: neutralGit(repo, objects, dir, workTree), dir: dir, kept: true}, nil
}

// extractFiles are the files of a neutral git dir that collects a
// worktree: keptNeutralFiles, and the operator's own exclude file, which
// still decides what is ignored.
func extractFiles(repo Git) map[string]string {
	files := map[string]string{"info/exclude": ""}
	maps.Copy(files, keptNeutralFiles) // HEAD, config, attributes
	if b, err := os.ReadFile(filepath.Join(repo.CommonDir(), "info", "exclude")); err == nil {
		files["info/exclude"] = string(b)
	}
	return files
}

// keptNeutralOK checks dir holds exactly files (regular files, those
// bytes) and an empty refs folder.
func keptNeutralOK(dir string, files map[string]string) bool {
	want := map[string][]string{"": {"refs"}, "refs": nil}
	for name := range files {
		sub, base := path.Split(name)
		sub = strings.TrimSuffix(sub, "/")
		if sub != "" && !slices.Contains(want[""], sub) {
			want[""] = append(want[""], sub)
		}
		want[sub] = append(want[sub], base)
	}
	for sub, names := range want {
		slices.Sort(names)
		ents, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil || len(ents) != len(names) {
			return false
		}
		for i, e := range ents { // sorted by name
			name := strings.TrimPrefix(sub+"/"+e.Name(), "/")
			if e.Name() != names[i] {
				return false
			}
			content, isFile := files[name]
			if isFile != e.Type().IsRegular() || (!isFile && !e.IsDir()) {
				return false
			}
			if isFile {
				b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
				if err != nil || string(b) != content {
					return false
				}
			}
		}
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return false
	}
	return true
}

// makeKeptNeutral writes a kept neutral git dir holding files beside dir
// and renames it into place, replacing one that does not check out;
// another process making it at the same time is fine (both make the same
// bytes).
func makeKeptNeutral(dir string, files map[string]string) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+"-new-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	for _, sub := range []string{"refs", "info"} {
		if err := os.Mkdir(filepath.Join(tmp, sub), 0o700); err != nil {
			return err
		}
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(tmp, filepath.FromSlash(name)), []byte(content), 0o600); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dir); err == nil || keptNeutralOK(dir, files) {
		return nil
	}
	// What is there does not check out (damaged, or not ours): replace it.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil && !keptNeutralOK(dir, files) {
		return err
	}
	return nil
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
	if n != nil && n.dir != "" && !n.kept {
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
