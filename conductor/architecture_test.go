package conductor_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The import rules of docs/architecture.md, checked on the source of every
// production (non-test) file of the module. A rule broken here is a design
// decision to discuss, not a test to loosen.

const module = "github.com/conductor-dev/conductor"

// leaves import nothing of ours.
var leaves = []string{"patch", "policy", "conductor/jsonstrict", "conductor/runrec", "conductor/termtext"}

// doubles are test doubles and test harnesses: production code never
// imports them (scripts/, the benchmark and test helpers, may). The
// scripted-model format (runtask/fakellm/modelscript) is not one: `run-task
// --replay` plays a recorded conversation with it, a product feature.
var doubles = []string{
	"runtask/fakellm$",
	"conductor/forge/fakegitea", "conductor/bus/bustest", "conductor/testenv",
}

// credentialed packages hold forge tokens; the worker side never reaches
// them, directly or through another package.
var credentialed = []string{"conductor/forge"}

// gitRunners may start the git CLI themselves: the one git helper, the
// benchmark (its floor is the git CLI, run directly on purpose) and the
// forge double (it plays a git server).
var gitRunners = []string{"patch", "scripts/bench", "conductor/forge/fakegitea"}

// apart lists pairs of peers that never import each other: the worker
// (runtask) and landing (land) meet only through the store and the run
// record; the sandbox they share lives in conductor/sandbox. Nothing of
// conductor/ but the MCP server (which reads task files) and dispatch (which
// starts runs) reaches into the worker.
var apart = [][2]string{{"runtask$", "land"}, {"land", "runtask"}, {"runtask/fakellm$", "land"},
	{"conductor/review", "runtask"}, {"conductor/bus", "runtask"}, {"conductor/queue", "runtask"}, {"conductor/forge", "runtask"},
	// dispatch drives runs and may reach the forge: the worker never
	// imports it back, and landing is not dispatch's.
	{"runtask", "conductor/dispatch"}, {"conductor/dispatch", "land"}, {"land", "conductor/dispatch"}}

type pkgInfo struct {
	imports map[string]bool // our packages, relative to the module
	all     map[string]bool // every import path
	runsGit []string        // file:line of exec.Command("git", …)
}

func loadPackages(t *testing.T) map[string]*pkgInfo {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found above conductor/: %v", err)
	}
	pkgs := map[string]*pkgInfo{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || strings.HasPrefix(name, ".") || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		p := pkgs[rel]
		if p == nil {
			p = &pkgInfo{imports: map[string]bool{}, all: map[string]bool{}}
			pkgs[rel] = p
		}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			p.all[ip] = true
			if ours, ok := strings.CutPrefix(ip, module+"/"); ok {
				p.imports[ours] = true
			}
		}
		full, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(full, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Command" && sel.Sel.Name != "CommandContext") {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "exec" {
				return true
			}
			for _, a := range call.Args {
				if lit, ok := a.(*ast.BasicLit); ok && lit.Value == `"git"` {
					p.runsGit = append(p.runsGit, fset.Position(call.Pos()).String())
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages under %s: the walk is broken", len(pkgs), root)
	}
	return pkgs
}

// under reports whether pkg is one of set or below one ("x$" matches x
// alone, not its sub-packages).
func under(pkg string, set []string) bool {
	return slices.ContainsFunc(set, func(s string) bool {
		if exact, ok := strings.CutSuffix(s, "$"); ok {
			return pkg == exact
		}
		return pkg == s || strings.HasPrefix(pkg, s+"/")
	})
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestImportRules(t *testing.T) {
	pkgs := loadPackages(t)
	names := make([]string, 0, len(pkgs))
	for name := range pkgs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := pkgs[name]
		tool := name == "cmd/conductor" || strings.HasPrefix(name, "scripts/")
		for _, imp := range sortedKeys(p.imports) {
			if slices.Contains(leaves, name) {
				t.Errorf("%s imports %s: it is a leaf and imports nothing of ours", name, imp)
			}
			if under(imp, doubles) && !tool && !under(name, doubles) {
				t.Errorf("%s imports the test double %s outside a test", name, imp)
			}
			for _, pair := range apart {
				if under(name, pair[:1]) && under(imp, pair[1:]) {
					t.Errorf("%s imports %s: the two meet only through the store and the run record", name, imp)
				}
			}
			if strings.HasPrefix(imp, "cmd/") {
				t.Errorf("%s imports %s: nothing imports the command line", name, imp)
			}
		}
		if !tool && (p.all["github.com/urfave/cli/v2"] || p.all["github.com/urfave/cli"]) {
			t.Errorf("%s imports urfave/cli: only cmd/conductor parses flags", name)
		}
		if len(p.runsGit) > 0 && !under(name, gitRunners) {
			t.Errorf("%s starts git itself (%s): run git through patch.Git", name, strings.Join(p.runsGit, ", "))
		}
	}
	// The worker side never reaches a credential, not even transitively.
	var reach func(pkg string, seen map[string]bool) []string
	reach = func(pkg string, seen map[string]bool) []string {
		if seen[pkg] {
			return nil
		}
		seen[pkg] = true
		if under(pkg, credentialed) {
			return []string{pkg}
		}
		p := pkgs[pkg]
		if p == nil {
			return nil
		}
		for _, imp := range sortedKeys(p.imports) {
			if path := reach(imp, seen); path != nil {
				return append([]string{pkg}, path...)
			}
		}
		return nil
	}
	for _, name := range names {
		if name == "runtask" || strings.HasPrefix(name, "runtask/") {
			if path := reach(name, map[string]bool{}); path != nil {
				t.Errorf("the worker side reaches a credentialed package: %s", strings.Join(path, " → "))
			}
		}
	}
}
