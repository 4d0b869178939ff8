#!/usr/bin/env bash
# The whole CTest suite of a build directory, as README's test command
# (scripts/test.sh) and scripts/busy_test.sh run it:
#   scripts/run_ctest.sh [BUILD_DIR]      (JOBS overrides the parallelism)
set -euo pipefail
BUILD_DIR=${1:-build}
# Every test but the perf-labelled guard (tebench_perf_test, timing-
# sensitive: run it on a quiet machine with  ctest --test-dir build -L perf).
# Most tests wait (on peers, timeouts, servers), so more of them run at once
# than the machine has CPUs (JOBS, default 3 per CPU).  Those with bounds on
# time that a crowded machine can miss (label timing) run beside them in a
# ctest of their own, at most one per CPU, at a higher priority (nice -5,
# where permitted: root) so that they get the CPU when they want it.  The
# rest keep the usual priority: below it, work outside the suite would
# starve them past their timeouts.
# Labels select a kind: ctest --test-dir build -L unit
# (see cmake/TentTestLabels.cmake).
# TIMED_APART=0 runs everything in one ctest at JOBS, at the usual
# priority (CI's sanitized leg: there a reniced timed test starved the rest).
NPROC=$(nproc)
JOBS=${JOBS:-$((3 * NPROC))}
CTEST=(ctest --output-on-failure --timeout 300)
if [ "${TIMED_APART:-1}" = 0 ]; then
  exec "${CTEST[@]}" --test-dir "$BUILD_DIR" --no-tests=error -j "$JOBS" -LE perf
fi
# the timed ctest keeps its own Testing/ (logs, --rerun-failed) in a
# directory of its own that includes the build's tests
TIMED_DIR="$BUILD_DIR/ctest-timing"
mkdir -p "$TIMED_DIR"
echo "subdirs(\"$(cd "$BUILD_DIR" && pwd)\")" >"$TIMED_DIR/CTestTestfile.cmake"
UP=()
if [ "$(id -u)" -eq 0 ]; then UP=(nice -n -5); fi
"${UP[@]}" "${CTEST[@]}" --test-dir "$TIMED_DIR" -j "$NPROC" -L timing -LE perf \
  >"$TIMED_DIR/ctest.out" 2>&1 &
timed=$!
trap 'kill "$timed" 2>/dev/null || true' EXIT
rc=0
"${CTEST[@]}" --test-dir "$BUILD_DIR" --no-tests=error -j "$JOBS" \
  -LE 'perf|timing' || rc=$?
trc=0
wait "$timed" || trc=$?
echo "== the tests with bounds on time (label timing, $TIMED_DIR/Testing):"
cat "$TIMED_DIR/ctest.out"
[ "$rc" -eq 0 ] && [ "$trc" -eq 0 ]
