package runtask

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRegistryBuiltins(t *testing.T) {
	r, err := LoadRegistry("", envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ollama-qwen":    "http://localhost:11434/v1",
		"qwen-coder-mlx": "http://localhost:8080/v1",
		"llamacpp":       "http://localhost:8080/v1",
		"vllm":           "http://localhost:8000/v1",
		"openai":         "https://api.openai.com/v1",
	}
	for alias, url := range want {
		s, err := r.Lookup(alias)
		if err != nil {
			t.Fatalf("%s: %v", alias, err)
		}
		if s.BaseURL != url || s.Model == "" || s.Timeout != DefaultModelTimeout || s.MaxAttempts != DefaultMaxAttempts || s.Alias != alias {
			t.Errorf("%s: %+v", alias, s)
		}
	}
	if s, _ := r.Lookup("openai"); s.APIKeyEnv != "OPENAI_API_KEY" {
		t.Errorf("openai key variable %q", s.APIKeyEnv)
	}
	if r.Default() != "ollama-qwen" {
		t.Errorf("default %q", r.Default())
	}
	if s, err := r.Lookup(""); err != nil || s.Alias != "ollama-qwen" {
		t.Errorf("Lookup(\"\") = %+v, %v", s, err)
	}
}

func TestRegistryLookupErrors(t *testing.T) {
	r, err := LoadRegistry("", envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Lookup("gpt-9")
	if !errors.Is(err, ErrUnknownModel) || !strings.Contains(err.Error(), `"gpt-9"`) ||
		!strings.Contains(err.Error(), "known: llamacpp, ollama-qwen, openai, qwen-coder-mlx, vllm") || !strings.Contains(err.Error(), "replay:FILE") {
		t.Fatalf("err %v", err)
	}
	if _, err := r.Lookup("replay:"); err == nil {
		t.Fatal("replay: without a file accepted")
	}
	s, err := r.Lookup("replay:testdata/models/demo.json")
	abs, _ := filepath.Abs("testdata/models/demo.json")
	if err != nil || !s.IsReplay() || s.ReplayFile != abs || s.Alias != "replay:testdata/models/demo.json" {
		t.Fatalf("replay spec %+v %v", s, err)
	}
}

func TestRegistryConfigFile(t *testing.T) {
	p := writeConfig(t, `{
		"forge": {"url": "http://gitea"},
		"models": {
			"default": "big",
			"aliases": {
				"big": {"baseURL": "http://gpu-box:8000/v1", "model": "Qwen/Qwen3-Coder-30B", "apiKeyEnv": "GPU_BOX_KEY",
				        "contextWindow": 65536, "maxConcurrent": 4, "timeout": "90s", "maxAttempts": 6,
				        "retryBaseDelay": 0.25, "retryMaxDelay": "10s", "temperature": 0, "maxTokens": 2048},
				"ollama-qwen": {"model": "qwen3-coder:30b"}
			}
		}
	}`)
	r, err := LoadRegistry(p, envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if r.Default() != "big" {
		t.Errorf("default %q", r.Default())
	}
	big, _ := r.Lookup("big")
	if big.BaseURL != "http://gpu-box:8000/v1" || big.Model != "Qwen/Qwen3-Coder-30B" || big.APIKeyEnv != "GPU_BOX_KEY" ||
		big.ContextWindow != 65536 || big.MaxConcurrent != 4 || big.Timeout != 90*time.Second || big.MaxAttempts != 6 ||
		big.RetryBase != 250*time.Millisecond || big.RetryMax != 10*time.Second || big.Temperature == nil || *big.Temperature != 0 ||
		big.MaxTokens != 2048 || !strings.Contains(big.Source, p) {
		t.Errorf("big: %+v", big)
	}
	// A built-in alias named in the file keeps what the file leaves out.
	oq, _ := r.Lookup("ollama-qwen")
	if oq.Model != "qwen3-coder:30b" || oq.BaseURL != "http://localhost:11434/v1" || !strings.Contains(oq.Source, "built-in, config") {
		t.Errorf("ollama-qwen: %+v", oq)
	}
	// The operator's default (CONDUCTOR_MODEL, resolved as a knob) beats
	// the file's; the registry itself never reads it.
	r, err = LoadRegistry(p, envMap(map[string]string{"CONDUCTOR_MODEL": "vllm"}))
	if err != nil || r.Default() != "big" {
		t.Fatalf("default %q %v: the registry read CONDUCTOR_MODEL itself", r.Default(), err)
	}
	r.SetDefault("vllm")
	if r.Default() != "vllm" {
		t.Fatalf("default %q after SetDefault", r.Default())
	}
}

func TestRegistryConfigErrors(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"unknown field", `{"models":{"aliases":{"a":{"baseURL":"http://x/v1","model":"m","bsaeURL":"y"}}}}`,
			`models.aliases.a: unknown field "bsaeURL"`},
		{"unknown section field", `{"models":{"aliasses":{}}}`, `models: unknown field "aliasses"`},
		{"wrong type", `{"models":{"aliases":{"a":{"baseURL":"http://x/v1","model":"m","maxConcurrent":"4"}}}}`,
			`models.aliases.a.maxConcurrent: want an integer, got a JSON string`},
		{"bad duration", `{"models":{"aliases":{"a":{"baseURL":"http://x/v1","model":"m","timeout":"soon"}}}}`,
			`models.aliases.a.timeout: want a duration like "90s"`},
		{"missing url", `{"models":{"aliases":{"a":{"model":"m"}}}}`, `models.aliases.a.baseURL: required`},
		{"missing model", `{"models":{"aliases":{"a":{"baseURL":"http://x/v1"}}}}`, `models.aliases.a.model: required`},
		{"not http", `{"models":{"aliases":{"a":{"baseURL":"ftp://x","model":"m"}}}}`, `a.baseURL: "ftp://x" is not an http(s) URL`},
		{"credentials in url", `{"models":{"aliases":{"a":{"baseURL":"http://u:p@x/v1","model":"m"}}}}`, `a.baseURL: must not carry credentials`},
		{"key pasted as variable", `{"models":{"aliases":{"a":{"baseURL":"http://x/v1","model":"m","apiKeyEnv":"sk-proj-abcdefghijklmnop"}}}}`,
			`a.apiKeyEnv: "sk-p…(redacted)" is not an environment variable name`},
		{"negative concurrency", `{"models":{"aliases":{"a":{"baseURL":"http://x/v1","model":"m","maxConcurrent":-1}}}}`, `a.maxConcurrent: must not be negative`},
		{"attempts", `{"models":{"aliases":{"a":{"baseURL":"http://x/v1","model":"m","maxAttempts":0}}}}`, `a.maxAttempts: 0 is not between 1 and 20`},
		{"temperature", `{"models":{"aliases":{"a":{"baseURL":"http://x/v1","model":"m","temperature":3}}}}`, `a.temperature: 3 is not between 0 and 2`},
		{"bad alias", `{"models":{"aliases":{"a b":{"baseURL":"http://x/v1","model":"m"}}}}`, `alias "a b"`},
		{"unknown default", `{"models":{"default":"nope"}}`, `models.default: unknown model alias "nope"`},
		{"syntax", "{\"models\": {\n  \"aliases\": {,}}}", `line 2, column`},
		{"not an object", `[1]`, `(top level): want an object`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeConfig(t, tt.body)
			_, err := LoadRegistry(p, envMap(nil))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), p) && !strings.Contains(tt.want, "alias \"") {
				t.Fatalf("err %v, want it to contain %q and the file", err, tt.want)
			}
			if strings.Contains(err.Error(), "abcdefghijklmnop") {
				t.Fatalf("the pasted key was printed: %v", err)
			}
		})
	}
	if _, err := LoadRegistry(filepath.Join(t.TempDir(), "absent.json"), envMap(nil)); err != nil {
		t.Fatalf("a missing config file is no error: %v", err)
	}
}

