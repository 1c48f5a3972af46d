package policy

// The one rule for environment variable names a worker never receives:
// names that look like credentials (API keys, tokens, passwords, session
// cookies, …) and names that make a program run other code or read another
// configuration (LD_*, GIT_*, BASH_ENV, NODE_OPTIONS, …). Role validation
// (here), the worker's command environment (runtask) and the gate
// environment (conductor/sandbox) all ask Withheld; none keeps a list of its
// own. Nothing here reads the environment itself.

import (
	"slices"
	"strings"
)

// credentialParts are substrings (matched case-insensitively) of names that
// may hold a credential. Matching is deliberately loose: a name withheld by
// mistake costs a role author one line of docs; a credential passed by
// mistake costs the credential.
var credentialParts = []string{
	"KEY", "TOKEN", "SECRET", "PASS", "CREDENTIAL", "AUTH", "COOKIE",
	"SESSION", "CERT", "BEARER", "JWT", "SIGNATURE",
}

// hostCodePrefixes are prefixes of names that change what a program loads
// or which configuration (and so which helper programs) it reads.
var hostCodePrefixes = []string{"LD_", "DYLD_", "GIT_", "SSH_", "NPM_CONFIG_", "PIP_", "CARGO_", "RUSTC_"}

// credentialNames are names of URLs and files that carry credentials.
var credentialNames = []string{"DATABASE_URL", "REDIS_URL", "GH_HOST", "NETRC", "KUBECONFIG", "DOCKER_CONFIG"}

// hostCodeNames are variables that run code or choose a configuration.
var hostCodeNames = []string{
	"BASH_ENV", "ENV", "PROMPT_COMMAND", "PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME",
	"NODE_OPTIONS", "NODE_PATH", "PERL5OPT", "PERL5LIB", "RUBYOPT", "RUBYLIB",
	"GOENV", "GOTOOLCHAIN", "MAKEFLAGS", "GNUMAKEFLAGS", "MFLAGS", "MAKEFILES", "SHELL", "SHELLOPTS",
	"BASHOPTS", "PS4", "IFS", "CC", "CXX", "AR", "LD",
	"CGO_CFLAGS", "CGO_CPPFLAGS", "CGO_CXXFLAGS", "CGO_FFLAGS", "CGO_LDFLAGS",
	"RUSTFLAGS", "RUSTDOCFLAGS", "PYTEST_ADDOPTS", "PYTEST_PLUGINS",
	"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS",
	"PAGER", "MANPAGER", "LESSOPEN", "LESSCLOSE", "EDITOR", "VISUAL", "BROWSER",
}

// Withheld reports whether a worker's command (a run_command, a review
// check, a landing gate) must never receive the variable name, whatever a
// role contract or the operator's environment says: it looks like a
// credential (Credential) or it makes a program run other code or read
// another configuration (LD_*, GIT_*, BASH_ENV, NODE_OPTIONS, …).
func Withheld(name string) bool {
	if Credential(name) {
		return true
	}
	u := strings.ToUpper(name)
	for _, p := range hostCodePrefixes {
		if strings.HasPrefix(u, p) {
			return true
		}
	}
	return slices.Contains(hostCodeNames, u)
}

// Credential reports whether name looks like it holds a credential: it
// contains KEY, TOKEN, SECRET, PASS, CREDENTIAL, AUTH, COOKIE, SESSION,
// CERT, BEARER, JWT or SIGNATURE, or the word PRIVATE (in any case), or
// it is a URL or file known to carry one (DATABASE_URL, REDIS_URL, NETRC, …).
func Credential(name string) bool {
	u := strings.ToUpper(name)
	for _, p := range credentialParts {
		if strings.Contains(u, p) {
			return true
		}
	}
	// PRIVATE as a word of the name (TLS_PRIVATE_PEM), not GOPRIVATE: Go's
	// list of private module paths holds no secret and gates need it.
	if u == "PRIVATE" || strings.HasPrefix(u, "PRIVATE_") || strings.Contains(u, "_PRIVATE") {
		return true
	}
	return slices.Contains(credentialNames, u)
}
