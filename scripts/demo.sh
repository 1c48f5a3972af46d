#!/usr/bin/env bash
# The product end to end, offline: a throwaway repository with a failing
# test, warm gate caches, a worker task run against a replayed model (no
# network), review with the policy checks and the gate, a merge decision, a
# landing preview while it is open, the landing, the audit of the landed
# commit and its record, the seed orchestrator's role_dispatch job from the
# embedded queue, (with pi installed) the pi agent as the worker, and an
# agent outside conductor claiming and completing a task through MCP.
# Everything lives in a fresh folder under /tmp, linked as demo-out.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/bin/conductor"
(cd "$root" && go build -o bin/conductor ./cmd/conductor)
# The data root lives in a fresh folder under /tmp: the sandbox's
# unprivileged uid must be able to reach the worktrees, which a checkout
# under a private home (/root) would not allow. demo-out points at it.
out="$(mktemp -d "${TMPDIR:-/tmp}/conductor-demo.XXXXXX")"
chmod 755 "$out"
rm -rf "$root/demo-out"
ln -s "$out" "$root/demo-out"
export CONDUCTOR_HOME="$out/.conductor"
unset DATABASE_URL REDIS_URL
export GIT_AUTHOR_NAME="Demo Operator" GIT_AUTHOR_EMAIL="operator@demo.invalid"
export GIT_COMMITTER_NAME="Demo Operator" GIT_COMMITTER_EMAIL="operator@demo.invalid"
# A secret in the conductor's environment: the worker must never see it.
export OPENAI_API_KEY="sk-demo-never-reaches-the-worker"

