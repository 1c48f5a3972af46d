// Package modelscript is the scripted model conversation shared by the
// fakellm test server and the replay model (runtask's "replay:FILE" alias):
// the JSON script format, its strict loader, and an http.Handler that answers
// OpenAI-compatible requests from a script, quirks of real servers included.
//
// It has no dependency on testing packages so that the conductor binary can
// replay a script with no network (the handler is called in memory).
// It never reads the environment and never sees a credential other than the
// test bearer token a script may demand.
package modelscript
