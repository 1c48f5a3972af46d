package land

import (
	"crypto/sha256"
	"encoding/hex"
)

// lockKey names the lock (conductor/filelock, under the data root) for one
// repository and target.
func lockKey(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
