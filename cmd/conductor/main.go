// Command conductor runs headless LLM coding workers on a git repository and
// turns what they write into reviewed, gated, landed commits.
package main

import "os"

func main() {
	setupProcess()
	os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}
