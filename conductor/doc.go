// Package conductor holds the protocol's shared core: configuration and the
// data root. Its subpackages own the bus store (bus), run records (runrec),
// the job queue (queue) and the forge (forge).
//
// conductor never hands a credential to a worker: forge tokens and API keys
// are read here and in the model client only, never written to a run record.
package conductor
