package policy

import "testing"

func TestWithheld(t *testing.T) {
	for _, tc := range []struct {
		name       string
		withheld   bool
		credential bool
	}{
		// credentials, whatever the case and wherever the word sits
		{"OPENAI_API_KEY", true, true},
		{"GITEA_TOKEN", true, true},
		{"github_token", true, true},
		{"AWS_SECRET_ACCESS_KEY", true, true},
		{"AWS_SESSION_TOKEN", true, true},
		{"SESSION_ID", true, true}, // only runtask/tools.go used to block it
		{"MY_SESSION", true, true},
		{"PGPASSWORD", true, true},
		{"PGPASS", true, true},
		{"GPG_PASSPHRASE", true, true},
		{"DB_PASSWD", true, true},
		{"GOOGLE_APPLICATION_CREDENTIALS", true, true},
		{"PROXY_AUTHORIZATION", true, true},
		{"SSH_AUTH_SOCK", true, true},
		{"COOKIE_JAR", true, true},
		{"TLS_PRIVATE_PEM", true, true},
		{"CLIENT_CERT", true, true},
		{"BEARER", true, true},
		{"SIGNING_JWT", true, true},
		{"DATABASE_URL", true, true},
		{"redis_url", true, true},
		{"NETRC", true, true},
		{"KUBECONFIG", true, true},
		{"DOCKER_CONFIG", true, true},
		{"GH_HOST", true, true},
		// code runners and other configuration
		{"LD_PRELOAD", true, false},
		{"ld_library_path", true, false},
		{"DYLD_INSERT_LIBRARIES", true, false},
		{"GIT_DIR", true, false},
		{"GIT_CONFIG_GLOBAL", true, false},
		{"BASH_ENV", true, false},
		{"ENV", true, false},
		{"PROMPT_COMMAND", true, false},
		{"PYTHONSTARTUP", true, false},
		{"PYTHONPATH", true, false},
		{"NODE_OPTIONS", true, false},
		{"PERL5OPT", true, false},
		{"RUBYOPT", true, false},
		{"GOENV", true, false},
		{"GOTOOLCHAIN", true, false},
		{"MAKEFLAGS", true, false},
		{"MAKEFILES", true, false},
		{"GNUMAKEFLAGS", true, false},
		{"SHELL", true, false},
		{"NPM_CONFIG_USERCONFIG", true, false},
		{"npm_config_script_shell", true, false},
		{"CARGO_HOME", true, false},
		{"PIP_INDEX_URL", true, false},
		{"CC", true, false},
		{"CGO_LDFLAGS", true, false},
		{"RUSTFLAGS", true, false},
		{"PYTEST_ADDOPTS", true, false},
		{"JAVA_TOOL_OPTIONS", true, false},
		{"LESSOPEN", true, false},
		{"PS4", true, false},
		// what roles and gates legitimately pass
		{"GOFLAGS", false, false},
		{"GOMODCACHE", false, false},
		{"GOPROXY", false, false},
		{"GOROOT", false, false},
		{"GOPRIVATE", false, false},
		{"GONOSUMDB", false, false},
		{"CGO_ENABLED", false, false},
		{"CI", false, false},
		{"PATH", false, false},
		{"LANG", false, false},
		{"LC_ALL", false, false},
		{"TERM", false, false},
		{"TZ", false, false},
		{"HOME", false, false},
		{"TMPDIR", false, false},
		{"CONDUCTOR_GATE", false, false},
		{"", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Withheld(tc.name); got != tc.withheld {
				t.Errorf("Withheld(%q) = %v, want %v", tc.name, got, tc.withheld)
			}
			if got := Credential(tc.name); got != tc.credential {
				t.Errorf("Credential(%q) = %v, want %v", tc.name, got, tc.credential)
			}
		})
	}
}
