#!/usr/bin/env sh
# Thin entry point matching the protocol: scripts/run-task.sh run TASK.json [flags]
# (or resume RUN). Uses $CONDUCTOR when set (as land-work.sh does), else bin/conductor when
# built, else conductor on PATH.
set -eu
here="$(cd "$(dirname "$0")/.." && pwd)"
if [ -n "${CONDUCTOR:-}" ]; then
  exec "$CONDUCTOR" run-task "$@"
fi
if [ -x "$here/bin/conductor" ]; then
  exec "$here/bin/conductor" run-task "$@"
fi
exec conductor run-task "$@"
