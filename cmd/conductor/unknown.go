package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// unknownCommand is the usage error for a command name that names no
// command of parent ("conductor", "conductor runs"), with the closest
// command's name when one is close.
func unknownCommand(parent, name string, cmds []*cli.Command) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, parent)
	if s := suggestCommand(name, cmds); s != "" {
		msg += fmt.Sprintf("\ndid you mean %q? (see %s --help)", s, parent)
	} else {
		msg += fmt.Sprintf("\nsee %s --help", parent)
	}
	return usagef("%s", msg)
}

// suggestCommand is the visible command name closest to name: a unique
// prefix match, else the smallest edit distance if it is at most a third
// of the name (at least 1, at most 2); "" when nothing is close.
func suggestCommand(name string, cmds []*cli.Command) string {
	best, bestD := "", 0
	for _, c := range cmds {
		if c.Hidden {
			continue
		}
		for _, n := range c.Names() {
			d := editDistance(strings.ToLower(name), strings.ToLower(n))
			if best == "" || d < bestD {
				best, bestD = n, d
			}
		}
	}
	limit := min(max(len(name)/3, 1), 2)
	if best != "" && bestD <= limit {
		return best
	}
	var prefixed []string
	for _, c := range cmds {
		if !c.Hidden && len(name) >= 2 && strings.HasPrefix(c.Name, name) {
			prefixed = append(prefixed, c.Name)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// editDistance is the Levenshtein distance with adjacent transpositions
// counted as one edit (optimal string alignment).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range rb {
		d[0][j+1] = j + 1
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// flagUsage turns urfave's "flag provided but not defined: -x" into a
// message naming the command and the closest flag it has.
func flagUsage(c *cli.Context, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: ")
	if !ok || c == nil {
		return usageErr(err)
	}
	name = strings.TrimLeft(name, "-")
	var names []string
	for _, l := range c.Lineage() {
		if l.Command != nil && l.Command.Name != "" && l.Command.Name != c.App.Name {
			names = append([]string{l.Command.Name}, names...)
		}
	}
	path := strings.Join(append([]string{"conductor"}, names...), " ")
	flags := c.App.Flags
	if len(names) > 0 {
		flags = c.Command.Flags
	}
	best, bestD := "", 0
	for _, f := range flags {
		for _, n := range f.Names() {
			if d := editDistance(name, n); best == "" || d < bestD {
				best, bestD = n, d
			}
		}
	}
	msg := fmt.Sprintf("unknown flag --%s for %q", name, path)
	if best != "" && bestD <= min(max(len(name)/3, 1), 2) {
		msg += fmt.Sprintf("\ndid you mean --%s? (see %s --help)", best, path)
	} else {
		msg += fmt.Sprintf("\nsee %s --help", path)
	}
	return usagef("%s", msg)
}
