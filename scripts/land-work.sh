#!/bin/sh
# land-work.sh DECISION [--dry-run]: land a resolved merge decision as one
# gated local commit (see `conductor land --help` and docs/refusals.md).
# Exit status: 0 landed (or already landed), 1 error, 2 usage, 3 refused.
set -eu
if [ $# -lt 1 ] || [ $# -gt 2 ] || { [ $# -eq 2 ] && [ "$2" != "--dry-run" ]; }; then
	echo "usage: land-work.sh DECISION [--dry-run]" >&2
	exit 2
fi
exec "${CONDUCTOR:-conductor}" land "$@"
