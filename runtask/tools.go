package runtask

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/policy"
)

// Bounds of the file tools.
const (
	grepDefaultResults = 200
	grepMaxResults     = 1000
	grepMaxFileSize    = 4 << 20
	grepMaxLineLen     = 300
	listDirMaxEntries  = 2000
	readMaxFileSize    = 16 << 20
	maxSymlinkHops     = 40
)

// toolbox executes the worker's tools inside one worktree.
type toolbox struct {
	root    *os.Root
	dir     string     // the worktree
	git     patch.Git  // the worktree's own git dir and the worktree
	role    RolePolicy // never nil
	allowed map[string]bool
	sb      sandbox.Sandbox
	env     []string // complete command environment (allowlisted)
	scratch string   // HOME and TMPDIR live here; bound read-write by the sandbox
	lim     limits
	// readOnly are the base tree's submodule folders, read-only to
	// commands (sandbox.Spec.ReadOnlyDirs).
	readOnly []string
	warn     io.Writer // the run's stderr (kept in stderr.txt): the sandbox's warnings
	// groupSync leaves the fsync of written files to the step's group
	// commit (takeUnsynced): the file tools hand their still-open files
	// over instead of syncing them before they answer.
	groupSync bool
	unsynced  []*os.File
}

// takeUnsynced returns the files written since the last call, still open
// and not yet fsynced; the caller syncs and closes them.
func (tb *toolbox) takeUnsynced() []*os.File {
	f := tb.unsynced
	tb.unsynced = nil
	return f
}

// syncFile makes a file durable (a variable: tests watch it).
var syncFile = (*os.File).Sync

// syncFiles fsyncs and closes files and returns the first error.
func syncFiles(files []*os.File) error {
	var first error
	for _, f := range files {
		err := syncFile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil && first == nil {
			first = fmt.Errorf("fsync %s: %w", filepath.Base(f.Name()), err)
		}
	}
	return first
}

// write replaces a worktree file (writeRegular); with groupSync its fsync
// waits for the step's group commit.
func (tb *toolbox) write(p string, data []byte) error {
	if !tb.groupSync {
		return writeRegular(tb.root, p, data, nil)
	}
	return writeRegular(tb.root, p, data, func(f *os.File) { tb.unsynced = append(tb.unsynced, f) })
}

// toolResult is one executed call.
type toolResult struct {
	Content string // what the model sees (capped, never empty)
	IsError bool
	Full    []byte // the complete output when Content had to be capped
	Touched []string
	// Limit names the sandbox limit that stopped a command ("process
	// limit", "memory limit"): the run ends failed, "limit: ..." (a fork
	// or memory bomb is contained, not retried).
	Limit string
}

func errResult(format string, args ...any) toolResult {
	return toolResult{Content: "error: " + fmt.Sprintf(format, args...), IsError: true}
}

// toolDefs returns the tool definitions sent to the model for the allowed set.
func toolDefs(allowed []string) []openai.Tool {
	defs := map[string]openai.FunctionDefinition{
		ToolReadFile: {Name: ToolReadFile, Description: "Read a text file of the repository, optionally a range of lines (1-based, inclusive).",
			Parameters: schema(map[string]any{"path": str("path relative to the repository root"), "start_line": integer("first line (1-based)"), "end_line": integer("last line (inclusive)")}, "path")},
		ToolWriteFile: {Name: ToolWriteFile, Description: "Create or overwrite a file with the given content. Parent folders are created.",
			Parameters: schema(map[string]any{"path": str("path relative to the repository root"), "content": str("the complete new content")}, "path", "content")},
		ToolEditFile: {Name: ToolEditFile, Description: "Replace exactly one occurrence of old_string with new_string in a file. old_string must match exactly once.",
			Parameters: schema(map[string]any{"path": str("path relative to the repository root"), "old_string": str("exact text to replace (unique in the file)"), "new_string": str("replacement text")}, "path", "old_string", "new_string")},
		ToolGrep: {Name: ToolGrep, Description: "Search files (respecting .gitignore) for a regular expression (RE2 syntax). Returns path:line:text.",
			Parameters: schema(map[string]any{"pattern": str("regular expression"), "path": str("folder or file to search (default: everything)"), "ignore_case": map[string]any{"type": "boolean"}, "max_results": integer("at most this many matches (default 200)")}, "pattern")},
		ToolListDir: {Name: ToolListDir, Description: "List a folder of the repository (folders end with /).",
			Parameters: schema(map[string]any{"path": str("folder relative to the repository root (default: the root)")})},
		ToolRunCommand: {Name: ToolRunCommand, Description: "Run an allowlisted command in the repository root. argv is an exact argument vector; no shell.",
			Parameters: schema(map[string]any{"argv": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": "program and arguments, e.g. [\"go\",\"test\",\"./...\"]"}}, "argv")},
	}
	var out []openai.Tool
	for _, name := range allowed {
		def := defs[name]
		out = append(out, openai.Tool{Type: openai.ToolTypeFunction, Function: &def})
	}
	return out
}

