package sandbox

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// systemPaths are bound read-only (or recreated as the same symlink) so
// that programs and their libraries work inside the sandbox.
var systemPaths = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcPaths are the only pieces of /etc a command sees, all world-readable
// and free of secrets: user and group names (id, os/user), the dynamic
// loader's cache, the time zone, Debian's alternatives links (/usr/bin/cc →
// /etc/alternatives/cc), localhost resolution and the public CA bundle.
// /etc/shadow, /etc/ssh, /etc/resolv.conf, credentials and everything else
// stay outside.
var etcPaths = []string{
	"/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
	"/etc/localtime", "/etc/alternatives", "/etc/hosts",
	"/etc/ssl/certs", "/etc/ca-certificates",
}

// reservedPaths may be neither the worktree, the scratch folder nor one of
// their descendants' ancestors: binding them read-write would hand the
// worker the host's system, other users' files or the sandbox's own
// fresh mounts.
var reservedPaths = []string{"/", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
	"/etc", "/proc", "/dev", "/sys", "/tmp", "/run", "/var", "/home", "/root", "/boot"}

// homeLikeVars point at folders a command expects to write. When one of
// them lies outside the worktree and the scratch folder it gets a fresh
// tmpfs (or a folder in the fresh /tmp), never a host folder.
var homeLikeVars = []string{"HOME", "TMPDIR", "GOCACHE", "GOPATH", "GOMODCACHE", "GOTMPDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"}

// sysEntry is one system path as found on the host.
type sysEntry struct {
	path string
	link string // symlink target; "" for a directory
}

// hostLayout is what the host offers to bind.
type hostLayout struct {
	sys           []sysEntry
	etc           []string
	disableUserns bool   // bwrap ≥ 0.8: --disable-userns
	perms         bool   // bwrap ≥ 0.5: --perms before --tmpfs
	size          bool   // bwrap ≥ 0.7: --size before --tmpfs
	env           string // env(1) inside the sandbox, to drop the PWD bwrap sets
}

func detectLayout(bwrapVersion string) hostLayout {
	var l hostLayout
	for _, p := range systemPaths {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			continue
		case fi.Mode()&fs.ModeSymlink != 0:
			if t, err := os.Readlink(p); err == nil {
				l.sys = append(l.sys, sysEntry{path: p, link: t})
			}
		case fi.IsDir():
			l.sys = append(l.sys, sysEntry{path: p})
		}
	}
	for _, p := range etcPaths {
		if _, err := os.Stat(p); err == nil {
			l.etc = append(l.etc, p)
		}
	}
	l.disableUserns = versionAtLeast(bwrapVersion, 0, 8)
	l.perms = versionAtLeast(bwrapVersion, 0, 5)
	l.size = versionAtLeast(bwrapVersion, 0, 7)
	for _, p := range []string{"/usr/bin/env", "/bin/env"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			for _, e := range l.sys {
				if within(p, e.path) {
					l.env = p
				}
			}
		}
		if l.env != "" {
			break
		}
	}
	return l
}

// versionAtLeast reports whether "bubblewrap X.Y.Z" is at least maj.min.
func versionAtLeast(v string, maj, min int) bool {
	v = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), "bubblewrap"))
	var a, b int
	if _, err := fmt.Sscanf(v, "%d.%d", &a, &b); err != nil {
		return false
	}
	return a > maj || (a == maj && b >= min)
}

// within reports whether p is base or lies under it.
func within(p, base string) bool {
	if base == "/" {
		return true
	}
	return p == base || strings.HasPrefix(p, base+"/")
}

// resolveDir checks that dir is an absolute path to an existing directory
// that may be handed to a worker read-write, and returns it with symlinks
// resolved.
func resolveDir(what, dir string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("%s: empty path", what)
	}
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("%s %q: not an absolute path", what, dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s %q: not a directory", what, dir)
	}
	for _, r := range reservedPaths {
		if within(r, real) {
			return "", fmt.Errorf("%s %q: refusing to hand %s to a worker read-write (it is or contains a system folder)", what, dir, real)
		}
	}
	return real, nil
}

// checkArg rejects strings that cannot travel safely: bwrap reads its
// arguments NUL-separated, so a NUL inside one would start a new option.
func checkArg(what, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%s %q: contains a NUL byte", what, s)
	}
	return nil
}

// plan is a validated Spec ready to become bwrap arguments.
type plan struct {
	dir, scratch string
	inside       string // where dir is bound (dir itself by default)
	mounts       []Mount
	gitMask      string      // "file", "dir" or "absent"
	readOnly     []string    // absolute folders inside dir bound read-only
	warm         [][2]string // warm cache layers: host folder, where inside (in scratch)
	env          [][2]string
	argv         []string
}

