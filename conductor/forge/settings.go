package forge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"
)

// Defaults.
const (
	DefaultTokenEnv  = "GITEA_TOKEN"
	DefaultURLEnv    = "GITEA_URL"
	DefaultRemote    = "origin"
	DefaultWIPPrefix = "WIP:"
	// DefaultTimeout bounds every forge request and every push.
	DefaultTimeout = 60 * time.Second
	// TimeoutEnv overrides the forge timeout (a Go duration, e.g. "30s").
	TimeoutEnv = "CONDUCTOR_FORGE_TIMEOUT"
)

// Settings are the forge settings. Flags win over the environment, the
// environment over the config file's "forge" section, that over defaults.
type Settings struct {
	// URL is the Gitea base URL (GITEA_URL).
	URL string `json:"url,omitempty"`
	// TokenEnv is the NAME of the environment variable holding the token
	// (default GITEA_TOKEN). The token itself is never stored in settings
	// files.
	TokenEnv string `json:"tokenEnv,omitempty"`
	// Remote is the local repository's remote to push to (default origin).
	Remote string `json:"remote,omitempty"`
	// Owner and Repo name the repository on the forge; empty: derived from
	// the remote URL.
	Owner string `json:"owner,omitempty"`
	Repo  string `json:"repo,omitempty"`
	// WIPPrefix is the draft title prefix (Gitea's
	// [repository.pull-request] WORK_IN_PROGRESS_PREFIXES; default "WIP:").
	WIPPrefix string `json:"wipPrefix,omitempty"`
	// Timeout bounds every request to the forge and every push (a Go
	// duration: "30s", "2m"; default 60s; CONDUCTOR_FORGE_TIMEOUT).
	Timeout string `json:"timeout,omitempty"`
	// Servers holds per-server overrides keyed by base URL (only wipPrefix
	// for now), for operators who use several Gitea servers.
	Servers map[string]ServerSettings `json:"servers,omitempty"`
}

// ServerSettings are per-server overrides.
type ServerSettings struct {
	WIPPrefix string `json:"wipPrefix,omitempty"`
}

// LoadSettings reads the "forge" section of the JSON configuration file (an
// absent path or section gives zero settings). Unknown keys inside the
// section are an error naming the file and key.
func LoadSettings(path string) (Settings, error) {
	var s Settings
	if path == "" {
		return s, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return s, fmt.Errorf("config %s: %w", path, err)
		}
		return s, fmt.Errorf("config %s: %w", path, err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return s, fmt.Errorf("config %s: %w", path, err)
	}
	raw, ok := top["forge"]
	if !ok {
		return s, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("config %s: forge: %w", path, err)
	}
	if strings.Contains(string(raw), "\"token\"") {
		return s, fmt.Errorf("config %s: forge: a token does not belong in the config file; set tokenEnv to the name of the variable holding it", path)
	}
	return s, nil
}

// Merge returns s with every non-empty field of over applied.
func (s Settings) Merge(over Settings) Settings {
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&s.URL, over.URL)
	set(&s.TokenEnv, over.TokenEnv)
	set(&s.Remote, over.Remote)
	set(&s.Owner, over.Owner)
	set(&s.Repo, over.Repo)
	set(&s.WIPPrefix, over.WIPPrefix)
	set(&s.Timeout, over.Timeout)
	if len(over.Servers) > 0 {
		s.Servers = over.Servers
	}
	return s
}

// WithDefaults fills the URL from GITEA_URL when unset, and the defaults.
// The timeout's variable (CONDUCTOR_FORGE_TIMEOUT) is a knob the caller
// resolved (conductor.Config.ForgeTimeout) and merged in.
func (s Settings) WithDefaults(getenv func(string) string) Settings {
	if s.URL == "" {
		s.URL = getenv(DefaultURLEnv)
	}
	if s.TokenEnv == "" {
		s.TokenEnv = DefaultTokenEnv
	}
	if s.Remote == "" {
		s.Remote = DefaultRemote
	}
	if s.WIPPrefix == "" {
		if srv, ok := s.Servers[strings.TrimRight(s.URL, "/")]; ok && srv.WIPPrefix != "" {
			s.WIPPrefix = srv.WIPPrefix
		} else if srv, ok := s.Servers[s.URL]; ok && srv.WIPPrefix != "" {
			s.WIPPrefix = srv.WIPPrefix
		} else {
			s.WIPPrefix = DefaultWIPPrefix
		}
	}
	return s
}

// Validate checks the URL and names.
func (s Settings) Validate() error {
	if s.URL == "" {
		return fmt.Errorf("forge URL is not set: set %s or --gitea-url", DefaultURLEnv)
	}
	u, err := url.Parse(s.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("forge URL %q: want http(s)://host[:port][/path]", redactURL(s.URL))
	}
	if u.User != nil {
		return fmt.Errorf("forge URL %s: credentials do not belong in the URL; put the token in $%s", redactURL(s.URL), s.TokenEnv)
	}
	if err := s.ValidateTimeout(); err != nil {
		return err
	}
	if !envNameRE.MatchString(s.TokenEnv) {
		return fmt.Errorf("token variable name %q: not an environment variable name", s.TokenEnv)
	}
	if s.Remote != "" && !validRemoteName(s.Remote) {
		return fmt.Errorf("remote %q: not a remote name", s.Remote)
	}
	if s.Owner != "" && !validName(s.Owner) {
		return fmt.Errorf("owner %q: not a forge name", s.Owner)
	}
	if s.Repo != "" && !validName(s.Repo) {
		return fmt.Errorf("repo %q: not a forge name", s.Repo)
	}
	return nil
}

// ValidateTimeout checks the timeout alone (for commands such as push that
// need no forge URL).
func (s Settings) ValidateTimeout() error {
	if s.Timeout != "" {
		if d, err := time.ParseDuration(s.Timeout); err != nil || d <= 0 {
			return fmt.Errorf("forge timeout %q: want a positive duration such as 30s or 2m", s.Timeout)
		}
	}
	return nil
}

// Deadline is the forge timeout: Timeout when it parses, else
// DefaultTimeout (Validate reports a bad one).
func (s Settings) Deadline() time.Duration {
	if d, err := time.ParseDuration(s.Timeout); err == nil && d > 0 {
		return d
	}
	return DefaultTimeout
}

// Token reads the token from the environment variable named by TokenEnv.
func (s Settings) Token(getenv func(string) string) (string, error) {
	tok := strings.TrimSpace(getenv(s.TokenEnv))
	if tok == "" {
		return "", fmt.Errorf("forge token: $%s is empty or unset (the token variable is named by --token-env)", s.TokenEnv)
	}
	return tok, nil
}