func schema(props map[string]any, required ...string) map[string]any {
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}
func str(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
func integer(desc string) map[string]any {
	return map[string]any{"type": "integer", "description": desc}
}

// call executes one tool call. Every failure is a result the model sees.
func (tb *toolbox) call(ctx context.Context, name, args string) toolResult {
	if !tb.allowed[name] {
		known := false
		for _, c := range CanonicalTools {
			known = known || c == name
		}
		if !known {
			return errResult("unknown tool %q", name)
		}
		return errResult("tool %q is not allowed for this task and role", name)
	}
	var r toolResult
	switch name {
	case ToolReadFile:
		r = tb.readFile(args)
	case ToolWriteFile:
		r = tb.writeFile(args)
	case ToolEditFile:
		r = tb.editFile(args)
	case ToolGrep:
		r = tb.grep(ctx, args)
	case ToolListDir:
		r = tb.listDir(args)
	case ToolRunCommand:
		r = tb.runCommand(ctx, args)
	}
	if r.Content == "" {
		r.Content = "(no output)"
	}
	if len(r.Content) > tb.lim.OutputLimit {
		full := []byte(r.Content)
		if r.Full == nil {
			r.Full = full
		}
		r.Content = capOutput(full, tb.lim.OutputLimit)
	}
	return r
}

// decodeArgs decodes tool arguments strictly.
func decodeArgs(tool, args string, dst any) error {
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	dec := json.NewDecoder(strings.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("invalid arguments for %s: %v", tool, err)
	}
	return nil
}

// capOutput keeps the head and the tail of b within limit bytes.
func capOutput(b []byte, limit int) string {
	if len(b) <= limit {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	half := limit / 2
	head, tail := b[:half], b[len(b)-half:]
	for len(head) > 0 && !utf8.Valid(head[len(head)-min(len(head), 3):]) && !utf8.RuneStart(head[len(head)-1]) {
		head = head[:len(head)-1]
	}
	omitted := len(b) - len(head) - len(tail)
	return strings.ToValidUTF8(string(head), "\uFFFD") +
		fmt.Sprintf("\n[... %d bytes omitted: output capped at %d bytes; the full output is kept in the run folder ...]\n", omitted, limit) +
		strings.ToValidUTF8(string(tail), "\uFFFD")
}

// errConfined is returned for paths outside what the tools may touch.
var errConfined = errors.New("path not allowed")

// cleanPath checks a model-supplied path: relative, no "..", no component
// named .git (any case), no symlink leading out of the worktree or into .git.
// It returns the cleaned slash path ("." for the root when allowRoot).
func (tb *toolbox) cleanPath(p string, allowRoot bool) (string, error) {
	p = strings.TrimSpace(p)
	if p == "" || p == "." || p == "./" {
		if allowRoot {
			return ".", nil
		}
		return "", fmt.Errorf("%w: a file path is required", errConfined)
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: path contains a NUL byte", errConfined)
	}
	if strings.HasPrefix(p, "/") || filepath.IsAbs(p) || strings.HasPrefix(p, "~") {
		return "", fmt.Errorf("%w: %q is absolute; use a path relative to the repository root", errConfined, p)
	}
	if err := checkComponents(p); err != nil {
		return "", err
	}
	clean := path.Clean(p)
	if clean == "." && !allowRoot {
		return "", fmt.Errorf("%w: a file path is required", errConfined)
	}
	if err := tb.checkSymlinks(clean); err != nil {
		return "", err
	}
	return clean, nil
}

func checkComponents(p string) error {
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "..":
			return fmt.Errorf("%w: %q uses '..'; paths must stay inside the repository", errConfined, p)
		case strings.EqualFold(strings.TrimRight(c, ". "), ".git") || strings.EqualFold(c, ".git"):
			return fmt.Errorf("%w: %q: .git is not accessible to tools", errConfined, p)
		}
	}
	return nil
}

