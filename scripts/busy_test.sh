#!/usr/bin/env bash
# README's test command on a busy machine: runs the suite RUNS times (5),
# as scripts/run_ctest.sh does, from an existing build with BUSY (2)
# CPU-bound loops beside it, and prints one line per run and the count
# that passed.
#   [RUNS=5] [BUSY=2] [BUILD_DIR=build] scripts/busy_test.sh
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5} BUSY=${BUSY:-2} BUILD_DIR=${BUILD_DIR:-build}
pids=()
for ((i = 0; i < BUSY; i++)); do
    (while :; do :; done) &
    pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
passed=0
for ((r = 1; r <= RUNS; r++)); do
    log=$(mktemp "${TMPDIR:-/tmp}/tent_busy_run$r.XXXXXX")
    t0=$(date +%s)
    if scripts/run_ctest.sh "$BUILD_DIR" >"$log" 2>&1; then
        passed=$((passed + 1))
        echo "run $r: passed in $(($(date +%s) - t0)) s ($(grep -E 'tests passed' "$log" | paste -sd ';'))"
        rm -f "$log"
    else
        echo "run $r: FAILED in $(($(date +%s) - t0)) s: $(grep -E 'tests passed|tests failed' "$log" | paste -sd ';'); log $log"
        grep -E '^\s+[0-9]+ - ' "$log" | sed 's/^/    /'
    fi
done
echo "busy_test: $passed of $RUNS runs passed with $BUSY busy loops beside the suite"
[ "$passed" = "$RUNS" ]
