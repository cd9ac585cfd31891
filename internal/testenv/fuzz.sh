#!/usr/bin/env bash
# fuzz.sh — runs every fuzz target of orderexpiry for a fixed number of executions:
#
#   bash internal/testenv/fuzz.sh                 # the budgets below (≈ 35 s on this idle 2-core machine)
#   OE_FUZZTIME=60s bash internal/testenv/fuzz.sh # every target for a duration instead
#
# Budgets are execution counts (-fuzztime Nx), not durations: with a duration, go1.26's fuzz
# coordinator can report "context deadline exceeded" as a failure when the time runs out while
# a worker is busy (golang/go#75804, fixed in go1.27), which failed CI once with no crasher.
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
# target package budget
TARGETS=(
	"FuzzParse ./levels 60000x"
	"FuzzDecodeMessage ./expiry 300000x"
	"FuzzValidateID ./expiry 100000x"
)

status=0
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for entry in "${TARGETS[@]}"; do
	read -r target pkg budget <<<"$entry"
	if go test -run '^$' -fuzz "^${target}\$" -fuzztime "${OE_FUZZTIME:-$budget}" "$pkg" >"$log" 2>&1; then
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