// checkSymlinks follows symlinks along p lexically and refuses any that
// leave the worktree or lead into .git. os.Root enforces the escape rule
// again at open time; this check also protects .git, which is inside.
func (tb *toolbox) checkSymlinks(p string) error {
	parts := strings.Split(p, "/")
	hops := 0
	for i := 0; i < len(parts); i++ {
		prefix := strings.Join(parts[:i+1], "/")
		fi, err := tb.root.Lstat(prefix)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // the rest does not exist yet (a new file)
			}
			return fmt.Errorf("%w: %q: %v", errConfined, p, stripRootErr(err))
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		if hops++; hops > maxSymlinkHops {
			return fmt.Errorf("%w: %q: too many symlinks", errConfined, p)
		}
		target, err := tb.root.Readlink(prefix)
		if err != nil {
			return fmt.Errorf("%w: %q: %v", errConfined, p, stripRootErr(err))
		}
		if path.IsAbs(target) {
			return fmt.Errorf("%w: %q: symlink %s points outside the repository", errConfined, p, prefix)
		}
		resolved := path.Join(path.Dir(prefix), target)
		if resolved == ".." || strings.HasPrefix(resolved, "../") {
			return fmt.Errorf("%w: %q: symlink %s points outside the repository", errConfined, p, prefix)
		}
		if err := checkComponents(resolved); err != nil {
			return fmt.Errorf("%w: %q: symlink %s leads into .git", errConfined, p, prefix)
		}
		rest := append(strings.Split(resolved, "/"), parts[i+1:]...)
		if resolved == "." {
			rest = parts[i+1:]
		}
		parts, i = rest, -1
	}
	return nil
}

// stripRootErr removes the host path from an os.Root error: the model sees
// only repository-relative names.
func stripRootErr(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// hardLinked refuses a regular file with more than one link: a hard link
// planted in the worktree could name a file outside it, and the tools run
// with the conductor's rights, not the sandbox's.
func hardLinked(fi fs.FileInfo) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
		return fmt.Errorf("%w: the file has %d hard links (a hard link may reach outside the repository)", errConfined, st.Nlink)
	}
	return nil
}

// errNotRegular refuses named pipes, sockets and devices: opening one could
// hang the conductor or read something that is not a file.
var errNotRegular = errors.New("not a regular file (a named pipe, socket or device)")

