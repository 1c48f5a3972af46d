package main

import (
	"encoding/json"
	"io"

	"github.com/urfave/cli/v2"
)

// The one JSON writer of the command line. Every --json prints through
// these two, so every command's machine output has the same shape:
//
//   - writeJSON: one JSON object (a command's result), indented by two
//     spaces, one trailing newline. jq, json.Unmarshal and a person all
//     read it.
//   - writeJSONLine: one line of a stream (NDJSON: `events --json`, the
//     worker's per-job lines, progress events): compact, one object per
//     line, so a reader can split on newlines.
//
// Both escape <, > and & as encoding/json does by default. TestOneJSONWriter
// keeps the rest of cmd/conductor from encoding its own output.

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeJSONLine(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// jsonFlag is the --json flag of the commands that print one JSON object.
func jsonFlag() cli.Flag {
	return &cli.BoolFlag{Name: "json", Usage: "print one JSON object"}
}
