package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/review"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/patch"
)

// gateDeps are the generated repository's module dependencies: small, pure
// Go, and in the host's module cache (the conductor's own), so the bench
// needs no network.
var gateDeps = []struct{ path, version, pkg, use string }{
	{"golang.org/x/sync", "v0.24.0", "golang.org/x/sync/errgroup", "var _ errgroup.Group"},
	{"github.com/bluekeyes/go-gitdiff", "v0.9.0", "github.com/bluekeyes/go-gitdiff/gitdiff", "var _ = gitdiff.Parse"},
	{"github.com/sashabaranov/go-openai", "v1.43.0", "github.com/sashabaranov/go-openai", "var _ = openai.ChatMessageRoleUser"},
	{"dario.cat/mergo", "v1.0.2", "dario.cat/mergo", "var _ = mergo.Merge"},
}

// rowGate is issue 23's row: the gate conductor review runs (the tree
// exported from the object store, `go test ./...` in a fresh bwrap
// sandbox over the warm cache's per-gate layer) against `go test
// -count=1 ./...` on the host with a warm build cache, on the demo-sized
// repository and on a generated one of ~50 packages with module
// dependencies; the cold gate (no warm cache) once beside it.
func (b *bench) rowGate() error {
	o, err := sandbox.OptionsFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	// A folder the sandbox uid can reach ($TMPDIR may be private).
	dir, err := os.MkdirTemp("/tmp", "conductor-bench-gate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	// The bench's own warm cache, never the operator's.
	o.GoCache, o.GoCacheExplicit = filepath.Join(b.tmp, "go-warm"), true
	var warn strings.Builder
	o.Warn = &warn
	warm, err := sandbox.NewWithOptions(sandbox.BackendBwrap, o)
	if err != nil {
		b.rows = append(b.rows, row{name: "gate (warm Go cache)", goal: "≤ 1.5×", oursCell: "-", floorCell: "-", ratioCell: "-", note: "not measured here: " + err.Error()})
		return nil
	}
	hostMod := b.hostModCache()
	repos := []string{"demo", "gen50"}
	if b.sz.runs < 5 {
		repos = repos[:1] // short: proves the row runs
	}
	for _, name := range repos {
		if err := b.gateRepo(dir, name, o, warm, hostMod, &warn); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// hostModCache is the host's module cache (the conductor's), where the
// generated repository's dependencies come from.
func (b *bench) hostModCache() string {
	if v := os.Getenv("CONDUCTOR_BENCH_HOST_GOMODCACHE"); v != "" {
		return v
	}
	return b.realModCache
}

func (b *bench) gateRepo(dir, name string, o sandbox.Options, warm sandbox.Sandbox, hostMod string, warn *strings.Builder) error {
	src := filepath.Join(dir, name+"-src")
	pkgs, err := writeGateRepo(src, name)
	if err != nil {
		return err
	}
	hostEnv := b.goEnv(filepath.Join(dir, name+"-hostcache"), filepath.Join(dir, name+"-hostmod"), hostMod)
	// The module cache folder exists even for a repository without
	// dependencies (nothing fills it): the cold gate binds it read-only.
	if err := os.MkdirAll(filepath.Join(dir, name+"-hostmod"), 0o755); err != nil {
		return err
	}
	if len(pkgs) > 1 {
		// go.sum from the host's module cache (file proxy, no network).
		if out, err := goCmd(src, hostEnv, "mod", "tidy"); err != nil {
			return fmt.Errorf("go mod tidy: %v: %s", err, out)
		}
		// Every module go.mod names, as warming downloads them (tidy
		// fetches only what it reads): the warming's offline proxy is
		// this module cache.
		if out, err := goCmd(src, hostEnv, "mod", "download"); err != nil {
			return fmt.Errorf("go mod download: %v: %s", err, out)
		}
	}
	repo := filepath.Join(dir, name+".git")
	for _, args := range [][]string{{"init", "-q", "--bare", repo}} {
		if _, err := b.git(dir, args...); err != nil {
			return err
		}
	}
	g := patch.Git{GitDir: repo}
	commitTree := func(tree, msg, parent string) (string, error) {
		wt := []string{"--git-dir=" + repo, "--work-tree=" + tree}
		if _, err := b.git(dir, append(wt, "add", "-A")...); err != nil {
			return "", err
		}
		t, err := b.git(dir, append(wt, "write-tree")...)
		if err != nil {
			return "", err
		}
		args := []string{"--git-dir=" + repo, "commit-tree", t, "-m", msg}
		if parent != "" {
			args = append(args, "-p", parent)
		}
		return b.git(dir, args...)
	}
	readTree := func(tree, commit string) error {
		_, err := b.git(dir, "--git-dir="+repo, "--work-tree="+tree, "read-tree", "--reset", "-u", commit)
		return err
	}
	tip, err := commitTree(src, "tip", "")
	if err != nil {
		return err
	}
	// Warm the cache from the tip (untimed; its time is in the note).
	tipTree, rmTip, err := review.ExportTree(b.ctx, g, tip, dir)
	if err != nil {
		return err
	}
	// Warming sees the gate's own Go settings (os.Getenv, as the gate's
	// GateEnv does: the same cache keys) and the module cache the host
	// side filled.
	warmEnv := func(k string) string {
		if k == "GOMODCACHE" {
			return filepath.Join(dir, name+"-hostmod")
		}
		return os.Getenv(k)
	}
	wres, err := sandbox.WarmGo(b.ctx, sandbox.WarmOptions{Tree: tipTree, Getenv: warmEnv, Sandbox: o, Label: name})
	rmTip()
	if err != nil {
		return err
	}
	if len(wres.Warnings) > 0 {
		return fmt.Errorf("warming: %s", strings.Join(wres.Warnings, "; "))
	}
	// The host side: one checkout, its build cache warmed by one untimed
	// run on the tip.
	host := filepath.Join(dir, name+"-host")
	if err := os.MkdirAll(host, 0o755); err != nil {
		return err
	}
	checkout := func(commit string) error { return readTree(host, commit) }
	if err := checkout(tip); err != nil {
		return err
	}
	if out, err := goCmd(host, hostEnv, "test", "-count=1", "./..."); err != nil {
		return fmt.Errorf("host go test on the tip: %v: %s", err, out)
	}

	// Each run: a worker's change to one package (new content each time,
	// so both sides compile it), the gate, then the host run.
	change := func(i int) (string, error) {
		edit := filepath.Join(dir, name+"-edit")
		os.RemoveAll(edit)
		if err := os.MkdirAll(edit, 0o755); err != nil {
			return "", err
		}
		if err := readTree(edit, tip); err != nil {
			return "", err
		}
		f := filepath.Join(edit, pkgs[0], "change.go")
		body := fmt.Sprintf("package %s\n\n// Changed%d is run %d's change.\nfunc Changed%d() int { return %d }\n", filepath.Base(pkgs[0]), i, i, i, i)
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			return "", err
		}
		return commitTree(edit, fmt.Sprintf("change %d", i), tip)
	}
	gate := func(sb sandbox.Sandbox, commit string) (time.Duration, error) {
		t0 := time.Now()
		tree, remove, err := review.ExportTree(b.ctx, g, commit, dir)
		if err != nil {
			return 0, err
		}
		defer remove()
		root := filepath.Join(filepath.Dir(tree), "sandbox") // beside the tree, as review does
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Minute)
		defer cancel()
		res, err := sandbox.RunGate(ctx, sb, tree, root, []string{"go", "test", "./..."}, sandbox.GateEnv(os.Getenv, root), 30*time.Minute, 1<<20)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("gate exit %d: %s", res.ExitCode, sandbox.LastLines(string(res.Output), 5))
		}
		return time.Since(t0), err
	}
	r := row{name: fmt.Sprintf("gate on the %s repository (%s, %s): conductor review's gate, warm cache, vs `go test -count=1 ./...` on the host, warm build cache", label(name), count(len(pkgs), "package"), count(depsOf(name), "module dep")),
		goal: "≤ 1.5×", oursLabel: "gate", floorLabel: "host"}
	for i := 0; i < b.sz.runs; i++ {
		c, err := change(i + 1)
		if err != nil {
			return err
		}
		d, err := gate(warm, c)
		if err != nil {
			return fmt.Errorf("warm gate: %w", err)
		}
		if err := checkout(c); err != nil {
			return err
		}
		t0 := time.Now()
		if out, err := goCmd(host, hostEnv, "test", "-count=1", "./..."); err != nil {
			return fmt.Errorf("host go test: %v: %s", err, out)
		}
		r.ours, r.floor = append(r.ours, d), append(r.floor, time.Since(t0))
	}
	if warn.Len() > 0 {
		return fmt.Errorf("the warm cache was not used: %s", warn.String())
	}
	// The cold figure: the same gate without a warm cache, once (full
	// mode only: it recompiles the standard library, minutes here).
	cold := "not measured in short mode"
	if b.sz.runs >= 5 {
		co := o
		co.GoCache, co.GoCacheExplicit = "", false
		co.ReadOnly = append(co.ReadOnly, filepath.Join(dir, name+"-hostmod"))
		csb, err := sandbox.NewWithOptions(sandbox.BackendBwrap, co)
		if err != nil {
			return err
		}
		c, err := change(b.sz.runs + 1)
		if err != nil {
			return err
		}
		d, err := gateWith(b, csb, g, dir, c, filepath.Join(dir, name+"-hostmod"))
		if err != nil {
			return fmt.Errorf("cold gate: %w", err)
		}
		cold = fmtDur(d.Seconds())
	}
	r.note = fmt.Sprintf("cold gate (no warm cache: the standard library and every dependency compiled again) %s; warming the cache from the tip took %s (%d files, %.0f MB, not in the row: it runs after a landing, outside the gate)",
		cold, fmtDur(wres.Duration.Seconds()), wres.Files, float64(wres.Bytes)/1e6)
	b.rows = append(b.rows, r)
	return nil
}

