#!/usr/bin/env bash
# README's test command: installs dependencies, builds with tests and runs
# the whole CTest suite.  BUILD_DIR and extra CMake flags can be overridden:
#   BUILD_DIR=build-asan CMAKE_EXTRA="-DTENT_SANITIZE=address,undefined" scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
BUILD_DIR=${BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} \
  -DBUILD_UNIT_TESTS=ON ${CMAKE_EXTRA:-} >/dev/null
cmake --build "$BUILD_DIR" --parallel "$(nproc)"
# Every test but the perf-labelled guard (tebench_perf_test, timing-
# sensitive: run it on a quiet machine with  ctest --test-dir build -L perf),
# as many at once as the machine has CPUs (JOBS overrides).  Labels select
# a kind: ctest --test-dir build -L unit (see cmake/TentTestLabels.cmake).
ctest --test-dir "$BUILD_DIR" --output-on-failure --no-tests=error --timeout 300 \
  -j "${JOBS:-$(nproc)}" -LE perf