func makePlan(spec Spec) (plan, error) {
	var p plan
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return p, errors.New("empty argv")
	}
	for i, a := range spec.Argv {
		if err := checkArg(fmt.Sprintf("argv[%d]", i), a); err != nil {
			return p, err
		}
	}
	var err error
	if p.dir, err = resolveDir("worktree", spec.Dir); err != nil {
		return p, err
	}
	if spec.Scratch != "" {
		if p.scratch, err = resolveDir("scratch folder", spec.Scratch); err != nil {
			return p, err
		}
		if within(p.scratch, p.dir) || within(p.dir, p.scratch) {
			return p, fmt.Errorf("scratch folder %q and worktree %q overlap", spec.Scratch, spec.Dir)
		}
	}
	p.inside = p.dir
	if spec.DirInside != "" {
		in := filepath.Clean(spec.DirInside)
		if !filepath.IsAbs(in) || in != spec.DirInside {
			return p, fmt.Errorf("worktree inside path %q: want a clean absolute path", spec.DirInside)
		}
		for _, r := range reservedPaths {
			if within(r, in) || (r != "/" && within(in, r)) {
				return p, fmt.Errorf("worktree inside path %q: it is, contains or lies in the system folder %s", in, r)
			}
		}
		p.inside = in
	}
	for _, m := range spec.Mounts {
		if err := checkArg("mount", m.Path); err != nil {
			return p, err
		}
		real, err := filepath.EvalSymlinks(m.Path)
		if err != nil || !filepath.IsAbs(m.Path) {
			return p, fmt.Errorf("mount %q: %v", m.Path, cmp.Or(err, errors.New("not an absolute path")))
		}
		for _, r := range reservedPaths {
			if within(r, real) {
				return p, fmt.Errorf("mount %q: refusing to bind %s (it is or contains a system folder)", m.Path, real)
			}
		}
		for _, other := range []string{p.dir, p.scratch, p.inside} {
			if other != "" && (within(real, other) || within(other, real)) {
				return p, fmt.Errorf("mount %q overlaps the worktree or the scratch folder %s", m.Path, other)
			}
		}
		p.mounts = append(p.mounts, Mount{Path: real, Writable: m.Writable})
	}
	seen := map[string]int{}
	for _, kv := range spec.Env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return p, fmt.Errorf("environment entry %q: want NAME=VALUE", kv)
		}
		if err := checkArg("environment entry", kv); err != nil {
			return p, err
		}
		if i, dup := seen[name]; dup {
			p.env[i][1] = value // last one wins, as in os/exec
			continue
		}
		seen[name] = len(p.env)
		p.env = append(p.env, [2]string{name, value})
	}
	gitPath := filepath.Join(p.dir, ".git")
	fi, err := os.Lstat(gitPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		p.gitMask = "absent"
	case err != nil:
		return p, fmt.Errorf("worktree .git: %w", err)
	case fi.Mode().IsRegular():
		p.gitMask = "file"
	case fi.IsDir():
		p.gitMask = "dir"
	default:
		return p, fmt.Errorf("worktree %s is a %s, not a file or folder: the worktree was tampered with; refusing to run in it", gitPath, fi.Mode().Type())
	}
	for _, rel := range spec.ReadOnlyDirs {
		if abs, ok := plainDirBelow(p.dir, rel); ok {
			p.readOnly = append(p.readOnly, abs)
		}
	}
	p.argv = spec.Argv
	return p, nil
}

// plainDirBelow returns dir/rel when rel is a clean relative path, not
// through .git, every component of which is a real folder (no link).
func plainDirBelow(dir, rel string) (string, bool) {
	if rel == "" || strings.HasPrefix(rel, "/") || path.Clean(rel) != rel || rel == "." || strings.HasPrefix(rel, "../") || rel == ".." ||
		checkArg("read-only folder", rel) != nil {
		return "", false
	}
	cur := dir
	for _, c := range strings.Split(rel, "/") {
		if c == ".git" {
			return "", false
		}
		cur = filepath.Join(cur, c)
		fi, err := os.Lstat(cur)
		if err != nil || !fi.IsDir() {
			return "", false
		}
	}
	return cur, true
}