# Bold headings on a terminal only; the echoed commands can be pasted.
if [ -t 2 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain" >&2; }
run() { { printf '$'; printf ' %q' "$@"; printf '\n'; } >&2; "$@"; }

say "a throwaway repository: a Go package whose test fails"
repo="$out/demo"
mkdir -p "$repo"
cp -R "$root/testdata/models/demo-repo/." "$repo/"
git -C "$repo" init -q -b main
git -C "$repo" add -A
git -C "$repo" commit -qm "mathx: Clamp, Abs and their tests"
(cd "$repo" && go test ./... >/dev/null 2>&1) && { echo "demo repo test unexpectedly passes" >&2; exit 1; } || true
echo "repo: $repo (go test fails: Clamp returns lo above the upper bound)" >&2

sandbox=auto
if ! "$bin" doctor >"$out/doctor.txt" 2>&1; then
  echo "warning: no working sandbox here (conductor doctor says why, below); the demo runs the worker," >&2
  echo "         the checks and the gate UNSANDBOXED (--sandbox none). Install bubblewrap: apt-get install -y bubblewrap" >&2
  sed 's/^/    /' "$out/doctor.txt" >&2
  sandbox=none
fi

say "0. warm the Go caches the sandboxed commands start from: the landed tip only (never a worker's tree), compiled in the sandbox"
run "$bin" cache warm "$repo" >&2 || echo "(no warm cache here: every gate starts cold; conductor doctor says why)" >&2

say "1. dispatch: the worker runs the task against a replayed model"
run "$bin" run-task run "$root/testdata/demo/task.json" --repo "$repo" \
  --model "replay:$root/testdata/models/demo.json" --sandbox "$sandbox" --progress | tee "$out/run.txt"
runid="$(sed -n 's/^run \(r-[^ ]*\) .*/\1/p' "$out/run.txt" | head -n1)"
[ -n "$runid" ] || { echo "no run id in run-task output" >&2; exit 1; }
say "the transcript: each model turn, tool call and result (folded), with the usage"
run "$bin" runs show "$runid" --transcript

say "2. the worker's whole output: one diff with its patch-id"
cat "$CONDUCTOR_HOME/runs/$runid/patch.diff"

say "3. review: policy checks, syntax checks and the gate; approve and raise a merge decision"
run "$bin" review "$runid" --approve --raise main --sandbox "$sandbox" | tee "$out/review.txt"
decision="$(sed -n 's/^decision[: ]*\(d-[A-Za-z0-9]*\).*/\1/p' "$out/review.txt" | tail -n1)"
[ -n "$decision" ] || decision="$("$bin" decision list --open --json | sed -n 's/.*"id": *"\(d-[^"]*\)".*/\1/p' | head -n1)"

say "4. land: a preview while the decision is open (the dry run: changes nothing), the person's decision, then for real"
run "$bin" land "$decision" --preview --sandbox "$sandbox"
run "$bin" decision resolve "$decision" --option merge --by "demo operator"
before="$(git -C "$repo" rev-parse main)"
run "$bin" land "$decision" --sandbox "$sandbox"
after="$(git -C "$repo" rev-parse main)"

say "5. the landed commit: what landed in words, the trailers, and the receipt git alone can verify"
git -C "$repo" log --format='%h %s%n%n%b' -1 "$after"
run "$bin" audit --repo "$repo" "$after"
say "the Record step: a build-log line and a status section, outside the repository (the policy's default)"
run "$bin" record "$decision"
(cd "$repo" && git checkout -q -f main && go test ./...) >&2

say "6. the seed orchestrator's own job, from the queue: role prompt and brief from the repository at its base commit"
# The orchestrator pushes role_dispatch jobs; conductor takes them as they
# are. The role prompt is .cursor/agents/role-doc-writer.md and the brief
# .convoys/clamp.md, both read from the commit (never from a working tree).
mkdir -p "$repo/.cursor/agents" "$repo/.convoys"
printf 'You document this repository for its users: short, exact, no marketing.\n' > "$repo/.cursor/agents/role-doc-writer.md"
printf 'Document Clamp in docs/clamp.md: what it returns below, inside and above the range.\n' > "$repo/.convoys/clamp.md"
git -C "$repo" add .cursor .convoys
git -C "$repo" commit -qm "convoy: a brief for the doc writer"
cat > "$out/job.json" <<JOB
{"type":"role_dispatch","roleId":"role-doc-writer","briefPath":".convoys/clamp.md","harnessAlias":"doc-writer","workspace":"demo","runId":"r-demo-docs-1"}
JOB
run "$bin" enqueue "$out/job.json"
WORKER_REPO_ROOT="$out" run "$bin" worker --once --model "replay:$root/testdata/models/demo-job.json" --sandbox "$sandbox" --wait 1 | tee "$out/worker.txt"
grep -q '"status": *"succeeded"' "$out/worker.txt" || { echo "the queued job did not succeed" >&2; exit 1; }
say "the run's record: harness alias, model, tokens, checkpoints; its lifecycle events; its diff"
run "$bin" runs show r-demo-docs-1
run "$bin" events --run r-demo-docs-1
cat "$CONDUCTOR_HOME/runs/r-demo-docs-1/patch.diff"

say "7. another runtime, the same protocol: the real pi coding agent as the worker"
export CONDUCTOR_PI_DIR="${CONDUCTOR_PI_DIR:-/opt/conductor/pi}"
if [ "$sandbox" != none ] && "$bin" doctor --json 2>/dev/null | tr -d ' \n' | grep -q '"name":"pi","works":true'; then
  echo "pi runs inside the same sandbox as the unprivileged uid, with no network; it reaches the model only" >&2
  echo "through the run's model proxy, which holds the key and counts the tokens (here it answers from a replay)." >&2
  run "$bin" run-task run "$root/testdata/demo/task-pi.json" --repo "$repo" \
    --model "replay:$root/testdata/models/demo-pi.json" --sandbox "$sandbox" --progress | tee "$out/run-pi.txt"
  piid="$(sed -n 's/^run \(r-[^ ]*\) .*/\1/p' "$out/run-pi.txt" | head -n1)"
  [ -n "$piid" ] || { echo "no run id in the pi run's output" >&2; exit 1; }
  run "$bin" runs show "$piid" --transcript --lines 1
  cat "$CONDUCTOR_HOME/runs/$piid/patch.diff"
  echo "(the same review and landing take this diff; pi's own events are in runs/$piid/pi-events.jsonl)" >&2
else
  echo "skipped: pi is not installed here (make pi), or there is no bwrap sandbox; conductor doctor says which" >&2
fi

say "8. an agent outside conductor takes a task through MCP (conductor mcp, JSON-RPC on stdio): claim, work, complete"
# Any MCP client can do this (an IDE agent, Claude Code, Cursor); here it is
# a shell script. The claim gives a run id and a lease token; the completion
# hands in the outcome, the model alias, the token totals and the patch.
mkdir -p "$CONDUCTOR_HOME/backlog"
cat > "$CONDUCTOR_HOME/backlog/t-outside-abs-doc.json" <<'TASK'
{"taskVersion":1,"id":"t-outside-abs-doc","prompt":"Goal: document mathx.Abs in README.md.","workspace":"demo","capabilities":{"tools":["read","write"]},"session":"outside-agent","timeoutSeconds":600}
TASK
mcp() { # mcp TOOL ARGS_JSON: one tools/call in a fresh session; prints the tool's text answer
  printf '%s\n' \
    '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"demo-agent","version":"1"}}}' \
    '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"$1\",\"arguments\":$2}}" |
    WORKER_REPO_ROOT="$out" "$bin" mcp 2>/dev/null | grep '"id":2' | sed 's/.*"text":"\(\([^"\\]\|\\.\)*\)".*/\1/' | sed 's/\\n/\n/g; s/\\"/"/g'
}
echo '$ conductor mcp   <<< claim_task {"taskId":"t-outside-abs-doc","agent":"demo-agent"}' >&2
mcp claim_task '{"taskId":"t-outside-abs-doc","agent":"demo-agent"}' | tee "$out/claim.json"
mrun="$(sed -n 's/.*"runId": *"\([^"]*\)".*/\1/p' "$out/claim.json" | head -n1)"
lease="$(sed -n 's/.*"leaseToken": *"\([^"]*\)".*/\1/p' "$out/claim.json" | head -n1)"
mbase="$(sed -n 's/.*"baseCommit": *"\([^"]*\)".*/\1/p' "$out/claim.json" | head -n1)"
[ -n "$mrun" ] && [ -n "$lease" ] && [ -n "$mbase" ] || { echo "the claim gave no run id, lease token or base commit" >&2; exit 1; }
echo "the agent works on the claim's base commit ${mbase:0:12}, in its own clone, and hands in one diff" >&2
git clone -q "$repo" "$out/agent-clone"
git -C "$out/agent-clone" checkout -q "$mbase"
printf '\nmathx.Abs returns the absolute value of an int.\n' >> "$out/agent-clone/README.md"
patch="$(git -C "$out/agent-clone" diff | awk '{gsub(/\\/,"\\\\"); gsub(/"/,"\\\""); gsub(/\t/,"\\t"); printf "%s\\n", $0}')"
echo '$ conductor mcp   <<< complete_task {"runId":"'"$mrun"'","leaseToken":"…","outcome":"succeeded","modelAlias":"demo-agent-model",…,"patch":"…"}' >&2
mcp complete_task "{\"runId\":\"$mrun\",\"leaseToken\":\"$lease\",\"outcome\":\"succeeded\",\"modelAlias\":\"demo-agent-model\",\"promptTokens\":1200,\"completionTokens\":80,\"totalTokens\":1280,\"summary\":\"README documents Abs\",\"patch\":\"$patch\"}" | tee "$out/complete.json"
grep -q '"patchId"' "$out/complete.json" || { echo "the completion was not recorded" >&2; exit 1; }
run "$bin" runs show "$mrun"
run "$bin" events --run "$mrun"
echo "the same review takes it (and landing after a decision): the work commit is made from the base and the patch" >&2
run "$bin" review "$mrun" --sandbox "$sandbox" | tail -n 12

say "done: main moved ${before:0:12} -> ${after:0:12}; the record of every step is under $CONDUCTOR_HOME"
