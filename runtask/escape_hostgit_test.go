package runtask_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/runrec"
)

// TestEscapeHostGit plays the attacks on the conductor's own, host-side git
// (issue 14, items 1 and 3): a worker that makes git run a program it
// planted (a submodule's clean filter), or makes git block (a named pipe
// where a nested repository's HEAD should be). The workspace repository has
// an uninitialised submodule, as many real repositories do. A filter that
// ran on the host leaves a marker in a folder no sandbox binds; a conductor
// that blocked runs into its own deadline (the run's status is then
// "timeout", and the suite's watchdog reports it stuck).
func TestEscapeHostGit(t *testing.T) {
	e := newEscapeEnv(t)
	tool := e.tool
	m := e.marker
	addSubmodule(t, e.repo, "vendor/lib")
	// No attempt here needs a short command timeout (the suite's 3 s is for
	// fork bombs); a loaded machine must not make the probes time out.
	e.pol, e.role = escapeRoleTimeout(t, e, 60)

	// A make recipe that turns the empty submodule folder into a
	// repository whose clean filter runs a program: git status, add or a
	// checkout on the host that recursed into it would run the filter as
	// the conductor's uid, outside every namespace.
	//
	// The sandbox shows the submodule folder read-only; renaming its
	// parent away makes a writable one in its place (the mask is defence
	// in depth: the scan after the command is what stops the attack).
	filterTrap := func(dir, marker string) string {
		return "test:\n" +
			"\tmv vendor vendor.away && mkdir -p " + dir + "\n" +
			"\tcd " + dir + " && git init -q && echo secret > f.txt && git add f.txt" +
			" && git config filter.evil.clean 'touch " + marker + "; cat'" +
			" && git config filter.evil.required true" +
			" && echo '* filter=evil' > .gitattributes && touch -d 2001-01-01 f.txt\n"
	}
	hazard := func(code, path string) func(t *testing.T, o *outcome) []string {
		return func(t *testing.T, o *outcome) []string {
			for _, h := range o.res.Hazards {
				if h.Code == code && h.Path == path {
					return nil
				}
			}
			return []string{"the run's record does not name the hazard " + code + " " + path + " (the attempt did not run as scripted, or it went unseen)"}
		}
	}
	both := func(checks ...func(t *testing.T, o *outcome) []string) func(t *testing.T, o *outcome) []string {
		return func(t *testing.T, o *outcome) []string {
			var out []string
			for _, c := range checks {
				out = append(out, c(t, o)...)
			}
			return out
		}
	}
	attempts := []attempt{
		{name: "submodule clean filter planted by make test", calls: []call{
			writeFileCall("Makefile", filterTrap("vendor/lib", m("submodule-filter"))),
			run("make", "test"),
			run(tool, "read", "vendor/lib/.gitattributes"),
		}, markers: []string{m("submodule-filter")},
			also: both(mustSayFn("filter=evil"), hazard(runrec.HazardNestedRepo, "vendor/lib/.git"))},
		{name: "submodule clean filter planted just before extraction", calls: []call{
			writeFileCall("lib.go", "package escape\n\nconst Answer = 45\n"),
			run(tool, "read", "lib.go"),
		}, tamperAt: 2, tamper: func(t *testing.T, wt string) {
			nestedRepoOnHost(t, filepath.Join(wt, "vendor", "lib"), e.markers)
			os.Chtimes(filepath.Join(wt, "vendor", "lib", "file.txt"), oldTime, oldTime)
		}, markers: hostileMarkers(e.markers), also: hazard(runrec.HazardNestedRepo, "vendor/lib/.git")},
		{name: "a named pipe as a nested repository's HEAD", calls: []call{
			writeFileCall("Makefile", "test:\n\tmkdir -p pkg/nest/.git/objects pkg/nest/.git/refs && mkfifo pkg/nest/.git/HEAD\n"),
			run("make", "test"),
			run(tool, "id"),
		}, timeoutSeconds: 60,
			also: both(mustSayFn("uid="), hazard(runrec.HazardNestedRepo, "pkg/nest/.git"))},
		{name: "a named pipe as a nested HEAD planted just before extraction", calls: []call{
			writeFileCall("lib.go", "package escape\n\nconst Answer = 46\n"),
			run(tool, "read", "lib.go"),
		}, tamperAt: 2, tamper: func(t *testing.T, wt string) {
			for _, d := range []string{"pkg/nest/.git/objects", "pkg/nest/.git/refs"} {
				if err := os.MkdirAll(filepath.Join(wt, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			mkfifo(t, filepath.Join(wt, "pkg", "nest", ".git", "HEAD"))
			mkfifo(t, filepath.Join(wt, "pkg", "pipe"))
		}, timeoutSeconds: 60,
			also: both(hazard(runrec.HazardNestedRepo, "pkg/nest/.git"), hazard(runrec.HazardSpecialFile, "pkg/pipe"),
				func(t *testing.T, o *outcome) []string {
					if !strings.Contains(o.patch, "Answer = 46") {
						return []string{"the worker's change was not extracted: " + o.res.Error}
					}
					return nil
				})},
		{name: "bad input: a socket, a pipe, a .git file, control characters and invalid UTF-8 in names", calls: []call{
			writeFileCall("Makefile", "test:\n"+
				"\tmkdir -p pkg/sub && echo 'gitdir: /nonexistent' > pkg/sub/.git && mkfifo pkg/fifo\n"+
				"\t"+tool+" socket pkg/sock\n"+
				"\ttouch \"pkg/$$(printf 'bad\\033]52;c;aGk=\\007name')\" \"pkg/$$(printf 'inv\\377alid')\"\n"),
			run("make", "test"),
			run(tool, "id"),
		}, timeoutSeconds: 60,
			also: both(mustSayFn("uid="),
				hazard(runrec.HazardNestedRepo, "pkg/sub/.git"),
				hazard(runrec.HazardSpecialFile, "pkg/fifo"),
				hazard(runrec.HazardSpecialFile, "pkg/sock"),
				hazard(runrec.HazardUnsafeName, `pkg/bad\x1b]52;c;aGk=\x07name`),
				hazard(runrec.HazardUnsafeName, `pkg/inv\xffalid`))},
	}
	e.runAttempts(t, "escape suite (host git)", attempts)
}

func mustSayFn(parts ...string) func(t *testing.T, o *outcome) []string {
	return func(t *testing.T, o *outcome) []string { return mustSay(o, parts...) }
}

// oldTime backdates a file so that git's stat data no longer matches and it
// must read (and filter) the file again.
var oldTime = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)

// addSubmodule commits an uninitialised submodule at path (a gitlink and
// its .gitmodules entry) to repo: a checkout has an empty folder there.
func addSubmodule(t *testing.T, repo, path string) {
	t.Helper()
	writeHostFile(t, filepath.Join(repo, ".gitmodules"), "[submodule \"lib\"]\n\tpath = "+path+"\n\turl = https://example.invalid/lib.git\n", 0o644)
	hostGit(t, repo, "update-index", "--add", "--cacheinfo", "160000,1111111111111111111111111111111111111111,"+path)
	hostGit(t, repo, "add", ".gitmodules")
	hostGit(t, repo, "commit", "-q", "-m", "add a submodule")
}

func mkfifo(t *testing.T, p string) {
	t.Helper()
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
}
