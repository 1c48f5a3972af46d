package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
)

// PolicyFile is the name of the landing-rules file in a roles folder.
const PolicyFile = "conductor-policy.json"

// Problem is one thing wrong with a contract: the file, the field path inside
// it (e.g. "commands[2][0]") and what is wrong.
type Problem struct {
	File    string `json:"file"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	if p.Field == "" {
		return p.File + ": " + p.Message
	}
	return p.File + ": " + p.Field + ": " + p.Message
}

// ValidationError lists every problem found in a set of contracts.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	if len(e.Problems) == 1 {
		return "invalid role contracts: " + e.Problems[0].String()
	}
	s := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		s[i] = p.String()
	}
	return fmt.Sprintf("invalid role contracts (%d problems):\n  %s", len(e.Problems), strings.Join(s, "\n  "))
}

// Policy is the effective set of contracts: the defaults with a repository's
// roles/ folder merged over them.
type Policy struct {
	roles   map[string]*Role
	landing *Landing
}

// Role returns a role's effective contract.
func (p *Policy) Role(name string) (*Role, error) {
	if r, ok := p.roles[name]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("unknown role %q (known roles: %s)", name, strings.Join(p.RoleNames(), ", "))
}

// RoleNames lists the known roles, sorted.
func (p *Policy) RoleNames() []string {
	names := make([]string, 0, len(p.roles))
	for n := range p.roles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Landing returns the landing rules and review's mechanical checks.
func (p *Policy) Landing() *Landing { return p.landing }

// Load reads the default contracts from defaults (roles.FS) and merges the
// contracts of a repository's roles folder over them (repoRolesDir "" means
// none). Every *.json file except *.schema.json is a contract:
// conductor-policy.json holds the landing rules, <role>.json one role.
//
// Merge rules: a repository file for a role or for conductor-policy.json is
// merged over the default file of the same name key by key: JSON objects
// merge recursively, every other value (string, number, boolean, array)
// replaces the default's value wholly — so a repository narrows a list by
// restating it. A repository file with no default counterpart adds a role.
// Each file is first checked on its own (syntax, unknown fields, types), then
// the merged contract is validated as a whole. Every problem is reported in
// one *ValidationError.
func Load(defaults fs.FS, repoRolesDir string) (*Policy, error) {
	var repo fs.FS
	label := ""
	if repoRolesDir != "" {
		fi, err := os.Stat(repoRolesDir)
		if err != nil {
			return nil, fmt.Errorf("load roles from %s: %w", repoRolesDir, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("load roles from %s: not a folder", repoRolesDir)
		}
		repo, label = os.DirFS(repoRolesDir), repoRolesDir
	}
	return LoadFS(defaults, repo, label)
}

// LoadFS is Load over two file systems; repoLabel names repo's files in
// messages (e.g. "myrepo/roles"). repo is the operator's (a --roles DIR):
// it may set anything a contract may say.
func LoadFS(defaults, repo fs.FS, repoLabel string) (*Policy, error) {
	return loadFS(defaults, repo, repoLabel, false)
}

// LoadRepo is Load for a roles folder the repository holds (its work tree):
// see LoadRepoFS.
func LoadRepo(defaults fs.FS, repoRolesDir string) (*Policy, error) {
	if repoRolesDir == "" {
		return LoadFS(defaults, nil, "")
	}
	fi, err := os.Stat(repoRolesDir)
	if err != nil {
		return nil, fmt.Errorf("load roles from %s: %w", repoRolesDir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("load roles from %s: not a folder", repoRolesDir)
	}
	return loadFS(defaults, os.DirFS(repoRolesDir), repoRolesDir, true)
}

// LoadRepoFS is LoadFS for contracts a repository holds (its work tree, or
// a commit's roles/ folder), which a worker's change could have written: a
// role file there may not set "sandbox": "none". Running a role unsandboxed
// is the operator's choice alone (--sandbox none, WORKER_SANDBOX=none, or a
// --roles DIR of the operator's); a repository may only ask for more
// isolation (bwrap) or the default (auto).
func LoadRepoFS(defaults, repo fs.FS, repoLabel string) (*Policy, error) {
	return loadFS(defaults, repo, repoLabel, true)
}

func loadFS(defaults, repo fs.FS, repoLabel string, fromRepo bool) (*Policy, error) {
	key, keyed := contentKey(defaults, repo, repoLabel, fromRepo)
	if keyed {
		if p := loaded.get(key); p != nil {
			return p, nil
		}
	}
	p, err := parseFS(defaults, repo, repoLabel, fromRepo)
	if err == nil && keyed {
		loaded.put(key, p)
	}
	return p, err
}

// loaded keeps the policies parsed from exactly the same files: a queue
// worker loads its role for every job, and parsing and validating the
// contracts was a twentieth of a job's CPU. A Policy is never changed
// after it is made (every accessor returns copies), so one serves all.
var loaded = &policyCache{}

type policyCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]*Policy
}

// maxCachedPolicies bounds the cache (a worker sees a few rule sets).
const maxCachedPolicies = 32

func (c *policyCache) get(k [sha256.Size]byte) *Policy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *policyCache) put(k [sha256.Size]byte, p *Policy) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedPolicies {
		c.m = map[[sha256.Size]byte]*Policy{}
	}
	c.m[k] = p
}

// contentKey hashes everything parseFS reads: the label, whether the
// folder is the repository's, and each file's name and bytes. ok is false
// when a folder cannot be listed or a file read (parseFS then reports it).
func contentKey(defaults, repo fs.FS, repoLabel string, fromRepo bool) (k [sha256.Size]byte, ok bool) {
	h := sha256.New()
	fmt.Fprintf(h, "%q %v\n", repoLabel, fromRepo)
	for _, fsys := range []fs.FS{defaults, repo} {
		if fsys == nil {
			h.Write([]byte("none\n"))
			continue
		}
		entries, err := fs.ReadDir(fsys, ".")
		if err != nil {
			return k, false
		}
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			data, err := fs.ReadFile(fsys, e.Name())
			if err != nil {
				return k, false
			}
			fmt.Fprintf(h, "%q %d\n", e.Name(), len(data))
			h.Write(data)
		}
		h.Write([]byte("end\n"))
	}
	h.Sum(k[:0])
	return k, true
}

func parseFS(defaults, repo fs.FS, repoLabel string, fromRepo bool) (*Policy, error) {
	l := &loader{}
	defFiles := l.readDir(defaults, "default")
	var repoFiles map[string]rawFile
	if repo != nil {
		repoFiles = l.readDir(repo, repoLabel)
		if fromRepo {
			l.repoSandbox(repoFiles)
		}
	}
	names := map[string]bool{}
	for n := range defFiles {
		names[n] = true
	}
	for n := range repoFiles {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)

	p := &Policy{roles: map[string]*Role{}}
	for _, name := range sorted {
		def, hasDef := defFiles[name]
		rep, hasRepo := repoFiles[name]
		var parts []rawFile
		if hasDef {
			parts = append(parts, def)
		}
		if hasRepo {
			parts = append(parts, rep)
		}
		if name == PolicyFile {
			var c PolicyContract
			if src, ok := l.merge(parts, &c); ok {
				l.validatePolicy(&c, src)
				p.landing = &Landing{r: c.Landing, rv: c.Review, source: src.label()}
			}
			continue
		}
		var c RoleContract
		if src, ok := l.merge(parts, &c); ok {
			l.validateRole(&c, strings.TrimSuffix(name, ".json"), src)
			p.roles[c.Role] = &Role{c: c, source: src.label(), src: src}
		}
	}
	if p.landing == nil && !l.sawPolicyProblem {
		l.add(Problem{File: "roles", Message: "no " + PolicyFile + " (the landing rules) found"})
	}
	for _, r := range p.roles {
		r.landing = p.landing
	}
	l.crossCheck(p)
	if len(l.problems) > 0 {
		// Grouped by file, in the order found within a file.
		sort.SliceStable(l.problems, func(i, j int) bool { return l.problems[i].File < l.problems[j].File })
		return nil, &ValidationError{Problems: l.problems}
	}
	return p, nil
}

// repoSandbox reports, as a problem (the load fails), every repository role
// file that sets the sandbox to none.
func (l *loader) repoSandbox(files map[string]rawFile) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := files[n]
		if n == PolicyFile || f.obj == nil {
			continue
		}
		if s, ok := f.obj["sandbox"].(string); ok && s == SandboxNone {
			l.add(Problem{File: f.path, Field: "sandbox",
				Message: `a repository's role may not set "sandbox": "none" (only the operator may run a role unsandboxed: --sandbox none, WORKER_SANDBOX=none, or a --roles DIR of the operator's)`})
		}
	}
}

type rawFile struct {
	path string // for messages: "<label>/<name>"
	data []byte
	obj  map[string]any
}

type loader struct {
	problems         []Problem
	sawPolicyProblem bool
}

func (l *loader) add(p Problem) {
	if strings.HasSuffix(p.File, PolicyFile) {
		l.sawPolicyProblem = true
	}
	l.problems = append(l.problems, p)
}

// readDir reads the contract files at the top of fsys.
func (l *loader) readDir(fsys fs.FS, label string) map[string]rawFile {
	out := map[string]rawFile{}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		l.add(Problem{File: label, Message: err.Error()})
		return out
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".json") || strings.HasSuffix(name, ".schema.json") {
			continue
		}
		file := path.Join(label, name)
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			l.add(Problem{File: file, Message: err.Error()})
			continue
		}
		rf := rawFile{path: file, data: data}
		var target any = &RoleContract{}
		if name == PolicyFile {
			target = &PolicyContract{}
		}
		obj, probs := strictDecode(file, data, target)
		for _, p := range probs {
			l.add(p)
		}
		if obj == nil {
			continue
		}
		if len(probs) == 0 {
			rf.obj = obj // a broken file is reported and not merged
		}
		out[name] = rf
	}
	return out
}

// sources records which file set each field path of a merged contract.
type sources struct {
	files  []string
	origin map[string]string
}

func (s sources) label() string {
	if len(s.files) == 1 {
		return s.files[0]
	}
	return strings.Join(s.files, " over ")
}

// fileFor returns the file that set field (or its closest parent).
func (s sources) fileFor(field string) string {
	for f := field; ; {
		if o, ok := s.origin[f]; ok {
			return o
		}
		i := strings.LastIndexAny(f, ".[")
		if i <= 0 {
			break
		}
		f = f[:i]
	}
	return s.files[len(s.files)-1]
}

// merge merges parts (default first) and decodes the result into target.
// ok is false when a part was broken (already reported).
func (l *loader) merge(parts []rawFile, target any) (sources, bool) {
	src := sources{origin: map[string]string{}}
	merged := map[string]any{}
	for _, p := range parts {
		src.files = append(src.files, p.path)
		if p.obj == nil {
			return src, false
		}
		mergeInto(merged, p.obj, "", p.path, src.origin)
	}
	b, err := json.Marshal(merged)
	if err == nil {
		err = json.Unmarshal(b, target)
	}
	if err != nil { // cannot happen after strictDecode; report rather than panic
		l.add(Problem{File: src.label(), Message: "merge: " + err.Error()})
		return src, false
	}
	return src, true
}

func mergeInto(dst, src map[string]any, prefix, file string, origin map[string]string) {
	for k, v := range src {
		field := k
		if prefix != "" {
			field = prefix + "." + k
		}
		if sm, ok := v.(map[string]any); ok {
			dm, ok := dst[k].(map[string]any)
			if !ok {
				dm = map[string]any{}
				dst[k] = dm
			}
			origin[field] = file
			mergeInto(dm, sm, field, file, origin)
			continue
		}
		dst[k] = v
		origin[field] = file
	}
}

// strictDecode parses data as one JSON object and checks it against the Go
// type of target: unknown fields, wrong types and nulls are problems, each
// with its field path. It returns the parsed object (nil on a syntax error).
func strictDecode(file string, data []byte, target any) (map[string]any, []Problem) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, []Problem{{File: file, Message: syntaxMessage(data, err)}}
	}
	if _, err := dec.Token(); err == nil {
		return nil, []Problem{{File: file, Message: "trailing data after the JSON object"}}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, []Problem{{File: file, Message: "want a JSON object at the top level, got " + jsonKind(v)}}
	}
	var probs []Problem
	walkType(file, "", v, typeOf(target), &probs)
	return obj, probs
}

func syntaxMessage(data []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		// Offset counts the bytes read, the offending one included.
		line, col := lineCol(data, max(se.Offset-1, 0))
		return fmt.Sprintf("line %d, column %d: invalid JSON: %v", line, col, se)
	}
	if errors.Is(err, io.EOF) {
		return "empty file: want a JSON object"
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		line, col := lineCol(data, int64(len(data)))
		return fmt.Sprintf("line %d, column %d: invalid JSON: unexpected end of file (an object or array is not closed)", line, col)
	}
	return "invalid JSON: " + err.Error()
}

func lineCol(data []byte, off int64) (int, int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	line, col := 1, 1
	for _, b := range data[:off] {
		if b == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// knownFields lists a contract type's JSON field names (for messages).
func knownFields(fields map[string]fieldInfo) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
