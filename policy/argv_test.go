package policy_test

import "testing"

// TestCheckCommandExactArgv: the attacks that got through the old argv
// rules (issue 14) are refused with the default implementer contract, and
// the ordinary forms of the same commands still run.
func TestCheckCommandExactArgv(t *testing.T) {
	p := defaults(t)
	impl := role(t, p, "implementer")
	tests := []struct {
		name string
		argv []string
		want string // refusal code, "" = allowed
	}{
		// make: attached values, bundles, long forms and abbreviations
		{"make -fFILE", []string{"make", "test", "-fevil.mk"}, "argument-not-allowed"},
		{"make -C/", []string{"make", "test", "-C/"}, "argument-not-allowed"},
		{"make -C /", []string{"make", "test", "-C", "/"}, "argument-not-allowed"},
		{"make -kfFILE bundle", []string{"make", "test", "-kfevil.mk"}, "argument-not-allowed"},
		{"make -sC/ bundle", []string{"make", "test", "-sC/"}, "argument-not-allowed"},
		{"make --file=FILE", []string{"make", "test", "--file=evil.mk"}, "argument-not-allowed"},
		{"make --makefile=FILE", []string{"make", "test", "--makefile=evil.mk"}, "argument-not-allowed"},
		{"make --directory=/", []string{"make", "test", "--directory=/"}, "argument-not-allowed"},
		{"make --dir=/ abbreviation", []string{"make", "test", "--dir=/"}, "argument-not-allowed"},
		{"make --fi abbreviation", []string{"make", "test", "--fi", "evil.mk"}, "argument-not-allowed"},
		{"make --eval", []string{"make", "test", "--eval=x:=1"}, "argument-not-allowed"},
		{"make -E", []string{"make", "test", "-E", "x:=1"}, "argument-not-allowed"},
		{"make --include-dir", []string{"make", "test", "--include-dir=/tmp"}, "argument-not-allowed"},
		{"make -I", []string{"make", "test", "-I/tmp"}, "argument-not-allowed"},
		{"make -o FILE", []string{"make", "test", "-oMakefile"}, "argument-not-allowed"},
		// make: variable assignments (SHELL=, .SHELLFLAGS=, any override)
		{"make SHELL=", []string{"make", "test", "SHELL=/tmp/evil"}, "argument-not-allowed"},
		{"make .SHELLFLAGS=", []string{"make", "test", ".SHELLFLAGS=-c touch /x;"}, "argument-not-allowed"},
		{"make SHELL:=", []string{"make", "test", "SHELL:=/tmp/evil"}, "argument-not-allowed"},
		{"make MAKE+=", []string{"make", "test", "MAKE+=x"}, "argument-not-allowed"},
		{"make CC?=", []string{"make", "test", "CC?=x"}, "argument-not-allowed"},
		{"make assignment after --", []string{"make", "test", "--", "SHELL=/tmp/evil"}, "argument-not-allowed"},
		{"make plain", []string{"make", "test"}, ""},
		{"make -j4 -k", []string{"make", "test", "-j4", "-k"}, ""},
		{"make -j 2 --keep-going", []string{"make", "test", "-j", "2", "--keep-going"}, ""},
		{"make lint -s", []string{"make", "lint", "-s"}, ""},
		// npm: every option is a config setting
		{"npm --script-shell=", []string{"npm", "test", "--script-shell=/tmp/evil"}, "argument-not-allowed"},
		{"npm --script-shell PROG", []string{"npm", "test", "--script-shell", "/tmp/evil"}, "argument-not-allowed"},
		{"npm --userconfig", []string{"npm", "test", "--userconfig=/tmp/npmrc"}, "argument-not-allowed"},
		{"npm --node-options", []string{"npm", "test", "--node-options=--require=/tmp/x.js"}, "argument-not-allowed"},
		{"npm -C prefix", []string{"npm", "test", "-C", "/"}, "argument-not-allowed"},
		{"npm --prefix", []string{"npm", "test", "--prefix=/"}, "argument-not-allowed"},
		{"npm plain", []string{"npm", "test"}, ""},
		{"npm args for the test script", []string{"npm", "test", "--", "--watch=false", "-t", "x"}, ""},
		// go: the flags that run programs, in every spelling
		{"go -exec", []string{"go", "test", "-exec=/bin/sh"}, "argument-not-allowed"},
		{"go --toolexec", []string{"go", "build", "--toolexec", "x"}, "argument-not-allowed"},
		{"go -vettool", []string{"go", "vet", "-vettool=/tmp/x"}, "argument-not-allowed"},
		{"go -ldflags=-extld", []string{"go", "build", "-ldflags=-linkmode=external -extld=/tmp/evil"}, "argument-not-allowed"},
		{"go -ldflags -extld", []string{"go", "test", "-ldflags", "-extld /tmp/evil"}, "argument-not-allowed"},
		{"go -ldflags=all=-extld", []string{"go", "test", "-ldflags=all=-extld=/tmp/evil"}, "argument-not-allowed"},
		{"go -ldflags -extldflags", []string{"go", "build", "-ldflags=-linkmode=external -extldflags=-B/tmp/evil"}, "argument-not-allowed"},
		{"go -modfile", []string{"go", "test", "-modfile=/tmp/go.mod"}, "argument-not-allowed"},
		{"go -overlay", []string{"go", "test", "-overlay=/tmp/o.json"}, "argument-not-allowed"},
		{"go -o", []string{"go", "build", "-o", "/tmp/x"}, "argument-not-allowed"},
		{"go test ordinary", []string{"go", "test", "-count=1", "-run", "TestCo", "-cover", "-coverprofile=c.out", "./..."}, ""},
		{"go test -p 1 -v", []string{"go", "test", "-p", "1", "-v", "./..."}, ""},
		{"go build -ldflags -X", []string{"go", "build", "-ldflags=-X main.v=1", "./..."}, ""},
		{"go vet ./...", []string{"go", "vet", "./..."}, ""},
		// cargo: --config sets any configuration key (build.rustc-wrapper)
		{"cargo --config", []string{"cargo", "test", "--config", "build.rustc-wrapper=\"/tmp/evil\""}, "argument-not-allowed"},
		{"cargo --config=", []string{"cargo", "test", "--config=build.rustc-wrapper=\"/tmp/evil\""}, "argument-not-allowed"},
		{"cargo -Z", []string{"cargo", "test", "-Zunstable-options"}, "argument-not-allowed"},
		{"cargo test ordinary", []string{"cargo", "test", "--release", "--", "--nocapture"}, ""},
		// pytest: plugins and another configuration
		{"pytest -p plugin", []string{"pytest", "-p", "evil"}, "argument-not-allowed"},
		{"pytest -pevil", []string{"pytest", "-pevil"}, "argument-not-allowed"},
		{"pytest -c", []string{"pytest", "-c", "/tmp/pytest.ini"}, "argument-not-allowed"},
		{"pytest --override-ini", []string{"pytest", "--override-ini=addopts=-p evil"}, "argument-not-allowed"},
		{"pytest -o", []string{"pytest", "-o", "addopts=-p evil"}, "argument-not-allowed"},
		{"pytest ordinary", []string{"pytest", "-q", "-x", "-k", "test_x", "tests/"}, ""},
		{"pytest --co is --collect-only", []string{"pytest", "--co"}, ""},
		{"pytest --conf abbreviates --config-file", []string{"pytest", "--conf=/tmp/x.ini"}, "argument-not-allowed"},
		{"pytest -rfE", []string{"pytest", "-rfE"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := refusalCode(t, impl.CheckCommand(tt.argv)); got != tt.want {
				t.Errorf("CheckCommand(%q) = %q, want %q", tt.argv, got, tt.want)
			}
		})
	}
}
