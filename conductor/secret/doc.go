// Package secret owns the one rule for environment variable names a worker
// never receives: names that look like credentials (API keys, tokens,
// passwords, session cookies, …) and names that make a program run other
// code or read another configuration (LD_*, GIT_*, BASH_ENV, NODE_OPTIONS,
// …). Role validation (policy), the worker's command environment (runtask)
// and the gate environment (runtask/sandbox) all ask Withheld; none keeps a
// list of its own.
//
// secret is a leaf: it imports nothing of conductor's own packages, so
// policy and runtask/sandbox, which import nothing else of ours, may use it.
// It never reads the environment itself.
package secret
