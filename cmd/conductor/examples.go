package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// examples are the EXAMPLES sections of the help pages, by command path
// (without "conductor"). Every command has one (TestEveryCommandHasExamples);
// the app's own page lists the main flow.
var examples = map[string][]string{
	"": {
		"conductor run-task run task.json --model ollama-qwen        # a worker: worktree, tool loop, run record",
		"conductor review RUN --approve --raise main                # checks + gate; a verdict and a merge decision",
		"conductor decision resolve DECISION --option merge --by me # a person says yes",
		"conductor land DECISION --dry-run && conductor land DECISION",
		"conductor push main                                        # publishing is a separate act",
	},
	"patch-id": {
		"git diff HEAD~1 | conductor patch-id",
		"git log -p | conductor patch-id --stable",
	},
	"extract": {
		"conductor extract --repo . --worktree ../wt --base main -o out.diff",
	},
	"run-task": {
		"conductor run-task run task.json",
		"conductor run-task resume RUN",
	},
	"run-task run": {
		"conductor run-task run task.json --model vllm --progress",
		"conductor run-task run task.json --model replay:testdata/models/demo.json   # offline",
		"conductor run-task run task.json --follow-up 'also cover the empty input'     # a refinement round",
		"conductor run-task run task.json --json | jq -c 'select(.event==\"tool\")'",
	},
	"run-task resume": {
		"conductor run-task resume r-20260101T000000Z-1a2b3c4d",
		"conductor run-task resume RUN --accept-drift --model ollama-qwen",
	},
	"runs": {
		"conductor runs list --status running",
		"conductor runs show RUN",
	},
	"runs list": {
		"conductor runs list",
		"conductor runs list --task t-worker-fix --status failed --json",
	},
	"runs reconcile": {
		"conductor runs reconcile          # store rows left running by a crash, repaired from the run folders",
	},
	"queue": {
		"conductor queue dead list",
		"conductor queue dead retry JOB",
	},
	"queue dead": {
		"conductor queue dead list --json",
		"conductor queue dead retry JOB",
		"conductor queue dead drop JOB",
	},
	"queue dead list": {
		"conductor queue dead list",
		"REDIS_URL=redis://queue:6379/0 conductor queue dead list --json",
	},
	"queue dead retry": {
		"conductor queue dead retry JOB    # back on the queue, attempts reset",
	},
	"queue dead drop": {
		"conductor queue dead drop JOB",
	},
	"runs show": {
		"conductor runs show RUN",
		"conductor runs show RUN --transcript",
		"conductor runs show RUN --transcript --follow   # a live run, until it ends",
		"conductor runs show RUN --json",
	},
	"review": {
		"conductor review RUN",
		"conductor review RUN --approve --raise main",
		"conductor review RUN --request-changes 'the test still fails' --redispatch",
	},
	"decision": {
		"conductor decision list --open",
		"conductor decision resolve DECISION --option merge --by alice",
	},
	"decision raise": {
		"conductor decision raise --work-ref work/t-worker-fix --commit work/t-worker-fix --target main --run RUN",
	},
	"decision resolve": {
		"conductor decision resolve DECISION --option merge --by alice",
		"conductor decision resolve DECISION --option reject --by alice",
	},
	"decision show": {
		"conductor decision show DECISION",
		"conductor decision show DECISION --json",
	},
	"decision list": {
		"conductor decision list --open",
		"conductor decision list --json",
	},
	"land": {
		"conductor land DECISION --dry-run",
		"conductor land DECISION --preview",
		"conductor land DECISION",
		"conductor land DECISION --close-issue 42",
	},
	"record": {
		"conductor record DECISION",
		"conductor record --repo ~/src/app 1a2b3c4d5e6f --json",
		"conductor land DECISION --record",
	},
	"audit": {
		"conductor audit --repo ~/src/app main",
		"conductor audit --repo . HEAD~3 --json",
	},
	"policy": {
		"conductor policy check .",
		"conductor policy show implementer",
	},
	"policy check": {
		"conductor policy check",
		"conductor policy check ~/src/app",
	},
	"policy show": {
		"conductor policy show",
		"conductor policy show conductor-policy",
	},
	"pr": {
		"conductor pr open RUN",
	},
	"pr open": {
		"conductor pr open RUN",
		"conductor pr open work/t-worker-fix --title 'Fix Clamp'",
	},
	"push": {
		"conductor push main          # inside the repository, or: conductor push -C ~/src/app main",
	},
	"enqueue": {
		"conductor enqueue task.json",
		"REDIS_URL=redis://queue:6379/0 conductor enqueue task.json --json",
	},
	"worker": {
		"conductor worker --once                     # from cron: the embedded queue",
		"REDIS_URL=redis://queue:6379/0 conductor worker --concurrency 4",
	},
	"note": {
		"conductor note RUN 'use the existing helper in mathx, do not add a new one'",
	},
	"doctor": {
		"conductor doctor",
		"conductor doctor --sandbox bwrap --json",
		"conductor doctor --config                  # every knob, its value and where it came from",
	},
	"pool": {
		"conductor pool status",
		"conductor pool prune --all",
	},
	"pool status": {
		"conductor pool status --json",
	},
	"pool prune": {
		"conductor pool prune",
		"conductor pool prune --all",
	},
	"version": {
		"conductor version",
		"conductor version --json",
	},
	"mcp": {
		"conductor mcp                                  # MCP over stdio, for an agent that starts it",
		"CONDUCTOR_MCP_TOKEN=$(cat ~/.config/conductor/mcp.token) conductor mcp --listen 127.0.0.1:8765",
	},
	"serve": {
		"conductor serve                                     # mission control on http://127.0.0.1:8377",
		"CONDUCTOR_SERVE_TOKEN=$(cat ~/.config/conductor/serve.token) conductor serve --operator alice",
		"conductor serve --listen 0.0.0.0:8377 --token-file /etc/conductor/operators   # elsewhere: tokens required",
	},
	"events": {
		"conductor events --run RUN",
		"conductor events --follow          # what every worker, review and landing does, live",
		"conductor events --run RUN --follow --until role_complete   # wait for a run to end",
		"conductor events --json | jq -c 'select(.kind==\"role_complete\")'",
	},
	"sandbox": {
		"conductor sandbox image build",
	},
	"sandbox image": {
		"conductor sandbox image build",
	},
	"sandbox image build": {
		"conductor sandbox image build                 # the scratch image, before the first docker job",
		"CONDUCTOR_DOCKER_IMAGE=my/toolchain:1 conductor sandbox image build   # check an operator image",
	},
	"cache": {
		"conductor cache warm .                        # the repository's HEAD: gates start warm",
	},
	"cache warm": {
		"conductor cache warm ~/src/app --ref main     # the landing target's tip (land refreshes it after each landing)",
		"CONDUCTOR_GO_CACHE=/srv/conductor/go-warm conductor cache warm . --json",
	},
	"completion": {
		"source <(conductor completion bash)",
		"conductor completion zsh > \"${fpath[1]}/_conductor\"",
		"conductor completion fish > ~/.config/fish/completions/conductor.fish",
	},
}

// examplesHelp is the EXAMPLES section of the command at path ("" for the
// app), "" when it has none.
func examplesHelp(path string) string {
	ex := examples[path]
	if len(ex) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nEXAMPLES:\n")
	for _, e := range ex {
		b.WriteString("   ")
		// The help template is a text/template: braces are its own.
		b.WriteString(strings.NewReplacer("{{", "{{`{{`}}", "}}", "{{`}}`}}").Replace(e))
		b.WriteString("\n")
	}
	return b.String()
}

// commandPath is cmd's path below the app ("runs list").
func commandPath(parent string, cmd *cli.Command) string {
	return strings.TrimSpace(strings.TrimPrefix(parent+" "+cmd.Name, "conductor"))
}