// openRegular opens p without blocking (O_NONBLOCK: a named pipe planted by
// a command cannot hang the conductor) and checks, on the open file, that it
// is a regular file with a single link and at most max bytes.
func openRegular(root *os.Root, p string, flag int, max int64) (*os.File, fs.FileInfo, error) {
	if fi, err := root.Stat(p); err == nil && !fi.IsDir() && !fi.Mode().IsRegular() {
		return nil, nil, errNotRegular // clearer than what the open would say
	}
	f, err := root.OpenFile(p, flag|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0o644)
	if err != nil {
		return nil, nil, errors.New(stripRootErr(err))
	}
	fi, err := f.Stat()
	if err == nil && fi.IsDir() {
		err = errors.New("is a folder")
	}
	if err == nil && !fi.Mode().IsRegular() {
		err = errNotRegular
	}
	if err == nil {
		err = hardLinked(fi)
	}
	if err == nil && max > 0 && fi.Size() > max {
		err = fmt.Errorf("%d bytes is too large", fi.Size())
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// readRegular reads a regular file of the worktree (see openRegular).
func readRegular(root *os.Root, p string, max int64) ([]byte, fs.FileInfo, error) {
	f, fi, err := openRegular(root, p, os.O_RDONLY, max)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	return b, fi, err
}

// writeRegular replaces the content of a regular file, creating it when
// absent (mode 0644); an existing file keeps its mode. The write is atomic:
// a temp file beside it is written, fsynced and renamed over it, so a
// conductor killed mid-write leaves the old content or the new, never half
// (a kill between create and rename can leave the temp file, named
// .NAME.conductor-tmp-*, in the worktree). With keep, the file is renamed
// before its fsync and handed to keep still open: the caller makes it
// durable before anything that records the write is (a power cut can
// lose the new content only with its record).
func writeRegular(root *os.Root, p string, data []byte, keep func(*os.File)) error {
	mode := os.FileMode(0o644)
	if _, err := root.Lstat(p); err == nil {
		f, fi, err := openRegular(root, p, os.O_RDONLY, 0)
		if err != nil {
			return err
		}
		f.Close()
		mode = fi.Mode().Perm()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return errors.New(stripRootErr(err))
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := path.Join(path.Dir(p), "."+path.Base(p)+writeTempMark+hex.EncodeToString(rnd[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return errors.New(stripRootErr(err))
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil && keep == nil { // synced and closed before the rename
		err = syncFile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		f = nil
	}
	if err == nil {
		err = root.Rename(tmp, p)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		root.Remove(tmp)
		return errors.New(stripRootErr(err))
	}
	if keep != nil {
		keep(f)
	}
	return nil
}

// writeTempMark names the temp files of writeRegular.
const writeTempMark = ".conductor-tmp-"

// sweepWriteTemps removes the temp files interrupted writes left in the
// worktree (never under .git) and says how many.
func sweepWriteTemps(root *os.Root) int {
	n := 0
	fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil
		case d.IsDir() && strings.EqualFold(d.Name(), ".git"):
			return fs.SkipDir
		case d.Type().IsRegular() && strings.HasPrefix(d.Name(), ".") && strings.Contains(d.Name(), writeTempMark):
			if root.Remove(p) == nil {
				n++
			}
		}
		return nil
	})
	return n
}

func isBinary(b []byte) bool {
	return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0
}

func (tb *toolbox) readFile(args string) toolResult {
	var a struct {
		Path      string `json:"path"`
		StartLine int    `json:"start_line"`
		EndLine   int    `json:"end_line"`
	}
	if err := decodeArgs(ToolReadFile, args, &a); err != nil {
		return errResult("%v", err)
	}
	p, err := tb.cleanPath(a.Path, false)
	if err != nil {
		return errResult("%v", err)
	}
	b, _, err := readRegular(tb.root, p, readMaxFileSize)
	if err != nil {
		if strings.HasPrefix(err.Error(), "is a folder") {
			return errResult("read %s: is a folder; use list_dir", p)
		}
		return errResult("read %s: %v", p, err)
	}
	if isBinary(b) {
		return errResult("read %s: binary file (%d bytes)", p, len(b))
	}
	if a.StartLine == 0 && a.EndLine == 0 {
		if len(b) == 0 {
			return toolResult{Content: "(empty file)"}
		}
		return toolResult{Content: string(b)}
	}
	if a.StartLine < 0 || a.EndLine < 0 || (a.EndLine > 0 && a.EndLine < a.StartLine) {
		return errResult("read %s: invalid line range %d-%d", p, a.StartLine, a.EndLine)
	}
	lines := strings.SplitAfter(string(b), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	start := max(a.StartLine, 1)
	end := a.EndLine
	if end == 0 || end > len(lines) {
		end = len(lines)
	}
	if start > len(lines) {
		return errResult("read %s: start_line %d is past the end (%d lines)", p, start, len(lines))
	}
	return toolResult{Content: strings.Join(lines[start-1:end], "")}
}

func (tb *toolbox) writeFile(args string) toolResult {
	var a struct {
		Path    string  `json:"path"`
		Content *string `json:"content"`
	}
	if err := decodeArgs(ToolWriteFile, args, &a); err != nil {
		return errResult("%v", err)
	}
	if a.Content == nil {
		return errResult("invalid arguments for write_file: content is required")
	}
	p, err := tb.cleanPath(a.Path, false)
	if err != nil {
		return errResult("%v", err)
	}
	if err := tb.role.CheckWrite(p); err != nil {
		return errResult("write %s: %s", p, refusalText(err))
	}
	if dir := path.Dir(p); dir != "." {
		if err := tb.root.MkdirAll(dir, 0o755); err != nil {
			return errResult("write %s: %s", p, stripRootErr(err))
		}
	}
	if err := tb.write(p, []byte(*a.Content)); err != nil {
		return errResult("write %s: %v", p, err)
	}
	return toolResult{Content: fmt.Sprintf("wrote %s (%d bytes)", p, len(*a.Content)), Touched: []string{p}}
}

func (tb *toolbox) editFile(args string) toolResult {
	var a struct {
		Path      string  `json:"path"`
		OldString *string `json:"old_string"`
		NewString *string `json:"new_string"`
	}
	if err := decodeArgs(ToolEditFile, args, &a); err != nil {
		return errResult("%v", err)
	}
	if a.OldString == nil || a.NewString == nil {
		return errResult("invalid arguments for edit_file: old_string and new_string are required")
	}
	if *a.OldString == "" {
		return errResult("edit: old_string must not be empty (use write_file to create a file)")
	}
	p, err := tb.cleanPath(a.Path, false)
	if err != nil {
		return errResult("%v", err)
	}
	if err := tb.role.CheckWrite(p); err != nil {
		return errResult("edit %s: %s", p, refusalText(err))
	}
	b, _, err := readRegular(tb.root, p, readMaxFileSize)
	if err != nil {
		return errResult("edit %s: %v", p, err)
	}
	switch n := strings.Count(string(b), *a.OldString); n {
	case 0:
		return errResult("edit %s: old_string not found; read the file and copy the text exactly", p)
	case 1:
	default:
		return errResult("edit %s: old_string matches %d places; include more surrounding text so it matches exactly once", p, n)
	}
	out := strings.Replace(string(b), *a.OldString, *a.NewString, 1)
	if err := tb.write(p, []byte(out)); err != nil {
		return errResult("edit %s: %v", p, err)
	}
	return toolResult{Content: fmt.Sprintf("edited %s", p), Touched: []string{p}}
}

func (tb *toolbox) grep(ctx context.Context, args string) toolResult {
	var a struct {
		Pattern    string `json:"pattern"`
		Path       string `json:"path"`
		IgnoreCase bool   `json:"ignore_case"`
		MaxResults int    `json:"max_results"`
	}
	if err := decodeArgs(ToolGrep, args, &a); err != nil {
		return errResult("%v", err)
	}
	if a.Pattern == "" {
		return errResult("grep: pattern is required")
	}
	expr := a.Pattern
	if a.IgnoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return errResult("grep: invalid pattern: %v", err)
	}
	p, err := tb.cleanPath(a.Path, true)
	if err != nil {
		return errResult("%v", err)
	}
	limit := a.MaxResults
	if limit <= 0 {
		limit = grepDefaultResults
	}
	limit = min(limit, grepMaxResults)
	lsArgs := []string{"ls-files", "-z", "--cached", "--others", "--exclude-standard", "--deduplicate"}
	if p != "." {
		lsArgs = append(lsArgs, "--", ":(literal)"+p)
	}
	out, err := tb.git.Run(ctx, lsArgs...)
	if err != nil {
		return errResult("grep: listing files failed")
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	var b strings.Builder
	n := 0
	for _, f := range files {
		if checkComponents(f) != nil {
			continue
		}
		fi, err := tb.root.Lstat(f)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() > grepMaxFileSize || hardLinked(fi) != nil {
			continue // deleted, a symlink, a submodule or too large
		}
		data, _, err := readRegular(tb.root, f, grepMaxFileSize)
		if err != nil || isBinary(data) {
			continue
		}
		for i, line := range strings.Split(string(data), "\n") {
			if !re.MatchString(line) {
				continue
			}
			if n == limit {
				fmt.Fprintf(&b, "[stopped at %d matches; narrow the pattern or the path]\n", limit)
				return toolResult{Content: b.String()}
			}
			if len(line) > grepMaxLineLen {
				line = strings.ToValidUTF8(line[:grepMaxLineLen], "") + "…"
			}
			fmt.Fprintf(&b, "%s:%d:%s\n", f, i+1, line)
			n++
		}
	}
	if n == 0 {
		return toolResult{Content: "no matches"}
	}
	return toolResult{Content: b.String()}
}

func (tb *toolbox) listDir(args string) toolResult {
	var a struct {
		Path string `json:"path"`
	}
	if err := decodeArgs(ToolListDir, args, &a); err != nil {
		return errResult("%v", err)
	}
	p, err := tb.cleanPath(a.Path, true)
	if err != nil {
		return errResult("%v", err)
	}
	f, err := tb.root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_DIRECTORY, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return errResult("list %s: not a folder", p)
		}
		return errResult("list %s: %s", p, stripRootErr(err))
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return errResult("list %s: not a folder", p)
	}
	var names []string
	for _, e := range entries {
		if strings.EqualFold(e.Name(), ".git") {
			continue
		}
		name := e.Name()
		switch {
		case e.IsDir():
			name += "/"
		case e.Type()&fs.ModeSymlink != 0:
			name += "@"
		}
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return toolResult{Content: "(empty folder)"}
	}
	more := ""
	if len(names) > listDirMaxEntries {
		more = fmt.Sprintf("[... and %d more entries]\n", len(names)-listDirMaxEntries)
		names = names[:listDirMaxEntries]
	}
	return toolResult{Content: strings.Join(names, "\n") + "\n" + more}
}

func (tb *toolbox) runCommand(ctx context.Context, args string) toolResult {
	var a struct {
		Argv []string `json:"argv"`
	}
	if err := decodeArgs(ToolRunCommand, args, &a); err != nil {
		return errResult("%v (run_command takes {\"argv\": [\"program\", \"arg\", ...]}; there is no shell)", err)
	}
	if len(a.Argv) == 0 || a.Argv[0] == "" {
		return errResult("run_command: argv must name a program")
	}
	if err := tb.role.CheckCommand(a.Argv); err != nil {
		return errResult("run_command %s: %s", strings.Join(a.Argv, " "), refusalText(err))
	}
	if tb.sb == nil {
		return errResult("run_command: no sandbox is configured for this run")
	}
	if err := makeScratch(tb.scratch); err != nil {
		return errResult("run_command: scratch folder: %v", err)
	}
	res, err := tb.sb.Run(ctx, sandbox.Spec{
		Dir:          tb.dir,
		Argv:         a.Argv,
		Env:          tb.env,
		Scratch:      tb.scratch,
		Timeout:      tb.lim.CommandTimeout,
		OutputLimit:  fullOutputLimit,
		MemoryLimit:  tb.lim.MemoryLimit,
		ReadOnlyDirs: tb.readOnly,
		Warn:         tb.warn,
		// The run's own layer over the trusted warm Go cache: what its
		// commands compile stays in the run's scratch folder (issue 23).
		WarmGoCache: true,
	})
	if err != nil {
		return errResult("run_command %s: %v", strings.Join(a.Argv, " "), err)
	}
	var head string
	switch {
	case res.Outcome == sandbox.OutcomePidsExceeded && res.TimedOut:
		head = fmt.Sprintf("command hit the sandbox's process limit and timed out after %s (killed with everything it started): start fewer processes\n", tb.lim.CommandTimeout)
	case res.Outcome == sandbox.OutcomePidsExceeded:
		head = fmt.Sprintf("command failed at the sandbox's process limit (exit status %d): start fewer processes\n", res.ExitCode)
	case res.TimedOut || res.Outcome == sandbox.OutcomeTimeout:
		head = fmt.Sprintf("command timed out after %s (killed with everything it started)\n", tb.lim.CommandTimeout)
	case res.OutputExceeded || res.Outcome == sandbox.OutcomeOutputExceeded:
		head = fmt.Sprintf("command killed: it wrote %d bytes, more than the sandbox allows\n", res.OutputBytes)
	case res.MemoryExceeded || res.Outcome == sandbox.OutcomeMemoryExceeded:
		head = fmt.Sprintf("command failed at its memory limit (%s; exit status %d): use less memory, or ask for a role with a larger limits.memoryBytes\n", memoryText(tb.lim.MemoryLimit), res.ExitCode)
	case res.Outcome == sandbox.OutcomeSignaled:
		head = fmt.Sprintf("command killed by signal %s\n", cmp.Or(res.Signal, "(unknown)"))
	case res.Outcome == sandbox.OutcomeCancelled:
		head = "command cancelled (the run is stopping)\n"
	default:
		head = fmt.Sprintf("exit status %d\n", res.ExitCode)
	}
	if res.Truncated {
		head += "[output truncated by the sandbox]\n"
	}
	full := append([]byte(head), res.Output...)
	out := toolResult{Content: string(full), IsError: res.ExitCode != 0 || res.TimedOut || res.MemoryExceeded}
	switch {
	case res.Outcome == sandbox.OutcomePidsExceeded:
		out.Limit = "process limit"
	case res.MemoryExceeded || res.Outcome == sandbox.OutcomeMemoryExceeded:
		out.Limit = "memory limit (" + memoryText(tb.lim.MemoryLimit) + ")"
	}
	return out
}

// memoryText names a command's memory limit for the model.
func memoryText(n int64) string {
	if n <= 0 {
		n = sandbox.DefaultMaxMemory
	}
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// refusalText renders a policy answer for the model.
func refusalText(err error) string {
	var r *refusal.Refusal
	if errors.As(err, &r) {
		s := "refused (" + string(r.Code) + "): " + r.Reason
		if r.Fix != "" {
			s += "; " + r.Fix
		}
		return s
	}
	return err.Error()
}

// makeScratch makes a run's scratch folder with home and tmp in it. Its
// parent must be traversable by the sandbox's unprivileged uid; the folder
// itself is handed to that uid by the sandbox.
func makeScratch(scratch string) error {
	parent := filepath.Dir(scratch)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(parent, 0o755); err != nil {
		return err
	}
	for _, d := range []string{"home", "tmp"} {
		if err := os.MkdirAll(filepath.Join(scratch, d), 0o700); err != nil {
			return err
		}
	}
	return nil
}

// commandEnv builds the complete environment for worker commands: PATH,
// HOME and TMPDIR in a scratch folder, LANG, sandbox.ToolConfigEnv (per-user
// configuration files in that HOME are ignored), and the role's allowlisted names
// that are set — never a name policy.Withheld names, never one of denied.
func commandEnv(getenv func(string) string, role RolePolicy, scratch string, denied []string) (env []string, dropped []string) {
	pathv := getenv("PATH")
	if pathv == "" {
		pathv = "/usr/local/bin:/usr/bin:/bin"
	}
	lang := getenv("LANG")
	if lang == "" {
		lang = "C.UTF-8"
	}
	env = []string{
		"PATH=" + pathv,
		"HOME=" + filepath.Join(scratch, "home"),
		"TMPDIR=" + filepath.Join(scratch, "tmp"),
		"LANG=" + lang,
	}
	fixed := map[string]bool{"PATH": true, "HOME": true, "TMPDIR": true, "LANG": true}
	for _, kv := range sandbox.ToolConfigEnv() {
		env = append(env, kv)
		name, _, _ := strings.Cut(kv, "=")
		fixed[name] = true
	}
	deny := map[string]bool{}
	for _, d := range denied {
		deny[d] = true
	}
	if role == nil {
		return env, nil
	}
	names := append([]string(nil), role.EnvAllowlist()...)
	sort.Strings(names)
	for _, name := range names {
		if fixed[name] || name == "" || strings.ContainsAny(name, "=\x00") {
			continue
		}
		if deny[name] || policy.Withheld(name) {
			dropped = append(dropped, name)
			continue
		}
		if v := getenv(name); v != "" {
			env = append(env, name+"="+v)
		}
	}
	return env, dropped
}
