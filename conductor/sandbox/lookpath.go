package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
)

// lookPathIn finds an executable named file in the PATH value path (the
// command's environment, not the conductor's). An empty PATH searches
// /usr/bin:/bin, as execvp does.
func lookPathIn(file, path string) (string, error) {
	if path == "" {
		path = "/usr/bin:/bin"
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue // never the current directory
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: executable file not found in the command's PATH %q", file, path)
}

func geteuid() int { return os.Geteuid() }
