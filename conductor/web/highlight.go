package web

import (
	"path"
	"regexp"
	"strings"
)

// seg is a piece of a diff line with its highlighting class ("" plain, kw
// keyword, str string, com comment, num number).
type seg struct {
	Kind string
	Text string
}

// lang is what the highlighter knows of a language: its keywords and how
// a line comment starts. A language it does not know is shown plain.
type lang struct {
	keywords map[string]bool
	token    *regexp.Regexp
}

func words(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

var (
	slashTokens = regexp.MustCompile(`//.*$|"(?:[^"\\]|\\.)*"|` + "`[^`]*`" + `|'(?:[^'\\]|\\.)*'|\b\d[\d_.xXa-fA-F]*\b|\b[A-Za-z_]\w*\b`)
	hashTokens  = regexp.MustCompile(`#.*$|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\b\d[\d_.]*\b|\b[A-Za-z_]\w*\b`)

	langs = map[string]lang{
		".go": {words(`break case chan const continue default defer else fallthrough for func go goto if import
			interface map package range return select struct switch type var nil true false iota`), slashTokens},
		".js": {words(`async await break case catch class const continue default delete do else export extends
			finally for function if import in instanceof let new return super switch this throw try typeof var
			void while yield null undefined true false`), slashTokens},
		".rs": {words(`as async await break const continue crate else enum extern fn for if impl in let loop match
			mod move mut pub ref return self Self static struct trait type unsafe use where while true false`), slashTokens},
		".c": {words(`auto break case char const continue default do double else enum extern float for goto if int
			long register return short signed sizeof static struct switch typedef union unsigned void volatile while`), slashTokens},
		".py": {words(`and as assert async await break class continue def del elif else except finally for from
			global if import in is lambda nonlocal not or pass raise return try while with yield None True False`), hashTokens},
		".sh": {words(`if then else elif fi case esac for while until do done in function return local export set`), hashTokens},
	}
	langAlias = map[string]string{".ts": ".js", ".mjs": ".js", ".jsx": ".js", ".tsx": ".js", ".h": ".c", ".cc": ".c",
		".cpp": ".c", ".java": ".c", ".bash": ".sh", ".yml": ".sh", ".yaml": ".sh", ".toml": ".sh", ".rb": ".py"}
)

// langOf picks the language of a file from its name ("" : none).
func langOf(name string) (lang, bool) {
	ext := strings.ToLower(path.Ext(name))
	if a, ok := langAlias[ext]; ok {
		ext = a
	}
	if path.Base(name) == "Makefile" {
		ext = ".sh"
	}
	l, ok := langs[ext]
	return l, ok
}

// fileOfDiffHeader returns the new path of a "diff --git a/X b/Y" line.
func fileOfDiffHeader(line string) string {
	rest := strings.TrimPrefix(line, "diff --git ")
	if i := strings.LastIndex(rest, " b/"); i >= 0 {
		return rest[i+3:]
	}
	return ""
}

// highlight splits a code line (without its +/-/space prefix) into segments.
func highlight(l lang, code string) []seg {
	var out []seg
	last := 0
	for _, m := range l.token.FindAllStringIndex(code, -1) {
		tok := code[m[0]:m[1]]
		kind := ""
		switch c := tok[0]; {
		case strings.HasPrefix(tok, "//") || c == '#':
			kind = "com"
		case c == '"' || c == '\'' || c == '`':
			kind = "str"
		case c >= '0' && c <= '9':
			kind = "num"
		case l.keywords[tok]:
			kind = "kw"
		}
		if kind == "" {
			continue
		}
		if m[0] > last {
			out = append(out, seg{Text: code[last:m[0]]})
		}
		out = append(out, seg{Kind: kind, Text: tok})
		last = m[1]
	}
	if last < len(code) {
		out = append(out, seg{Text: code[last:]})
	}
	return out
}
