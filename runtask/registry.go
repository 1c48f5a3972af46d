package runtask

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/conductor-dev/conductor/conductor/jsonstrict"
)

// ReplayPrefix selects the replay model: "replay:FILE" plays FILE (a fakellm
// script) with no network.
const ReplayPrefix = "replay:"

// Registry defaults, applied when neither the config file nor the
// environment sets a value.
const (
	DefaultModelTimeout   = 5 * time.Minute // per attempt
	DefaultMaxAttempts    = 4               // 1 try + 3 retries on 429/5xx
	DefaultRetryBaseDelay = 500 * time.Millisecond
	DefaultRetryMaxDelay  = 30 * time.Second
	defaultModelAlias     = "ollama-qwen"
)

// ErrUnknownModel is wrapped by Lookup for an alias the registry lacks.
var ErrUnknownModel = errors.New("unknown model alias")

// ModelSpec is one resolved model alias: where the server is, which model
// to ask for, and how to talk to it.
type ModelSpec struct {
	Alias   string `json:"alias"`
	BaseURL string `json:"baseURL"`
	Model   string `json:"model"`
	// APIKeyEnv is the NAME of the environment variable holding the API key
	// ("" for servers without authentication). The key itself is read only
	// by NewClient and never stored here.
	APIKeyEnv     string        `json:"apiKeyEnv,omitempty"`
	ContextWindow int           `json:"contextWindow,omitempty"`
	MaxConcurrent int           `json:"maxConcurrent,omitempty"` // 0: unlimited
	Timeout       time.Duration `json:"timeout"`                 // per attempt
	MaxAttempts   int           `json:"maxAttempts"`
	RetryBase     time.Duration `json:"retryBaseDelay"`
	RetryMax      time.Duration `json:"retryMaxDelay"`
	Temperature   *float64      `json:"temperature,omitempty"`
	MaxTokens     int           `json:"maxTokens,omitempty"`
	// Stream asks the server for server-sent events: progress while a long
	// answer is generated, and Timeout becomes an idle timeout (no byte for
	// that long) instead of a cap on the whole answer. On for every
	// configured server; off for the in-process replay model.
	Stream bool `json:"stream"`
	// ReplayFile is set for "replay:FILE": the script to play, no network.
	ReplayFile string `json:"replayFile,omitempty"`
	// Source says where the values came from (built-in, config file, env).
	Source string `json:"source"`
}

// IsReplay reports whether the spec selects the replay model.
func (s ModelSpec) IsReplay() bool { return s.ReplayFile != "" }

// Registry maps model aliases to specs.
type Registry struct {
	specs map[string]ModelSpec
	def   string
}

// modelFileConfig is the "models" section of the config file.
type modelFileConfig struct {
	Default string                      `json:"default"`
	SlotTTL string                      `json:"slotTTL"` // conductor.Resolve's knob (modelSlotTTL)
	Aliases map[string]modelAliasConfig `json:"aliases"`
}

// modelAliasConfig is one alias in the config file; absent fields keep the
// built-in value of an alias of the same name.
type modelAliasConfig struct {
	BaseURL        *string        `json:"baseURL"`
	Model          *string        `json:"model"`
	APIKeyEnv      *string        `json:"apiKeyEnv"`
	ContextWindow  *int           `json:"contextWindow"`
	MaxConcurrent  *int           `json:"maxConcurrent"`
	Timeout        *modelDuration `json:"timeout"`
	MaxAttempts    *int           `json:"maxAttempts"`
	RetryBaseDelay *modelDuration `json:"retryBaseDelay"`
	RetryMaxDelay  *modelDuration `json:"retryMaxDelay"`
	Temperature    *float64       `json:"temperature"`
	MaxTokens      *int           `json:"maxTokens"`
	Stream         *bool          `json:"stream"`
}

// modelDuration is a duration written as a Go duration string ("90s",
// "5m") or a number of seconds.
type modelDuration time.Duration

