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
# was built, else tcp.  --baseline prints each figure next to ceilings
# measured in the same run: memcpy and raw-socket bandwidth (BW/Memcpy,
# BW/Socket) and a C request/response ping-pong of one block (PP/AvgTx).
# First KV-cache-sized blocks in batches of 32, then one batch-1 latency row;
# --check_consistency verifies every byte.  Extra arguments are passed on to
# both runs (e.g. --xport_type=tcp, --duration=5).
TEBENCH="$BUILD_DIR/mooncake-transfer-engine/tent/bench/tebench"
"$TEBENCH" --loopback --baseline --check_consistency --total_buffer_size=128M \
  --block_size=16K:4M:4 --batch_size=32 --duration=2 "$@"
echo
echo "batch-1 latency (PP/AvgTx: a C ping-pong of the same block / Avg Tx):"
exec "$TEBENCH" --loopback --baseline --check_consistency --total_buffer_size=4K \
  --block_size=4K --batch_size=1 --op_type=read --duration=2 "$@"
