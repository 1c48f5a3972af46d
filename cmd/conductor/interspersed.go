package main

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// hoistFlags lets flags follow positional arguments, as the documented
// forms do (`conductor decision resolve ID --option merge`, `conductor land
// DECISION --dry-run`): urfave/cli v2 stops parsing flags at the first
// positional argument, so the known flags of the command being run are moved
// in front of its positional arguments, and global flags given after the
// command go back in front of it. Everything after "--" stays as it is, and
// so does an argument that is not a flag of that command or of the app.
func hoistFlags(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	i := 1
	// Global flags, then the command path.
	i = copyFlags(app.Flags, args, i, &out)
	globalEnd := len(out)
	cmds := app.Commands
	var cmd *cli.Command
	for i < len(args) {
		next := findCommand(cmds, args[i])
		if next == nil {
			break
		}
		cmd = next
		out = append(out, args[i])
		i++
		if len(cmd.Subcommands) == 0 {
			break
		}
		cmds = cmd.Subcommands
	}
	if cmd == nil {
		return args
	}
	var flags, globals, positional []string
	for i < len(args) {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i:]...)
			break
		}
		dst := &flags
		f, ok := lookupFlag(cmd.Flags, a)
		if !ok {
			// A global flag given after the command (`runs list
			// --database-url URL`) goes back in front of the command.
			if f, ok = lookupFlag(app.Flags, a); ok && f != nil {
				dst = &globals
			}
		}
		if !ok && len(a) > 1 && a[0] == '-' {
			// An unknown flag after the arguments: parsed as a flag, so it
			// is named as unknown (`land D --dryrun`), not counted as an
			// argument. An argument that starts with "-" goes after "--".
			flags = append(flags, a)
			i++
			continue
		}
		if !ok {
			positional = append(positional, a)
			i++
			continue
		}
		*dst = append(*dst, a)
		i++
		if f != nil && takesValue(f) && !strings.Contains(a, "=") && i < len(args) {
			*dst = append(*dst, args[i])
			i++
		}
	}
	res := append([]string(nil), out[:globalEnd]...)
	res = append(res, globals...)
	res = append(res, out[globalEnd:]...)
	res = append(res, flags...)
	return append(res, positional...)
}

// copyFlags copies the leading flags (and their values) of args from i.
func copyFlags(fs []cli.Flag, args []string, i int, out *[]string) int {
	for i < len(args) {
		f, ok := lookupFlag(fs, args[i])
		if !ok {
			return i
		}
		*out = append(*out, args[i])
		i++
		if f != nil && takesValue(f) && !strings.Contains(args[i-1], "=") && i < len(args) {
			*out = append(*out, args[i])
			i++
		}
	}
	return i
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if slices.Contains(c.Names(), name) {
			return c
		}
	}
	return nil
}

// lookupFlag finds the flag an argument names. The help flags are known
// (with a nil Flag) although the app adds them only when it runs.
func lookupFlag(fs []cli.Flag, arg string) (cli.Flag, bool) {
	if len(arg) < 2 || arg[0] != '-' || arg == "--" {
		return nil, false
	}
	name := strings.TrimLeft(arg, "-")
	if k := strings.IndexByte(name, '='); k >= 0 {
		name = name[:k]
	}
	if name == "h" || name == "help" {
		return nil, true
	}
	for _, f := range fs {
		if slices.Contains(f.Names(), name) {
			return f, true
		}
	}
	return nil, false
}

func takesValue(f cli.Flag) bool {
	if dg, ok := f.(cli.DocGenerationFlag); ok {
		return dg.TakesValue()
	}
	return true
}