func TestRegistryEnvOverrides(t *testing.T) {
	env := map[string]string{
		"CONDUCTOR_MODEL_QWEN_CODER_MLX_URL":            "http://mac.local:8080/v1",
		"CONDUCTOR_MODEL_QWEN_CODER_MLX_MODEL":          "mlx-community/Qwen3",
		"CONDUCTOR_MODEL_QWEN_CODER_MLX_MAX_CONCURRENT": "3",
		"CONDUCTOR_MODEL_QWEN_CODER_MLX_TIMEOUT":        "45s",
		"CONDUCTOR_MODEL_QWEN_CODER_MLX_API_KEY_ENV":    "MAC_KEY",
		"CONDUCTOR_MODEL_QWEN_CODER_MLX_CONTEXT_WINDOW": "8192",
		"CONDUCTOR_MODEL_QWEN_CODER_MLX_MAX_ATTEMPTS":   "2",
		"OPENAI_BASE_URL":                               "http://proxy:4000/v1",
		"OPENAI_MODEL":                                  "local-model",
	}
	r, err := LoadRegistry("", envMap(env))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := r.Lookup("qwen-coder-mlx")
	if s.BaseURL != "http://mac.local:8080/v1" || s.Model != "mlx-community/Qwen3" || s.MaxConcurrent != 3 || s.Timeout != 45*time.Second ||
		s.APIKeyEnv != "MAC_KEY" || s.ContextWindow != 8192 || s.MaxAttempts != 2 || !strings.Contains(s.Source, "env CONDUCTOR_MODEL_QWEN_CODER_MLX_*") {
		t.Errorf("qwen-coder-mlx: %+v", s)
	}
	o, _ := r.Lookup("openai")
	if o.BaseURL != "http://proxy:4000/v1" || o.Model != "local-model" || o.APIKeyEnv != "" {
		t.Errorf("openai: %+v", o)
	}
	if r.Default() != "openai" {
		t.Errorf("OPENAI_BASE_URL should make openai the default, got %q", r.Default())
	}
	env["OPENAI_API_KEY"] = "sk-x"
	r, _ = LoadRegistry("", envMap(env))
	if o, _ := r.Lookup("openai"); o.APIKeyEnv != "OPENAI_API_KEY" {
		t.Errorf("with OPENAI_API_KEY set the alias should use it: %+v", o)
	}
	for name, val := range map[string]string{
		"CONDUCTOR_MODEL_VLLM_MAX_CONCURRENT": "many",
		"CONDUCTOR_MODEL_VLLM_TIMEOUT":        "10",
		"CONDUCTOR_MODEL_VLLM_URL":            "localhost:8000",
	} {
		_, err := LoadRegistry("", envMap(map[string]string{name: val}))
		if err == nil || !strings.Contains(err.Error(), "CONDUCTOR_MODEL_VLLM") {
			t.Errorf("%s=%s: err %v", name, val, err)
		}
	}
}

func TestModelEnvPrefix(t *testing.T) {
	for alias, want := range map[string]string{
		"qwen-coder-mlx": "CONDUCTOR_MODEL_QWEN_CODER_MLX",
		"vllm":           "CONDUCTOR_MODEL_VLLM",
		"gpt4.1":         "CONDUCTOR_MODEL_GPT4_1",
	} {
		if got := ModelEnvPrefix(alias); got != want {
			t.Errorf("%s: %s, want %s", alias, got, want)
		}
	}
}
