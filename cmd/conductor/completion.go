package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// Shell completion: bash and zsh ask the binary itself for the candidates
// (urfave/cli's --generate-bash-completion), so they follow the commands
// and flags of the installed version; fish gets its generated script.
const bashCompletion = `# conductor completion for bash: source <(conductor completion bash)
_conductor_complete() {
  local cur words
  cur="${COMP_WORDS[COMP_CWORD]}"
  if [[ "$cur" == "-"* ]]; then
    words=$("${COMP_WORDS[@]:0:$COMP_CWORD}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    words=$("${COMP_WORDS[@]:0:$COMP_CWORD}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
  return 0
}
complete -o bashdefault -o default -F _conductor_complete conductor
`

const zshCompletion = `#compdef conductor
# conductor completion for zsh: conductor completion zsh > "${fpath[1]}/_conductor"
_conductor() {
  local -a opts
  local cur=${words[-1]}
  if [[ "$cur" == "-"* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} "$cur" --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
  fi
  if [[ -n "${opts[1]}" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
compdef _conductor conductor
`

func newCompletionCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("completion takes one shell (bash, zsh or fish), got %d arguments", c.NArg())
			}
			switch shell := c.Args().First(); shell {
			case "bash":
				_, err := fmt.Fprint(d.Stdout, bashCompletion)
				return err
			case "zsh":
				_, err := fmt.Fprint(d.Stdout, zshCompletion)
				return err
			case "fish":
				script, err := c.App.ToFishCompletion()
				if err != nil {
					return fmt.Errorf("completion fish: %w", err)
				}
				_, err = fmt.Fprint(d.Stdout, script)
				return err
			default:
				return usagef("completion: unknown shell %q (want bash, zsh or fish)", shell)
			}
		},
	}
}

// newManCmd prints the man page (roff) of the whole command tree: `make man`
// writes it to docs/man/conductor.1.
func newManCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "man",
		Usage:  "print the conductor(1) man page (roff)",
		Hidden: true,
		Action: func(c *cli.Context) error {
			page, err := c.App.ToManWithSection(1)
			if err != nil {
				return fmt.Errorf("man: %w", err)
			}
			_, err = fmt.Fprint(d.Stdout, page)
			return err
		},
	}
}
