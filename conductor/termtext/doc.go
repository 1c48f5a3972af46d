// Package termtext makes text that a worker chose safe to print to a
// person's terminal: file names, model messages, tool names, gate and check
// output. Escape sequences in such text could write the operator's
// clipboard (OSC 52), retitle or clear the terminal, hide lines or fake
// them; printed through this package they show as visible escapes (\x1b,
// \u009b) instead.
//
// One function does the escaping (escape); Line, Text and Writer are its
// three ways in. The package is a leaf: it imports nothing of conductor's
// own, so cmd/conductor and every domain package that formats text for
// people may use it. It never touches machine output (JSON, diffs, ids).
package termtext
