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
# Every test but the perf-labelled guard, several at once
# (scripts/run_ctest.sh says how; JOBS overrides).
scripts/run_ctest.sh "$BUILD_DIR"
