package refusal

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var codeInDocs = regexp.MustCompile("(?m)^### `([a-z0-9-]+)`\\s*$")

// TestCatalogue keeps docs/refusals.md and Catalogue the same list, in the
// same order, each code once.
func TestCatalogue(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "refusals.md"))
	if err != nil {
		t.Fatal(err)
	}
	var documented []Code
	for _, m := range codeInDocs.FindAllStringSubmatch(string(doc), -1) {
		if slices.Contains(documented, Code(m[1])) {
			t.Errorf("docs/refusals.md lists %s twice", m[1])
		}
		documented = append(documented, Code(m[1]))
	}
	seen := map[Code]bool{}
	for _, c := range Catalogue {
		if seen[c] {
			t.Errorf("Catalogue lists %s twice", c)
		}
		seen[c] = true
		if !slices.Contains(documented, c) {
			t.Errorf("code %s is in the catalogue but not documented in docs/refusals.md (add a ### `%s` section: cause and fix)", c, c)
		}
	}
	for _, c := range documented {
		if !seen[c] {
			t.Errorf("docs/refusals.md documents %s, which is not in the catalogue (catalogue.go)", c)
		}
	}
	if !t.Failed() && !slices.Equal(documented, Catalogue) {
		t.Errorf("docs/refusals.md and the catalogue list the codes in different orders:\ndocs:      %v\ncatalogue: %v", documented, Catalogue)
	}
	if !Known(WorkRefMoved) || Known("no-such-code") {
		t.Error("Known disagrees with the catalogue")
	}
}

// Codes appear in the sources as the first argument of refusal.New /
// refusal.Newf, as `Code: "..."` in a Refusal literal, as a `CodeXxx = "..."`
// constant, or as a catalogue constant (refusal.WorkRefMoved).
var (
	codeLiteral  = regexp.MustCompile(`(?:\brefusal\.Newf?\(\s*"([a-z0-9-]+)"|\bCode:\s*"([a-z0-9-]+)"|\bCode[A-Z]\w*\s*=\s*"([a-z0-9-]+)")`)
	codeConstant = regexp.MustCompile(`\brefusal\.([A-Z]\w*)\b`)
	// A call whose code is a variable hides the code from the scan; the
	// only one allowed is the bus store's helper, whose callers pass Code*
	// constants (scanned above).
	codeFromVariable        = regexp.MustCompile(`\brefusal\.Newf?\(\s*([a-z]\w*)\s*,`)
	codeFromVariableAllowed = map[string]bool{filepath.Join("conductor", "bus", "errors.go") + ":code": true}
)

// TestEveryEmittedCodeIsCatalogued scans the Go sources for every code the
// product can refuse with: each must be in the catalogue, and each code of
// the catalogue must be emitted somewhere.
func TestEveryEmittedCodeIsCatalogued(t *testing.T) {
	t.Parallel()
	names := catalogueNames(t)
	root := filepath.Join("..", "..")
	emitted := map[Code][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") || rel == filepath.Join("conductor", "refusal") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range codeFromVariable.FindAllStringSubmatch(string(b), -1) {
			if !codeFromVariableAllowed[rel+":"+m[1]] {
				t.Errorf("%s: refusal.New(%s, ...) takes its code from a variable; use a catalogue constant or a literal so this test sees it", rel, m[1])
			}
		}
		for _, m := range codeLiteral.FindAllStringSubmatch(string(b), -1) {
			c := Code(m[1] + m[2] + m[3])
			emitted[c] = append(emitted[c], rel)
		}
		for _, m := range codeConstant.FindAllStringSubmatch(string(b), -1) {
			if c, ok := names[m[1]]; ok {
				emitted[c] = append(emitted[c], rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The scan must find codes of every kind (guards the scan itself).
	for _, c := range []Code{DecisionNotFound, PatchIDMismatch, GateFailed, TargetMoved, TaskClaimed, SandboxUnavailable, IssueNotFound} {
		if emitted[c] == nil {
			t.Errorf("scan did not find %s in the sources", c)
		}
	}
	var missing, stale []string
	for c, files := range emitted {
		if !Known(c) {
			missing = append(missing, string(c)+" (emitted in "+strings.Join(slices.Compact(files), ", ")+")")
		}
	}
	for _, c := range Catalogue {
		if emitted[c] == nil {
			stale = append(stale, string(c))
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("refusal code not in the catalogue (conductor/refusal/catalogue.go and docs/refusals.md): %s", m)
	}
	for _, s := range stale {
		t.Errorf("the catalogue lists %s, which no code emits", s)
	}
}

// catalogueNames maps each catalogue constant's name to its code.
func catalogueNames(t *testing.T) map[string]Code {
	f, err := parser.ParseFile(token.NewFileSet(), "catalogue.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]Code{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok {
					continue
				}
				v, _ := strconv.Unquote(lit.Value)
				names[n.Name] = Code(v)
			}
		}
	}
	if len(names) != len(Catalogue) {
		t.Fatalf("catalogue.go: %d constants, %d in Catalogue", len(names), len(Catalogue))
	}
	return names
}
