// Package web is mission control: `conductor serve`, a small server-rendered
// web view of the bus store and the run folders. It shows every run (with its
// transcript, live while the run is running, its diff, checkpoints, notes and
// review), the decisions waiting for a person (with what each would land),
// the queue and the worker pool, and what landed. An operator may add a note
// to a running session, answer a decision and ask for a landing preview
// (`land --preview`, run in the background, which changes nothing); nothing
// else changes anything.
//
// Pages are html/template, assets are embedded, the little JavaScript there
// is only makes pages live: the server polls the store and the run folders
// and pushes what changed over server-sent events. Every page reads without
// JavaScript.
//
// web listens on a loopback address unless it is given operator tokens;
// every mutation needs a token (a session opened with one, or a bearer
// header) and, from a browser, the session's CSRF token and a same-origin
// request. The operator a token names is who decided.
//
// web never shows a credential: not an operator token, not an API key, not
// the environment. It never lands, pushes or runs a worker: a decision is a
// person's act, landing is `conductor land`'s. The one thing it runs is the
// landing preview an operator asks for, through Options.Preview (the CLI
// passes land.Preview: the gate in the sandbox, nothing changed).
package web
