#!/bin/sh
# scripts/bench.sh — `make bench` (and `make bench-short`): one table of
# ratios against the git CLI floor, measured in one run on a repository the
# bench generates itself. docs/bench.md explains every row.
#
#   ./scripts/bench.sh                          full size: 10,000 files in 2,000 folders (minutes)
#   CONDUCTOR_BENCH_SHORT=1 ./scripts/bench.sh  small sizes, proves the bench still runs (CI)
#   CONDUCTOR_BENCH_ONLY=prep,land ./scripts/bench.sh   some rows only
#   BENCH_OUT=bench.md ./scripts/bench.sh       also keep the table in a file
#
# Numbers are printed, never asserted; the exit status is non-zero only when
# a row could not be measured.
set -eu
cd "$(dirname "$0")/.."
GO=${GO:-go}
BIN=${BIN:-bin/conductor}
mkdir -p "$(dirname "$BIN")"
# Build the binary being timed (make bench already did; bench-short did not).
"$GO" build -ldflags "-X main.version=$(git describe --always --dirty 2>/dev/null || echo dev)" -o "$BIN" ./cmd/conductor
driver=$(mktemp -d "${TMPDIR:-/tmp}/conductor-bench-driver.XXXXXX")
trap 'rm -rf "$driver"' EXIT INT TERM
"$GO" build -o "$driver/bench" ./scripts/bench
if [ -n "${BENCH_OUT:-}" ]; then
	"$driver/bench" -bin "$BIN" "$@" | tee "$BENCH_OUT"
else
	"$driver/bench" -bin "$BIN" "$@"
fi
