// Package roles embeds the default role contracts (one JSON file per role,
// plus conductor-policy.json and the JSON Schema). A repository's own roles/
// folder overrides them; see package policy for the merge rules.
package roles

import "embed"

// FS holds the default contracts.
//
//go:embed *.json
var FS embed.FS
