//go:build !linux

package runrec

import "errors"

// exchange is not available: ReplaceFile falls back to WriteFileAtomic.
func exchange(a, b string) error { return errors.New("rename exchange not supported") }
