package conductor_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
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

// vocabulary is the refusal type and its codes: a leaf every other package,
// leaves included, may import.
const vocabulary = "conductor/refusal"

// leaves import nothing of ours but the vocabulary (and what leafImports
// allows).
var leaves = []string{"conductor/refusal", "patch", "patch/git", "policy", "conductor/filelock", "conductor/jsonstrict", "conductor/runrec", "conductor/termtext", "conductor/ctxwait"}

// leafImports is what a leaf may import all the same: patch (diffs) is
// built on patch/git (running git, refs, objects) and locks its scratch
// folders with conductor/filelock, both leaves themselves.
var leafImports = map[string][]string{"patch": {"patch/git", "conductor/filelock"}}

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

// gitRunners may start the git CLI themselves: the one git helper
// (patch/git), the benchmark (its floor is the git CLI, run directly on
// purpose) and the forge double (it plays a git server).
var gitRunners = []string{"patch/git", "scripts/bench", "conductor/forge/fakegitea"}

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
	deletes []string        // file:line of a call that may delete git objects
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
			if deletesObjects(call) {
				p.deletes = append(p.deletes, fset.Position(call.Pos()).String())
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

// objectDeleters are git subcommands that delete objects (or may: gc,
// prune, repack -d, prune-packed, git's "maintenance").
var objectDeleters = map[string]bool{`"gc"`: true, `"prune"`: true, `"prune-packed"`: true, `"repack"`: true, `"maintenance"`: true}

// deletesObjects reports a call that may delete objects from a repository:
// a git subcommand of objectDeleters given as the first string argument
// (as in g.Run(ctx, "gc")), a go-git DeleteLooseObject or
// DeleteOldObjectPackAndIndex, or an os.Remove/RemoveAll whose argument
// names an "objects" folder.
func deletesObjects(call *ast.CallExpr) bool {
	var name string
	switch f := call.Fun.(type) {
	case *ast.SelectorExpr:
		name = f.Sel.Name
		if x, ok := f.X.(*ast.Ident); ok && x.Name == "os" && (name == "Remove" || name == "RemoveAll") {
			found := false
			for _, a := range call.Args {
				ast.Inspect(a, func(n ast.Node) bool {
					if lit, ok := n.(*ast.BasicLit); ok && strings.Contains(lit.Value, "objects") {
						found = true
					}
					if id, ok := n.(*ast.Ident); ok && strings.Contains(strings.ToLower(id.Name), "objects") {
						found = true
					}
					return !found
				})
			}
			return found
		}
	case *ast.Ident:
		name = f.Name
	}
	if name == "DeleteLooseObject" || name == "DeleteOldObjectPackAndIndex" {
		return true
	}
	for _, a := range call.Args {
		if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			return objectDeleters[lit.Value]
		}
	}
	return false
}

// TestNothingDeletesObjects: no production code deletes an object from a
// repository (a landing's refusal leaves what it wrote for git gc, as git
// itself does; land's TestRefusalKeepsEveryObject checks the behaviour).
func TestNothingDeletesObjects(t *testing.T) {
	pkgs := loadPackages(t)
	for _, name := range slices.Sorted(maps.Keys(pkgs)) {
		if p := pkgs[name]; len(p.deletes) > 0 && !strings.HasPrefix(name, "scripts/") && !under(name, doubles) {
			t.Errorf("%s may delete git objects (%s): nothing in conductor does", name, strings.Join(p.deletes, ", "))
		}
	}
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
			if slices.Contains(leaves, name) && !slices.Contains(leafImports[name], imp) && (imp != vocabulary || name == vocabulary) {
				t.Errorf("%s imports %s: it is a leaf and imports nothing of ours (but %s)", name, imp, vocabulary)
			}
			if under(name, []string{"conductor/bus"}) && under(imp, []string{"policy"}) {
				t.Errorf("%s imports %s: the store keeps records, it does not read contracts (refusals come from %s)", name, imp, vocabulary)
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
			t.Errorf("%s starts git itself (%s): run git through patch/git (git.Git)", name, strings.Join(p.runsGit, ", "))
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

// knobReaders may read WORKER_*/CONDUCTOR_* variables: the configuration
// code (conductor: Resolve), the command line, and the tools and doubles
// that are not the product (scripts/, test harnesses).
var knobReaders = append([]string{"conductor$", "cmd/conductor", "scripts"}, doubles...)

// TestKnobsResolvedOnce: no production package outside the configuration
// code and the command line reads a knob's variable (WORKER_*,
// CONDUCTOR_*) itself — by os.Getenv, os.LookupEnv, or a getenv-like
// function value it was given — with the name as a literal, a constant
// (of its own package or another), or a literal prefix. Domain packages
// receive values (conductor.Config); what they may still read from the host
// environment is the worker's allowlist passthrough and API keys, whose
// names are never knobs.
func TestKnobsResolvedOnce(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	type file struct {
		pkg string
		f   *ast.File
	}
	var files []file
	consts := map[string]map[string]string{} // package → const name → string value
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
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files = append(files, file{rel, f})
		if consts[rel] == nil {
			consts[rel] = map[string]string{}
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[rel][name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	isKnob := func(s string) bool { return strings.HasPrefix(s, "WORKER_") || strings.HasPrefix(s, "CONDUCTOR_") }
	checked := 0
	for _, fl := range files {
		if under(fl.pkg, knobReaders) {
			continue
		}
		imports := map[string]string{} // local name → package relative to the module
		for _, imp := range fl.f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			ours, ok := strings.CutPrefix(ip, module+"/")
			if !ok {
				continue
			}
			name := ours[strings.LastIndex(ours, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			imports[name] = ours
		}
		// name is the variable an argument names, "" when none is known.
		var name func(e ast.Expr) string
		name = func(e ast.Expr) string {
			switch e := e.(type) {
			case *ast.BasicLit:
				if e.Kind == token.STRING {
					s, _ := strconv.Unquote(e.Value)
					return s
				}
			case *ast.Ident:
				return consts[fl.pkg][e.Name]
			case *ast.SelectorExpr:
				if x, ok := e.X.(*ast.Ident); ok {
					if pkg, ok := imports[x.Name]; ok {
						return consts[pkg][e.Sel.Name]
					}
				}
			case *ast.BinaryExpr:
				return name(e.X) // a literal prefix: "CONDUCTOR_X_" + suffix
			case *ast.ParenExpr:
				return name(e.X)
			}
			return ""
		}
		ast.Inspect(fl.f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			var fn string
			switch f := call.Fun.(type) {
			case *ast.Ident:
				fn = f.Name
			case *ast.SelectorExpr:
				fn = f.Sel.Name
			}
			if l := strings.ToLower(fn); l != "getenv" && l != "lookupenv" {
				return true
			}
			checked++
			if v := name(call.Args[0]); isKnob(v) {
				t.Errorf("%s reads the knob %s itself (%s): resolve it in conductor.Resolve and pass the value",
					fl.pkg, v, fset.Position(call.Pos()))
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("only %d getenv calls looked at: the walk is broken", checked)
	}
}
