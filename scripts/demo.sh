#!/usr/bin/env bash
# README's main job: builds (Release) and runs tebench in loopback on this
# machine - no NPU, no network beyond 127.0.0.1 - and then a KV-cache
# offload round through a file segment.
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
"$TEBENCH" --loopback --baseline --check_consistency --total_buffer_size=4K \
  --block_size=4K --batch_size=1 --op_type=read --duration=2 "$@"
# KV-cache offload round through a file segment (io_uring, O_DIRECT; the
# file is created on the disk under /var/tmp, KV_FILE=<path> puts it
# elsewhere): blocks of 1 MiB in batches of 32 written from memory to the
# file and read back, each timed against fio on the same file (io_uring
# engine, direct=1, same block size, iodepth 32) measured in the same run
# (BW/Fio); then the whole file written from memory and read back into
# memory with every byte verified (write_seed, then read_verify).
KV_FILE=${KV_FILE:-/var/tmp/tent-demo-kv.bin}
rm -f "$KV_FILE"
trap 'rm -f "$KV_FILE"' EXIT
KV=(--target_seg_name="file://$KV_FILE" --xport_type=io_uring
    --total_buffer_size=256M --block_size=1M --batch_size=32 --duration=2)
echo
echo "KV-cache offload round, memory <-> file://$KV_FILE: offload (write) and reload (read), BW/Fio = ratio to fio:"
"$TEBENCH" "${KV[@]}" --op_type=write --baseline
"$TEBENCH" "${KV[@]}" --op_type=read --baseline
echo
echo "KV-cache offload round, verified: every block written from memory, read back and compared:"
"$TEBENCH" "${KV[@]}" --op_type=write_seed --check_consistency --duration=1
"$TEBENCH" "${KV[@]}" --op_type=read_verify --duration=1
