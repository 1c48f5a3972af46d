package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/sandbox"
)

func newSandboxCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "sandbox",
		Usage: "the sandbox backends' own set-up (the docker backend's image)",
		Subcommands: []*cli.Command{{
			Name:  "image",
			Usage: "the docker backend's image",
			Subcommands: []*cli.Command{{
				Name:  "build",
				Usage: "make the docker backend's image now (it is made on first use otherwise): the scratch image imported from the host's folders, or check CONDUCTOR_DOCKER_IMAGE",
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usagef("sandbox image build takes no arguments")
					}
					name, err := sandbox.DockerImage(sandbox.OptionsFrom(d.config(c).SandboxLimits))
					if err != nil {
						return err
					}
					_, err = fmt.Fprintln(d.Stdout, name)
					return err
				},
			}},
		}},
	}
}
