#!/usr/bin/env bash
# README's main job: builds (Release) and runs tebench in loopback on this
# machine - no NPU, no network beyond 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
BUILD_DIR=${BUILD_DIR:-build-demo}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --parallel "$(nproc)"
# tebench --loopback: a target and an initiator process on 127.0.0.1; the
# transport is memfabric over the host-memory libmf_smem.so (mf_host) when it
# was built, else tcp.  --baseline prints each bandwidth as a ratio of the
# memcpy and raw-socket ceilings measured in the same run.  Extra arguments
# are passed on (e.g. --xport_type=tcp, --duration=5).
exec "$BUILD_DIR/mooncake-transfer-engine/tent/bench/tebench" --loopback --baseline \
  --check_consistency --total_buffer_size=64M --block_size=4K:4M:4 --duration=2 "$@"
