// Package dispatch turns a job into a worker run and a run into its
// follow-ups: the queue job handler (idempotency by run id, the per-run
// lock, the backlog claim, run or resume, the completion), the unattended
// path after a successful run (review with approval, push, draft PR), the
// dead-letter hook, and review's redispatch of a session with its findings.
//
// dispatch owns the order of those acts and nothing else: the run itself is
// runtask's, the verdict conductor/review's, the push and the PR
// conductor/forge's, the queue's delivery semantics conductor/queue's. It
// takes every setting as a field of an options struct (the command line
// resolves them) and returns values; it never parses flags, never reads a
// WORKER_… variable itself and never prints for a person.
//
// dispatch may reach the forge (it opens draft PRs with the conductor's
// token); the worker side (runtask) never imports dispatch, so the token
// never reaches a worker.
package dispatch
