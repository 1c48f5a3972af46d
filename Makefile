# conductor — build, test, bench, demo. `make help` lists the targets.
GO      ?= go
BIN     ?= bin/conductor
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
FUZZTIME ?= 10s
# A package's whole run may take this long before go test stops it with
# every goroutine's stack: a hang detector, not a speed limit (the slowest
# package takes ~5 min on 2 quiet cores; CI allows 90 min in all).
TEST_TIMEOUT ?= 45m

PI_DIR  ?= /opt/conductor/pi
PI_VERSION := 0.73.1
STATICCHECK := v0.8.2

.PHONY: build test test-short escape-load fuzz bench bench-short demo lint soak soak-queue pi man screenshots help

build: ## build bin/conductor
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/conductor

test: ## lint, run every test (real git, redis-server, PostgreSQL, bubblewrap, Gitea, pi, Chromium), short fuzz and bench smoke runs
	$(MAKE) --no-print-directory lint
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(MAKE) --no-print-directory escape-load
	$(MAKE) --no-print-directory fuzz FUZZTIME=20000x
	$(MAKE) --no-print-directory bench-short

ESCAPE_RUN ?= ^TestEscape
escape-load: ## the escape suites again with GOMAXPROCS=1 beside a CPU hog: a slow machine must not make them fail
	@set -e; sh -c 'while :; do :; done' & hog=$$!; \
	trap 'kill $$hog' EXIT; \
	$(GO) test -count=1 -cpu 1 -timeout $(TEST_TIMEOUT) -run '$(ESCAPE_RUN)' ./runtask

test-short: ## unit tests only, skipping the slow ones
	$(GO) test -short ./...

fuzz: ## run every fuzz target for FUZZTIME (default 10s; `make test` uses 20000x: an execution count has no deadline to race, go.dev/issue/75804)
	@set -e; $(GO) list -f '{{.ImportPath}} {{.Dir}}' ./... | while read -r pkg dir; do \
	  for fz in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$dir"/*_test.go 2>/dev/null); do \
	    echo "fuzz $$pkg $$fz"; \
	    $(GO) test -run '^$$' -fuzz "^$$fz$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

bench: build ## benchmarks against the git CLI floor, printed as ratios (big generated repositories; minutes)
	./scripts/bench.sh

bench-short: ## the benchmarks in a short mode, to prove they still run
	CONDUCTOR_BENCH_SHORT=1 ./scripts/bench.sh

demo: build ## run a real task end to end offline: worktree, replayed model, tools, review, land
	./scripts/demo.sh

soak: ## long kill-and-resume trials (100 runs)
	CONDUCTOR_SOAK=100 $(GO) test -count=1 -run Soak -timeout 60m ./...

pi: ## install the pi coding agent for tasks with "runtime": "pi" (npm, into PI_DIR=/opt/conductor/pi; then export CONDUCTOR_PI_DIR=$(PI_DIR))
	npm install --prefix "$(PI_DIR)" --no-audit --no-fund --loglevel=error @mariozechner/pi-coding-agent@$(PI_VERSION)
	chmod -R a+rX "$(PI_DIR)"
	@echo "pi $(PI_VERSION) installed in $(PI_DIR): export CONDUCTOR_PI_DIR=$(PI_DIR)"

man: build ## write the conductor(1) man page to docs/man/conductor.1
	mkdir -p docs/man
	$(BIN) man > docs/man/conductor.1

QUEUE_TRIALS ?= 20
QUEUE_FAULTS := TestWorkersSurvivePostgresOutage|TestEmbeddedQueueReclaimsKilledWorkersJobs|TestWorkerSurvivesRedisRestart|TestWorkersRedisKillAndResume|TestConsumerSurvivesRedisRestart|TestConsumerInfraErrorsAreNotAttempts|TestRedisZombieCannotFinishReapedJob|TestEmbeddedLeaseReclaim

soak-queue: ## queue fault trials (QUEUE_TRIALS=20 each): PostgreSQL and Redis stopped, workers killed, at random moments
	$(GO) test -count=$(QUEUE_TRIALS) -p 1 -run '^($(QUEUE_FAULTS))$$' -timeout 120m ./conductor/queue ./cmd/conductor

screenshots: ## drive mission control (conductor serve) in headless Chromium and write its screenshots to docs/img/
	mkdir -p docs/img
	CONDUCTOR_SCREENSHOTS=$(CURDIR)/docs/img $(GO) test -count=1 -run '^TestBrowser$$' -timeout 5m ./conductor/web

lint: ## gofmt, go vet and staticcheck (part of make test)
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || (echo "gofmt: files above need formatting" >&2; exit 1)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK) ./...

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  %-12s %s\n", $$1, $$2}'
