package patch

// Short abbreviates an object id (or a patch-id) for people: its first 12
// characters. Ids are printed whole wherever a machine reads them.
func Short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
