#!/usr/bin/env bash
# README's main job: builds (Release) and runs the loopback demo on this
# machine - no NPU, no network beyond 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
BUILD_DIR=${BUILD_DIR:-build-demo}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --parallel "$(nproc)"
exec "$BUILD_DIR/mooncake-transfer-engine/tent/examples/tent_example_copy" "$@"
