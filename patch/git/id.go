package git

// EmptyTree is the id of the empty tree (SHA-1 repositories).
const EmptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// ZeroID is the all-zero id git uses for "no object" (update-ref's old
// value of a ref that must not exist yet).
const ZeroID = "0000000000000000000000000000000000000000"

// IsObjectID reports whether s is a full lower-case SHA-1 object id.
func IsObjectID(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