func (d *modelDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("want a duration like \"90s\" or \"5m\", got %q", s)
		}
		*d = modelDuration(v)
		return nil
	}
	var n float64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("want a duration like \"90s\" or a number of seconds, got %s", b)
	}
	*d = modelDuration(time.Duration(n * float64(time.Second)))
	return nil
}

// BuiltinModels are the aliases known without any configuration: common
// local OpenAI-compatible servers on their default ports, and OpenAI.
func BuiltinModels() []ModelSpec {
	base := func(alias, url, model string, ctxWin, conc int) ModelSpec {
		return ModelSpec{
			Alias: alias, BaseURL: url, Model: model, ContextWindow: ctxWin, MaxConcurrent: conc,
			Timeout: DefaultModelTimeout, MaxAttempts: DefaultMaxAttempts, Stream: true,
			RetryBase: DefaultRetryBaseDelay, RetryMax: DefaultRetryMaxDelay, Source: "built-in",
		}
	}
	openai := base("openai", "https://api.openai.com/v1", "gpt-4o-mini", 128000, 4)
	openai.APIKeyEnv = "OPENAI_API_KEY"
	return []ModelSpec{
		base("ollama-qwen", "http://localhost:11434/v1", "qwen2.5-coder:14b", 32768, 1),
		base("qwen-coder-mlx", "http://localhost:8080/v1", "mlx-community/Qwen2.5-Coder-14B-Instruct-4bit", 32768, 1),
		base("llamacpp", "http://localhost:8080/v1", "local", 32768, 1),
		base("vllm", "http://localhost:8000/v1", "Qwen/Qwen2.5-Coder-32B-Instruct", 32768, 8),
		openai,
	}
}

// LoadRegistry builds the registry: the built-in aliases, then the "models"
// section of configFile ("" or a missing file: none), then environment
// overrides read through getenv (the default alias, CONDUCTOR_MODEL, is a
// knob of the resolved configuration: the caller applies it with
// SetDefault):
//
//	CONDUCTOR_MODEL_<ALIAS>_URL             base URL of ALIAS
//	CONDUCTOR_MODEL_<ALIAS>_MODEL           model name
//	CONDUCTOR_MODEL_<ALIAS>_API_KEY_ENV     name of the API key variable
//	CONDUCTOR_MODEL_<ALIAS>_CONTEXT_WINDOW  context window in tokens
//	CONDUCTOR_MODEL_<ALIAS>_MAX_CONCURRENT  concurrent requests (0: unlimited)
//	CONDUCTOR_MODEL_<ALIAS>_TIMEOUT         per-attempt timeout ("90s")
//	CONDUCTOR_MODEL_<ALIAS>_MAX_ATTEMPTS    attempts on 429/5xx
//	OPENAI_BASE_URL, OPENAI_MODEL           the "openai" alias's URL and model
//
// <ALIAS> is the alias upper-cased with every other character than A-Z and
// 0-9 turned into "_" (qwen-coder-mlx → QWEN_CODER_MLX).
func LoadRegistry(configFile string, getenv func(string) string) (*Registry, error) {
	r := &Registry{specs: map[string]ModelSpec{}}
	for _, s := range BuiltinModels() {
		r.specs[s.Alias] = s
	}
	r.applyOpenAIEnv(getenv)
	if configFile != "" {
		data, err := os.ReadFile(configFile)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("model registry: %w", err)
		default:
			if err := r.applyConfig(configFile, data); err != nil {
				return nil, err
			}
		}
	}
	if err := r.applyEnv(getenv); err != nil {
		return nil, err
	}
	for _, alias := range r.Aliases() {
		if err := r.specs[alias].Validate(); err != nil {
			return nil, fmt.Errorf("model registry: %w", err)
		}
	}
	if r.def == "" {
		r.def = defaultModelAlias
		if getenv("OPENAI_BASE_URL") != "" {
			r.def = "openai"
		}
	}
	return r, nil
}

// SetDefault makes alias the default (the operator's CONDUCTOR_MODEL,
// resolved with the other knobs); "" keeps the file's or the built-in one.
func (r *Registry) SetDefault(alias string) {
	if alias != "" {
		r.def = alias
	}
}

