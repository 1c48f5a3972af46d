package main

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneJSONWriter keeps every --json on the one writer (jsonout.go): no
// other file of the command line builds a JSON encoder or marshals its
// own output. json.Marshal is allowed where the bytes are not output
// (enqueue's queue payload).
func TestOneJSONWriter(t *testing.T) {
	t.Parallel()
	marshalOK := map[string]bool{"enqueue.go": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "jsonout.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok || pkg.Name != "json" {
				return true
			}
			switch sel.Sel.Name {
			case "NewEncoder", "MarshalIndent":
				t.Errorf("%s: json.%s: print with writeJSON (one object) or writeJSONLine (a stream)", fset.Position(sel.Pos()), sel.Sel.Name)
			case "Marshal":
				if !marshalOK[name] {
					t.Errorf("%s: json.Marshal: print with writeJSON (one object) or writeJSONLine (a stream)", fset.Position(sel.Pos()))
				}
			}
			return true
		})
	}
}

func TestJSONWriterShapes(t *testing.T) {
	t.Parallel()
	v := map[string]any{"runId": "r-1", "files": []string{"a", "b"}}
	var obj, line bytes.Buffer
	if err := writeJSON(&obj, v); err != nil {
		t.Fatal(err)
	}
	if err := writeJSONLine(&line, v); err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"files\": [\n    \"a\",\n    \"b\"\n  ],\n  \"runId\": \"r-1\"\n}\n"; obj.String() != want {
		t.Errorf("writeJSON:\n%s\nwant:\n%s", obj.String(), want)
	}
	if want := `{"files":["a","b"],"runId":"r-1"}` + "\n"; line.String() != want {
		t.Errorf("writeJSONLine: %q, want %q", line.String(), want)
	}
	var back map[string]any
	if err := json.Unmarshal(obj.Bytes(), &back); err != nil || back["runId"] != "r-1" {
		t.Errorf("writeJSON output does not decode: %v %v", back, err)
	}
}
