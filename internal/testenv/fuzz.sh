#!/usr/bin/env bash
# fuzz.sh — runs every fuzz target of orderexpiry for a short time:
#
#   bash internal/testenv/fuzz.sh            # 8s per target
#   OE_FUZZTIME=30s bash internal/testenv/fuzz.sh
#
# For each target it prints one line with the executions go's fuzzer reported
# (the last "fuzz: elapsed: …, execs: N" line of its output):
#
#   FIGURE fuzz FuzzParse execs=123456
#
# A target that fails prints its output to stderr and "FIGURE fuzz <target> FAILED execs=N", the
# other targets still run, and the script exits 1. go test keeps the failing input under
# the package's testdata/fuzz/<target>/ so that plain go test replays it from then on.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
FUZZTIME="${OE_FUZZTIME:-8s}"

# target package
TARGETS=(
	"FuzzParse ./levels"
	"FuzzDecodeMessage ./expiry"
	"FuzzValidateID ./expiry"
)

status=0
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for entry in "${TARGETS[@]}"; do
	read -r target pkg <<<"$entry"
	if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" >"$log" 2>&1; then
		execs="$(grep -o 'execs: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$' || true)"
		if [[ -z $execs ]]; then
			cat "$log" >&2
			echo "FIGURE fuzz $target FAILED (no execution count in go's output)"
			status=1
			continue
		fi
		echo "FIGURE fuzz $target execs=$execs"
	else
		cat "$log" >&2
		execs="$(grep -o 'execs: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$' || true)"
		echo "FIGURE fuzz $target FAILED execs=${execs:-0}"
		status=1
	fi
done
exit "$status"
