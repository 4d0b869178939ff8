#!/usr/bin/env bash
# README's main job: builds (Release) and runs tebench in loopback on this
# machine - no NPU, no network beyond 127.0.0.1 - and then a KV-cache
# offload round through a file segment.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh runtime
BUILD_DIR=${BUILD_DIR:-build-demo}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --parallel "$(nproc)"
# tebench --loopback: a target and an initiator process on 127.0.0.1; the
# transport is memfabric over the host-memory libmf_smem.so (mf_host) when it
# was built, else tcp.  --baseline prints each figure next to ceilings
# measured in the same run.  The timed rows move bytes only; a separate
# pass afterwards verifies every byte (--check_consistency), so the figures
# are the engine's and not tebench's checking.  Extra arguments are passed
# on to every run (e.g. --xport_type=tcp, --duration=5).
TEBENCH="$BUILD_DIR/mooncake-transfer-engine/tent/bench/tebench"
echo "== bandwidth: KV-cache-sized blocks, batches of 32 (timed, not verified)"
"$TEBENCH" --loopback --baseline --total_buffer_size=128M \
  --block_size=16K:4M:4 --batch_size=32 --duration=2 "$@"
cat <<'EOF'
  BW: bytes moved / time.  Avg Lat: wall time per batch; Avg Tx, P99, P999: one batch from submit to done.
  Memcpy, Socket: one core's memcpy and a loopback TCP stream of the same blocks, measured just before;
  BW/Memcpy, BW/Socket: the engine's bandwidth as a share of them (a transport that copies through the
  kernel cannot pass the socket).  PingPong: a C request/response of one block; PP/AvgTx compares it with
  a whole batch of 32, so it is far below 1 here by design.  CPU-I, CPU-T: CPU-seconds the initiator and
  the target spent per GiB moved.
EOF
echo
echo "== latency: one 4 KiB read at a time (timed, not verified)"
"$TEBENCH" --loopback --baseline --total_buffer_size=4K \
  --block_size=4K --batch_size=1 --op_type=read --duration=2 "$@"
cat <<'EOF'
  Read this row by its latency: Avg Tx and P99 Tx against PingPong, the same 4 KiB as a bare C
  request/response over a socket (PP/AvgTx = 1 would be the engine costing nothing on top).  Its
  bandwidth columns mean little for one 4 KiB block.
EOF
echo
echo "== verification: the same cases again, every byte written read back and compared"
"$TEBENCH" --loopback --check_consistency --total_buffer_size=128M \
  --block_size=16K:4M:4 --batch_size=32 --duration=1 "$@"
"$TEBENCH" --loopback --check_consistency --total_buffer_size=4K \
  --block_size=4K --batch_size=1 --op_type=read --duration=1 "$@"
echo "verified: every byte of every block above (tebench exits non-zero on a mismatch)"
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