// applyOpenAIEnv points the "openai" alias at OPENAI_BASE_URL/OPENAI_MODEL.
// With a custom base URL the key variable is only required when it is set.
func (r *Registry) applyOpenAIEnv(getenv func(string) string) {
	s := r.specs["openai"]
	if v := getenv("OPENAI_BASE_URL"); v != "" {
		s.BaseURL = v
		s.Source = "built-in, env OPENAI_BASE_URL"
		if getenv("OPENAI_API_KEY") == "" {
			s.APIKeyEnv = ""
		}
	}
	if v := getenv("OPENAI_MODEL"); v != "" {
		s.Model = v
	}
	r.specs["openai"] = s
}

func (r *Registry) applyConfig(path string, data []byte) error {
	var top map[string]json.RawMessage
	if err := jsonstrict.Decode(data, &top, ""); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	raw, ok := top["models"]
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil
	}
	var cfg modelFileConfig
	if err := jsonstrict.Decode(raw, &cfg, "models"); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	for _, alias := range sortedAliasKeys(cfg.Aliases) {
		if err := validAlias(alias); err != nil {
			return fmt.Errorf("config %s: models.aliases: %w", path, err)
		}
		c := cfg.Aliases[alias]
		s, ok := r.specs[alias]
		if !ok {
			s = ModelSpec{Alias: alias, Timeout: DefaultModelTimeout, MaxAttempts: DefaultMaxAttempts, Stream: true,
				RetryBase: DefaultRetryBaseDelay, RetryMax: DefaultRetryMaxDelay}
			s.Source = "config " + path
		} else {
			s.Source += ", config " + path
		}
		setIf(&s.BaseURL, c.BaseURL)
		setIf(&s.Model, c.Model)
		setIf(&s.APIKeyEnv, c.APIKeyEnv)
		setIf(&s.ContextWindow, c.ContextWindow)
		setIf(&s.MaxConcurrent, c.MaxConcurrent)
		setIf(&s.MaxAttempts, c.MaxAttempts)
		setIf(&s.MaxTokens, c.MaxTokens)
		setIf(&s.Stream, c.Stream)
		if c.Timeout != nil {
			s.Timeout = time.Duration(*c.Timeout)
		}
		if c.RetryBaseDelay != nil {
			s.RetryBase = time.Duration(*c.RetryBaseDelay)
		}
		if c.RetryMaxDelay != nil {
			s.RetryMax = time.Duration(*c.RetryMaxDelay)
		}
		if c.Temperature != nil {
			t := *c.Temperature
			s.Temperature = &t
		}
		if err := s.Validate(); err != nil {
			return fmt.Errorf("config %s: models.aliases.%w", path, err)
		}
		r.specs[alias] = s
	}
	if cfg.Default != "" {
		if _, ok := r.specs[cfg.Default]; !ok && !strings.HasPrefix(cfg.Default, ReplayPrefix) {
			return fmt.Errorf("config %s: models.default: %w %q (known: %s)", path, ErrUnknownModel, cfg.Default, strings.Join(r.Aliases(), ", "))
		}
		r.def = cfg.Default
	}
	return nil
}

func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

