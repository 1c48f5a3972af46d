package policy

import (
	"path"
	"slices"
	"strings"

	"github.com/conductor-dev/conductor/conductor/refusal"
)

// The argument rules of CheckCommand. They are advice that narrows what a
// worker asks for, not a boundary: an allowlisted `make test` or `go test`
// runs the worker's own Makefile and tests, which can do anything the
// sandbox allows. What they give is exactness: a denied option is refused
// in every spelling the program itself accepts, so the list means what it
// says.

// flagSyntax is how a program reads its options.
type flagSyntax int

const (
	// getoptSyntax: GNU getopt_long and its kin (make, cargo's clap,
	// pytest's argparse): short options bundle (-kfFILE is -k -f FILE) and
	// take attached values (-C/), long options take =value and may be
	// abbreviated (--dir= is --directory=), "--" ends the options.
	getoptSyntax flagSyntax = iota
	// goSyntax: Go's flag package (go, gofmt): -name and --name are the
	// same flag, values attach with =, no bundles, no abbreviations.
	goSyntax
)

// program is what CheckCommand knows about one program's arguments.
type program struct {
	syntax flagSyntax
	// deny are options refused whatever the contract says: they name a
	// program to run, another makefile or configuration, or another
	// folder to run in.
	deny []string
	// denyWords are tool flags refused inside any argument (go build
	// -ldflags=-extld=PROG runs PROG as the linker).
	denyWords []string
	// noAssignments: NAME=value arguments set variables (make's SHELL=,
	// .SHELLFLAGS=, MAKEFLAGS=): refused anywhere in argv.
	noAssignments bool
	// noOptions: every option before "--" is a configuration setting (npm's
	// --script-shell, --userconfig, --node-options, -C): all are refused;
	// arguments after "--" go to the test script.
	noOptions bool
	// longOptions are options of the program whose names would otherwise
	// read as abbreviations of a denied one (pytest's --co is
	// --collect-only, not --config-file).
	longOptions []string
}

// programs maps a program's base name to its rules; any other program is
// read with getoptSyntax and the contract's deniedArgs only.
var programs = map[string]program{
	"go":     {syntax: goSyntax, deny: []string{"-exec", "-toolexec", "-vettool"}, denyWords: []string{"-extld", "-extar", "-extldflags"}},
	"gofmt":  {syntax: goSyntax},
	"make":   {deny: makeDeny, noAssignments: true},
	"gmake":  {deny: makeDeny, noAssignments: true},
	"npm":    {noOptions: true},
	"pnpm":   {noOptions: true},
	"yarn":   {noOptions: true},
	"cargo":  {deny: []string{"--config", "-Z"}},
	"pytest": {deny: pytestDeny, longOptions: []string{"co"}},
}

var (
	makeDeny   = []string{"-f", "--file", "--makefile", "-C", "--directory", "-E", "--eval", "-I", "--include-dir"}
	pytestDeny = []string{"-p", "-c", "--config-file", "-o", "--override-ini"}
)

// checkArgs checks the arguments after the matched allowlist prefix.
func (r *Role) checkArgs(match, args []string) error {
	prog := programs[path.Base(match[0])]
	denied := append(slices.Clone(prog.deny), r.c.DeniedArgs...)
	refuse := func(a, why, fix string) error {
		return refusal.Newf("argument-not-allowed", fix, "role %s may not pass %q to %s: %s", r.c.Role, a, quoteArgv(match), why)
	}
	options := true
	for _, a := range args {
		if strings.ContainsRune(a, 0) {
			return refusal.Newf("argument-not-allowed", "remove the NUL byte", "role %s: argument contains a NUL byte", r.c.Role)
		}
		if prog.noAssignments && isAssignment(a) {
			return refuse(a, "a variable assignment on the command line overrides the makefile (SHELL=, .SHELLFLAGS=, MAKEFLAGS=)", "drop the assignment; set it in the makefile if the task needs it")
		}
		for _, w := range prog.denyWords {
			if containsWord(a, w) {
				return refuse(a, w+" names a program to run", "drop "+w)
			}
		}
		if prog.syntax == getoptSyntax && !options {
			continue // after "--": operands, or the test script's own arguments
		}
		if a == "--" && prog.syntax == getoptSyntax {
			options = false
			continue
		}
		if prog.noOptions && strings.HasPrefix(a, "-") && a != "-" {
			return refuse(a, "its options are configuration settings (the shell that runs scripts, the config files, node's options)", "drop the option; pass the test script's own arguments after \"--\"")
		}
		for _, d := range denied {
			if deniedArgIn(prog, a, d) {
				why := "the role's deniedArgs list " + d
				if slices.Contains(prog.deny, d) {
					why = d + " chooses another program, makefile, configuration or folder"
				}
				return refuse(a, why, "drop the argument "+d)
			}
		}
	}
	return nil
}

// deniedArgIn reports whether argument a is the denied option d in any
// spelling the program accepts.
func deniedArgIn(prog program, a, d string) bool {
	if deniedArg(a, d) {
		return true // -name, --name, with or without =value
	}
	if prog.syntax != getoptSyntax || !strings.HasPrefix(d, "-") {
		return false
	}
	switch {
	case strings.HasPrefix(d, "--"):
		// an abbreviation: --dir=/ is --directory=/
		if !strings.HasPrefix(a, "--") {
			return false
		}
		name, _, _ := strings.Cut(a[2:], "=")
		return name != "" && strings.HasPrefix(d[2:], name) && !slices.Contains(prog.longOptions, name)
	case len(d) == 2:
		// a short option, alone, bundled or with its value attached:
		// -fFILE, -kfFILE, -C/. Anything after a value-taking option is
		// its value, so this may refuse more than getopt would read, never
		// less.
		return len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.IndexByte(a[1:], d[1]) >= 0
	}
	return false
}

// isAssignment reports whether a is a make variable assignment: NAME=value
// (and :=, ::=, +=, ?=, !=), which make reads anywhere on its command line.
func isAssignment(a string) bool {
	return !strings.HasPrefix(a, "-") && strings.Contains(a, "=")
}

// containsWord reports whether w is one of the words of a, split at
// spaces, quotes and "=" (-ldflags=all=-extld=/x, "-linkmode external
// -extld /x"), in its one- or two-dash spelling.
func containsWord(a, w string) bool {
	words := strings.FieldsFunc(a, func(r rune) bool {
		return r == '=' || r == ' ' || r == '\t' || r == '\n' || r == '\'' || r == '"'
	})
	for _, x := range words {
		if x == w || x == "-"+w {
			return true
		}
	}
	return false
}
