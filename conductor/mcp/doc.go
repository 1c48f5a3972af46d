// Package mcp is `conductor mcp`: the protocol's agent lifecycle served as
// Model Context Protocol tools and resources (stdio, or streamable HTTP
// behind a bearer token), so that an outside agent — an IDE agent, Claude
// Code, a person's own assistant — takes and finishes backlog items through
// the same store semantics as conductor's own workers: atomic claims (here
// with a lease), completions with outcome, model alias and token totals,
// operator notes, decisions raised.
//
// mcp never resolves a decision and never lands: a decision is a person's
// act and landing the conductor's. It holds no credential (no model key,
// no forge token) and reads run folders only through os.Root.
package mcp