func (r *Registry) applyEnv(getenv func(string) string) error {
	for _, alias := range r.Aliases() {
		s := r.specs[alias]
		prefix := ModelEnvPrefix(alias)
		changed := false
		str := func(suffix string, dst *string) {
			if v := getenv(prefix + suffix); v != "" {
				*dst, changed = v, true
			}
		}
		num := func(suffix string, dst *int) error {
			v := getenv(prefix + suffix)
			if v == "" {
				return nil
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%s%s=%q: want an integer", prefix, suffix, v)
			}
			*dst, changed = n, true
			return nil
		}
		str("_URL", &s.BaseURL)
		str("_MODEL", &s.Model)
		str("_API_KEY_ENV", &s.APIKeyEnv)
		for _, f := range []struct {
			suffix string
			dst    *int
		}{{"_CONTEXT_WINDOW", &s.ContextWindow}, {"_MAX_CONCURRENT", &s.MaxConcurrent}, {"_MAX_ATTEMPTS", &s.MaxAttempts}} {
			if err := num(f.suffix, f.dst); err != nil {
				return fmt.Errorf("model registry: %w", err)
			}
		}
		if v := getenv(prefix + "_STREAM"); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("model registry: %s_STREAM=%q: want true or false", prefix, v)
			}
			s.Stream, changed = b, true
		}
		if v := getenv(prefix + "_TIMEOUT"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("model registry: %s_TIMEOUT=%q: want a duration like \"90s\"", prefix, v)
			}
			s.Timeout, changed = d, true
		}
		if changed {
			s.Source += ", env " + prefix + "_*"
			if err := s.Validate(); err != nil {
				return fmt.Errorf("model registry (env %s_*): %w", prefix, err)
			}
			r.specs[alias] = s
		}
	}
	return nil
}

