package web

import (
	"html/template"
	"slices"
	"strings"
)

// MinSecretLen is the shortest secret value redacted: shorter values would
// mangle ordinary text ("1", "true") without protecting anything.
const MinSecretLen = 8

// Redacted replaces a secret in every page and event.
const Redacted = "[redacted]"

// redactor replaces secret values (operator tokens, the credentials in the
// server's own environment) in everything the server sends: as they are and
// as html/template escapes them. It is the last step before the bytes leave,
// so no page or event can show one whatever the store or a run folder holds.
type redactor struct{ r *strings.Replacer }

func newRedactor(secrets []string) redactor {
	seen := map[string]bool{}
	var forms []string
	for _, s := range secrets {
		if len(s) < MinSecretLen {
			continue
		}
		for _, f := range []string{s, template.HTMLEscapeString(s), strings.ReplaceAll(template.HTMLEscapeString(s), "+", "&#43;")} {
			if !seen[f] {
				seen[f] = true
				forms = append(forms, f)
			}
		}
	}
	if len(forms) == 0 {
		return redactor{}
	}
	// Longest first, so a secret containing another is replaced whole.
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, Redacted)
	}
	return redactor{r: strings.NewReplacer(pairs...)}
}

func (r redactor) apply(s string) string {
	if r.r == nil {
		return s
	}
	return r.r.Replace(s)
}