// bwrapArgs turns a plan into bubblewrap's options (read from --args FD:
// bwrap reads its options there, but the command must stay on its command
// line, after "--").
func bwrapArgs(p plan, l hostLayout, o Options, infoFD, seccompFD int) []string {
	a := []string{
		"--unshare-all", "--unshare-user", // every namespace, network included
		"--die-with-parent", "--new-session",
		// The command is pid 1 of its namespace: when it ends, the kernel
		// kills everything it left behind, and bwrap reaps it itself
		// (with bwrap's own init in between, that init would be left a
		// zombie for the host's init to collect).
		"--as-pid-1",
		"--hostname", "sandbox",
		"--clearenv",
		"--info-fd", fmt.Sprint(infoFD),
	}
	if seccompFD >= 0 {
		a = append(a, "--seccomp", fmt.Sprint(seccompFD))
	}
	if l.disableUserns {
		a = append(a, "--disable-userns")
	}
	ro := []string{}
	for _, e := range l.sys {
		if e.link != "" {
			a = append(a, "--symlink", e.link, e.path)
		} else {
			a = append(a, "--ro-bind", e.path, e.path)
			ro = append(ro, e.path)
		}
	}
	for _, e := range l.etc {
		a = append(a, "--ro-bind", e, e)
		ro = append(ro, e)
	}
	// tmpfs mounts a command may fill: sized where bwrap can size them.
	tmpfs := func(dest, perms string) {
		if perms != "" && l.perms {
			a = append(a, "--perms", perms)
		}
		if l.size {
			a = append(a, "--size", fmt.Sprint(o.TmpSize))
		}
		a = append(a, "--tmpfs", dest)
	}
	a = append(a, "--proc", "/proc", "--dev", "/dev")
	tmpfs("/tmp", "1777")
	for _, e := range o.ReadOnly {
		a = append(a, "--ro-bind", e, e)
		ro = append(ro, e)
	}
	writable := []string{"/tmp"}
	if p.scratch != "" {
		a = append(a, "--bind", p.scratch, p.scratch)
		writable = append(writable, p.scratch)
	}
	for _, m := range p.mounts {
		if m.Writable {
			a = append(a, "--bind", m.Path, m.Path)
			writable = append(writable, m.Path)
		} else {
			a = append(a, "--ro-bind", m.Path, m.Path)
			ro = append(ro, m.Path)
		}
	}
	for _, w := range p.warm {
		a = append(a, "--bind", w[0], w[1])
	}
	a = append(a, "--bind", p.dir, p.inside)
	writable = append(writable, p.inside)

	// The worktree's .git: a worker can neither read nor replace it (a
	// mount point cannot be renamed or removed).
	git := filepath.Join(p.inside, ".git")
	switch p.gitMask {
	case "file", "absent":
		a = append(a, "--ro-bind", "/dev/null", git)
	case "dir":
		if l.perms {
			a = append(a, "--perms", "0000")
		}
		a = append(a, "--tmpfs", git, "--remount-ro", git)
	}
	// The submodule folders: read-only (nothing can be planted there).
	for _, d := range p.readOnly {
		in := d
		if rel, err := filepath.Rel(p.dir, d); err == nil {
			in = filepath.Join(p.inside, rel) // where the worktree is inside
		}
		a = append(a, "--ro-bind", d, in)
	}

	// Folders the environment points at.
	fresh := p.homeLikeDirs()
	var tmpfsDone []string
	for i, v := range fresh {
		if i > 0 && fresh[i-1] == v {
			continue
		}
		switch {
		case underAny(v, writable) || underAny(v, tmpfsDone):
			if v != p.inside && v != p.scratch && !within(v, p.inside) {
				a = append(a, "--dir", v) // inside a fresh or scratch folder: make sure it exists
			}
		case underAny(v, ro) || underAny(v, []string{"/proc", "/dev"}):
			// points into a read-only system path: leave it alone
		default:
			tmpfs(v, "")
			tmpfsDone = append(tmpfsDone, v)
		}
	}
	a = append(a, "--remount-ro", "/", "--chdir", p.inside)
	for _, kv := range p.env {
		a = append(a, "--setenv", kv[0], kv[1])
	}
	return a
}

// homeLikeDirs are the absolute folders the environment's HOME-like
// variables name, sorted (a folder named twice appears twice): each gets a
// fresh folder of its own unless it lies in the worktree or scratch.
func (p plan) homeLikeDirs() []string {
	var dirs []string
	for _, kv := range p.env {
		if !isHomeLike(kv[0]) {
			continue
		}
		v := filepath.Clean(kv[1])
		if !filepath.IsAbs(kv[1]) || v == "/" {
			continue
		}
		dirs = append(dirs, v)
	}
	sort.Strings(dirs)
	return dirs
}

// addWarm applies a warm cache layer to the plan: its binds, and its
// variables over the spec's.
func (p *plan) addWarm(l *warmLayer) {
	p.warm = append(p.warm, l.binds...)
	for _, kv := range l.env {
		found := false
		for i := range p.env {
			if p.env[i][0] == kv[0] {
				p.env[i][1], found = kv[1], true
			}
		}
		if !found {
			p.env = append(p.env, kv)
		}
	}
}

// writableDirs are the host folders the plan's command may write: its
// worktree, its scratch folder and its writable mounts (resolved).
func (p plan) writableDirs() []string {
	dirs := []string{p.dir, p.scratch}
	for _, m := range p.mounts {
		if m.Writable {
			dirs = append(dirs, m.Path)
		}
	}
	return dirs
}

func (p plan) hasEnv(name string) bool {
	for _, kv := range p.env {
		if kv[0] == name {
			return true
		}
	}
	return false
}

func isHomeLike(name string) bool {
	for _, n := range homeLikeVars {
		if n == name {
			return true
		}
	}
	return false
}

func underAny(p string, bases []string) bool {
	for _, b := range bases {
		if within(p, b) {
			return true
		}
	}
	return false
}