// ModelEnvPrefix is the prefix of an alias's override variables:
// CONDUCTOR_MODEL_<ALIAS>.
func ModelEnvPrefix(alias string) string {
	var b strings.Builder
	b.WriteString("CONDUCTOR_MODEL_")
	for _, c := range strings.ToUpper(alias) {
		if (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

var (
	aliasPattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	envVarPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func validAlias(alias string) error {
	if !aliasPattern.MatchString(alias) {
		return fmt.Errorf("alias %q: use letters, digits, '.', '_' and '-' (at most 64)", alias)
	}
	return nil
}

// Validate checks a spec; errors start with the alias and name the field.
func (s ModelSpec) Validate() error {
	if s.IsReplay() {
		return nil
	}
	p := s.Alias + "."
	if s.BaseURL == "" {
		return fmt.Errorf("%sbaseURL: required", p)
	}
	u, err := url.Parse(s.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%sbaseURL: %q is not an http(s) URL like http://localhost:11434/v1", p, s.BaseURL)
	}
	if u.User != nil {
		return fmt.Errorf("%sbaseURL: must not carry credentials; name the key's variable in apiKeyEnv", p)
	}
	if s.Model == "" {
		return fmt.Errorf("%smodel: required", p)
	}
	if s.APIKeyEnv != "" && !envVarPattern.MatchString(s.APIKeyEnv) {
		return fmt.Errorf("%sapiKeyEnv: %q is not an environment variable name (apiKeyEnv names the variable holding the key, never the key)", p, redactLooksLikeKey(s.APIKeyEnv))
	}
	switch {
	case s.ContextWindow < 0:
		return fmt.Errorf("%scontextWindow: must not be negative", p)
	case s.MaxConcurrent < 0:
		return fmt.Errorf("%smaxConcurrent: must not be negative (0 means unlimited)", p)
	case s.Timeout < 0:
		return fmt.Errorf("%stimeout: must not be negative", p)
	case s.MaxAttempts < 1 || s.MaxAttempts > 20:
		return fmt.Errorf("%smaxAttempts: %d is not between 1 and 20", p, s.MaxAttempts)
	case s.RetryBase < 0 || s.RetryMax < 0:
		return fmt.Errorf("%sretryBaseDelay/retryMaxDelay: must not be negative", p)
	case s.MaxTokens < 0:
		return fmt.Errorf("%smaxTokens: must not be negative", p)
	case s.Temperature != nil && (*s.Temperature < 0 || *s.Temperature > 2):
		return fmt.Errorf("%stemperature: %g is not between 0 and 2", p, *s.Temperature)
	}
	return nil
}

// redactLooksLikeKey hides a value that is probably a key pasted where a
// variable name belongs, so the error does not print it.
func redactLooksLikeKey(v string) string {
	if len(v) > 12 {
		return v[:4] + "…(redacted)"
	}
	return v
}

// Aliases lists the known aliases, sorted.
func (r *Registry) Aliases() []string { return sortedAliasKeys(r.specs) }

// Specs lists every alias's spec, sorted by alias.
func (r *Registry) Specs() []ModelSpec {
	out := make([]ModelSpec, 0, len(r.specs))
	for _, a := range r.Aliases() {
		out = append(out, r.specs[a])
	}
	return out
}

// Default is the alias used when none is asked for.
func (r *Registry) Default() string { return r.def }

// Lookup resolves an alias ("" means Default). "replay:FILE" resolves to the
// replay model of FILE. An unknown alias is an error listing the known ones.
func (r *Registry) Lookup(alias string) (ModelSpec, error) {
	if alias == "" {
		alias = r.def
	}
	if file, ok := strings.CutPrefix(alias, ReplayPrefix); ok {
		if file == "" {
			return ModelSpec{}, fmt.Errorf("model %q: name the script file after %q", alias, ReplayPrefix)
		}
		// Absolute, so a resumed session finds the file from any folder.
		if abs, err := filepath.Abs(file); err == nil {
			file = abs
		}
		return ModelSpec{Alias: alias, Model: "replay", ReplayFile: file, MaxAttempts: DefaultMaxAttempts, Source: "replay"}, nil
	}
	s, ok := r.specs[alias]
	if !ok {
		return ModelSpec{}, fmt.Errorf("%w %q (known: %s; or %sFILE)", ErrUnknownModel, alias, strings.Join(r.Aliases(), ", "), ReplayPrefix)
	}
	return s, nil
}

func sortedAliasKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// AliasLimiter bounds the concurrent requests to one model alias. One
// limiter per alias is shared by every client in the process (see Limiter).
type AliasLimiter struct {
	mu      sync.Mutex
	max     int // 0: unlimited
	inUse   int
	changed chan struct{}
}

// limiters is process-wide on purpose: the registry's maxConcurrent bounds
// all sessions of a worker process against one inference host.
var limiters = struct {
	sync.Mutex
	m map[string]*AliasLimiter
}{m: map[string]*AliasLimiter{}}

// Limiter returns the process-wide limiter of alias (created unlimited).
// NewClient sets its maximum from the spec's MaxConcurrent.
func Limiter(alias string) *AliasLimiter {
	limiters.Lock()
	defer limiters.Unlock()
	l := limiters.m[alias]
	if l == nil {
		l = &AliasLimiter{changed: make(chan struct{})}
		limiters.m[alias] = l
	}
	return l
}

// SetMax changes the bound (0: unlimited); waiters re-check at once.
func (l *AliasLimiter) SetMax(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n < 0 {
		n = 0
	}
	if l.max != n {
		l.max = n
		l.broadcastLocked()
	}
}

// Max is the bound (0: unlimited).
func (l *AliasLimiter) Max() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max
}

// InUse is the number of slots held now.
func (l *AliasLimiter) InUse() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inUse
}

func (l *AliasLimiter) broadcastLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Acquire waits for a slot or for ctx to end. The returned release must be
// called once; calling it again does nothing.
func (l *AliasLimiter) Acquire(ctx context.Context) (release func(), err error) {
	for {
		l.mu.Lock()
		if l.max == 0 || l.inUse < l.max {
			l.inUse++
			l.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					l.mu.Lock()
					l.inUse--
					l.broadcastLocked()
					l.mu.Unlock()
				})
			}, nil
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// sharedLimiter is the process-wide limiter, then the slots shared across
// processes (when set and the alias is bounded): what pi's proxy holds
// around each upstream request.
type sharedLimiter struct {
	local *AliasLimiter
	slots ModelSlots
	alias string
	max   int
}

func (l sharedLimiter) Acquire(ctx context.Context) (func(), error) {
	release, err := l.local.Acquire(ctx)
	if err != nil || l.slots == nil || l.max < 1 {
		return release, err
	}
	free, err := l.slots.Acquire(ctx, l.alias, l.max)
	if err != nil {
		release()
		return nil, err
	}
	return func() { free(); release() }, nil
}