// gateWith is the cold gate: the offline module cache bound read-only, as
// an operator without warm caches sets it up (CONDUCTOR_SANDBOX_RO_PATHS,
// GOMODCACHE).
func gateWith(b *bench, sb sandbox.Sandbox, g patch.Git, dir, commit, modcache string) (time.Duration, error) {
	t0 := time.Now()
	tree, remove, err := review.ExportTree(b.ctx, g, commit, dir)
	if err != nil {
		return 0, err
	}
	defer remove()
	root := filepath.Join(filepath.Dir(tree), "sandbox") // beside the tree, as review does
	getenv := func(k string) string {
		if k == "GOMODCACHE" {
			return modcache
		}
		return os.Getenv(k)
	}
	res, err := sandbox.RunGate(b.ctx, sb, tree, root, []string{"go", "test", "./..."}, sandbox.GateEnv(getenv, root), 60*time.Minute, 1<<20)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("gate exit %d: %s", res.ExitCode, sandbox.LastLines(string(res.Output), 5))
	}
	return time.Since(t0), err
}

func label(name string) string {
	if name == "demo" {
		return "demo-sized"
	}
	return "generated"
}

func depsOf(name string) int {
	if name == "demo" {
		return 0
	}
	return len(gateDeps)
}

// goEnv is the host go's environment: the bench's isolated one with its
// own build cache and a module cache filled from the host's (file proxy).
func (b *bench) goEnv(gocache, gomodcache, hostMod string) []string {
	env := append([]string{}, b.env...)
	proxy := "off"
	if dl := filepath.Join(hostMod, "cache", "download"); hostMod != "" {
		if _, err := os.Stat(dl); err == nil {
			proxy = "file://" + dl + ",off"
		}
	}
	return append(env, "GOCACHE="+gocache, "GOMODCACHE="+gomodcache, "GOPROXY="+proxy, "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
}

func goCmd(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	return sandbox.LastLines(string(out), 10), err
}

// writeGateRepo writes the demo repository with its fix (the change the
// demo's worker makes, so the gate passes), or the generated one: 50
// packages, each with a file and a test, importing a few of the standard
// library's packages, the one before it, and (every fifth) one of
// gateDeps. It returns the package folders.
func writeGateRepo(dir, name string) ([]string, error) {
	write := func(rel, body string) error {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, []byte(body), 0o644)
	}
	if name == "demo" {
		if err := write("go.mod", "module example.com/demo\n\ngo 1.22\n"); err != nil {
			return nil, err
		}
		if err := write("mathx/mathx.go", "// Package mathx holds small integer helpers.\npackage mathx\n\n// Clamp returns v limited to the range [lo, hi].\nfunc Clamp(v, lo, hi int) int {\n\tif v < lo {\n\t\treturn lo\n\t}\n\tif v > hi {\n\t\treturn hi\n\t}\n\treturn v\n}\n\n// Abs returns the absolute value of v.\nfunc Abs(v int) int {\n\tif v < 0 {\n\t\treturn -v\n\t}\n\treturn v\n}\n"); err != nil {
			return nil, err
		}
		if err := write("mathx/mathx_test.go", "package mathx\n\nimport \"testing\"\n\nfunc TestClamp(t *testing.T) {\n\tif Clamp(15, 0, 10) != 10 || Clamp(-3, 0, 10) != 0 || Clamp(5, 0, 10) != 5 {\n\t\tt.Fatal(\"Clamp\")\n\t}\n}\n\nfunc TestAbs(t *testing.T) {\n\tif Abs(-2) != 2 {\n\t\tt.Fatal(\"Abs\")\n\t}\n}\n"); err != nil {
			return nil, err
		}
		return []string{"mathx"}, nil
	}
	var req strings.Builder
	for _, d := range gateDeps {
		fmt.Fprintf(&req, "\t%s %s\n", d.path, d.version)
	}
	if err := write("go.mod", "module example.com/gen\n\ngo 1.22\n\nrequire (\n"+req.String()+")\n"); err != nil {
		return nil, err
	}
	std := []string{"fmt", "strings", "sort", "encoding/json", "bytes", "strconv", "errors", "time"}
	var pkgs []string
	for i := 0; i < 50; i++ {
		p := fmt.Sprintf("pkg%02d", i)
		imports := []string{`"` + std[i%len(std)] + `"`, `"` + std[(i+3)%len(std)] + `"`}
		uses := []string{useOf(std[i%len(std)]), useOf(std[(i+3)%len(std)])}
		if i > 0 {
			imports = append(imports, fmt.Sprintf(`"example.com/gen/pkg%02d"`, i-1))
			uses = append(uses, fmt.Sprintf("var _ = pkg%02d.F%d", i-1, i-1))
		}
		if i%5 == 0 {
			d := gateDeps[(i/5)%len(gateDeps)]
			imports = append(imports, `"`+d.pkg+`"`)
			uses = append(uses, d.use)
		}
		body := fmt.Sprintf("package %s\n\nimport (\n\t%s\n)\n\n%s\n\n// F%d is package %d's function.\nfunc F%d(n int) int { return n + %d }\n", p, strings.Join(imports, "\n\t"), strings.Join(uses, "\n"), i, i, i, i)
		if err := write(p+"/"+p+".go", body); err != nil {
			return nil, err
		}
		test := fmt.Sprintf("package %s\n\nimport \"testing\"\n\nfunc TestF%d(t *testing.T) {\n\tif F%d(1) != %d {\n\t\tt.Fatal(\"F%d\")\n\t}\n}\n", p, i, i, i+1, i)
		if err := write(p+"/"+p+"_test.go", test); err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// useOf is a declaration that uses one of writeGateRepo's standard
// packages.
func useOf(pkg string) string {
	switch pkg {
	case "fmt":
		return "var _ = fmt.Sprint"
	case "strings":
		return "var _ = strings.TrimSpace"
	case "sort":
		return "var _ = sort.Strings"
	case "encoding/json":
		return "var _ = json.Marshal"
	case "bytes":
		return "var _ = bytes.TrimSpace"
	case "strconv":
		return "var _ = strconv.Itoa"
	case "errors":
		return "var _ = errors.New"
	case "time":
		return "var _ = time.Now"
	}
	return ""
}
