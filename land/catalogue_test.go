package land

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Refusal codes appear in the sources as the first argument of
// policy.Refuse / policy.Refusef, as `Code: "..."` in a Refusal literal, or
// as a `CodeXxx = "..."` constant.
var codeInSource = regexp.MustCompile(`(?:\bRefusef?\(\s*"([a-z0-9-]+)"|\bCode:\s*"([a-z0-9-]+)"|\bCode[A-Z]\w*\s*=\s*"([a-z0-9-]+)")`)

// A Refuse call whose code is a variable hides the code from the scan; the
// only one allowed is the bus store's helper, whose callers pass Code*
// constants (scanned above).
var codeFromVariable = regexp.MustCompile(`\bRefusef?\(\s*([a-z]\w*)\s*,`)

var codeFromVariableAllowed = map[string]bool{
	filepath.Join("conductor", "bus", "errors.go") + ":code": true,
	filepath.Join("policy", "refusal.go") + ":code":          true, // the constructors themselves
}

var codeInDocs = regexp.MustCompile("(?m)^### `([a-z0-9-]+)`\\s*$")

// TestRefusalCatalogue checks that every refusal code the product can emit
// is documented in docs/refusals.md and that every documented code is
// emitted somewhere.
func TestRefusalCatalogue(t *testing.T) {
	root := filepath.Join("..")
	emitted := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
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
		rel, _ := filepath.Rel(root, p)
		for _, m := range codeFromVariable.FindAllStringSubmatch(string(b), -1) {
			if !codeFromVariableAllowed[rel+":"+m[1]] {
				t.Errorf("%s: Refuse(%s, ...) takes its code from a variable; use a literal or a Code* constant so the catalogue test sees it", rel, m[1])
			}
		}
		for _, m := range codeInSource.FindAllStringSubmatch(string(b), -1) {
			code := m[1] + m[2] + m[3]
			emitted[code] = append(emitted[code], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "refusals.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range codeInDocs.FindAllStringSubmatch(string(doc), -1) {
		if documented[m[1]] {
			t.Errorf("docs/refusals.md lists %s twice", m[1])
		}
		documented[m[1]] = true
	}
	// The land package's own codes must be found by the scan (guards the
	// scan itself).
	for _, c := range []string{"decision-not-found", "work-ref-moved", "patch-id-mismatch", "gate-failed", "target-moved", "audit-mismatch"} {
		if emitted[c] == nil {
			t.Errorf("scan did not find %s in the sources", c)
		}
	}
	var missing, stale []string
	for c, files := range emitted {
		if !documented[c] {
			missing = append(missing, c+" (emitted in "+strings.Join(files, ", ")+")")
		}
	}
	for c := range documented {
		if emitted[c] == nil {
			stale = append(stale, c)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	for _, m := range missing {
		t.Errorf("refusal code not documented in docs/refusals.md: %s", m)
	}
	for _, s := range stale {
		t.Errorf("docs/refusals.md documents %s, which no code emits", s)
	}
}
