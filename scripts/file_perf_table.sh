#!/usr/bin/env bash
# Issue 22's table: tebench through a file segment against fio on the same
# file, in the same run (tebench --baseline: fio with the io_uring engine,
# direct=1, the same block size, iodepth = the batch, just before and just
# after each case, averaged).  Cases 4 KiB x 32 and 1 MiB x 32, read and
# write, one thread; each with request merging off (one I/O per request, as
# fio does them) and on (the engine's default: adjacent 4 KiB requests of a
# batch become one 128 KiB I/O).  ROUNDS rounds; prints the medians.
#   scripts/file_perf_table.sh [TEBENCH] [XPORT]
# Environment: ROUNDS (3), KV_FILE (/var/tmp/tent-perf.bin, created with
# SIZE bytes of data, removed at the end), SIZE (1G), DURATION (3 s),
# TENT_TEBENCH: Mooncake's tebench built with TENT (USE_TENT=ON, liburing):
# each round then also runs it on the same file, one thread, 1 MiB x 32
# reads over its io_uring transport (its RPC server on 127.0.0.1), right
# after ours, and the table gets its median and our ratio to it.
set -euo pipefail
TEBENCH=${1:-build/mooncake-transfer-engine/tent/bench/tebench}
XPORT=${2:-io_uring}
ROUNDS=${ROUNDS:-3}
KV_FILE=${KV_FILE:-/var/tmp/tent-perf.bin}
SIZE=${SIZE:-1G}
DURATION=${DURATION:-3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/file_perf.XXXXXX")
trap 'rm -rf "$WORK"; rm -f "$KV_FILE"' EXIT
echo '{"merge_requests": false}' >"$WORK/nomerge.json"
echo '{"merge_requests": true}' >"$WORK/merge.json"
echo '{"rpc_server_hostname": "127.0.0.1"}' >"$WORK/tent.json"
rm -f "$KV_FILE"
for r in $(seq 1 "$ROUNDS"); do
  for merge in nomerge merge; do
    for op in read write; do
      for blk in 4K 1M; do
        echo "round $r/$ROUNDS: $XPORT $op $blk x 32 ($merge)" >&2
        "$TEBENCH" --target_seg_name="file://$KV_FILE" --xport_type="$XPORT" \
          --total_buffer_size="$SIZE" --block_size="$blk" --batch_size=32 \
          --threads=1 --op_type="$op" --duration="$DURATION" --baseline \
          --json --config="$WORK/$merge.json" 2>>"$WORK/err" |
          sed "s/^{/{\"merge\": \"$merge\", /" >>"$WORK/rows"
        if [ -n "${TENT_TEBENCH:-}" ] && [ "$merge" = merge ] &&
          [ "$op" = read ] && [ "$blk" = 1M ]; then
          echo "round $r/$ROUNDS: Mooncake TENT tebench iouring read 1M x 32" >&2
          MC_TENT_CONF="$WORK/tent.json" "$TENT_TEBENCH" --backend=tent \
            --target_seg_name="file://$KV_FILE" --xport_type=iouring \
            --total_buffer_size="$(numfmt --from=iec "$SIZE")" \
            --start_block_size=1048576 --max_block_size=1048576 \
            --start_batch_size=32 --max_batch_size=32 --duration="$DURATION" \
            --op_type=read 2>>"$WORK/err" |
            awk '$1 == 1048576 { print "{\"tent_gbps\": " $3 "}" }' >>"$WORK/rows"
        fi
      done
    done
  done
done
python3 - "$WORK/rows" "$ROUNDS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
tent = [r["tent_gbps"] for r in rows if "tent_gbps" in r]
rows = [r for r in rows if "tent_gbps" not in r]
groups = {}
for r in rows:
    groups.setdefault((r["merge"], r["op_type"], r["block_size"]), []).append(r)
print(f"{'merging':8} {'op':6} {'block':>8} {'batch':>5} {'TENT GB/s':>10} "
      f"{'fio GB/s':>9} {'TENT/fio':>9}  (medians of {sys.argv[2]} rounds; "
      f"ratios per round)")
for (merge, op, blk), rs in sorted(groups.items()):
    bw = statistics.median(r["bw_gbps"] for r in rs)
    fio = statistics.median(r["fio_gbps"] for r in rs)
    ratio = statistics.median(r["ratio_fio"] for r in rs)
    each = " ".join(f"{r['ratio_fio']:.2f}" for r in rs)
    print(f"{'on' if merge == 'merge' else 'off':8} {op:6} {blk:>8} "
          f"{rs[0]['batch_size']:>5} {bw:>10.3f} {fio:>9.3f} {ratio:>9.3f}"
          f"  [{each}]")
if tent:
    ours = [r["bw_gbps"] for r in rows if r["merge"] == "merge" and
            r["op_type"] == "read" and r["block_size"] == 1048576]
    t, o = statistics.median(tent), statistics.median(ours)
    print(f"Mooncake TENT tebench, io_uring, read 1 MiB x 32, 1 thread: "
          f"{t:.3f} GB/s (rounds: {' '.join(f'{x:.3f}' for x in tent)}); "
          f"ours {o:.3f} GB/s (rounds: {' '.join(f'{x:.3f}' for x in ours)}); "
          f"ours/TENT {o / t:.3f}")
PY
