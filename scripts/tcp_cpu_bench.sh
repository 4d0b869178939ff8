#!/usr/bin/env bash
# tcp bulk and its CPU cost against UCX, alternated in one run: tebench
# --loopback tcp 1 MiB x 32 WRITE (GB/s and CPU-seconds per GiB of the
# initiator and the target, tebench's getrusage figures) and 4 KiB READ
# batch 1 (Avg Tx), for the build given and, when given, a "before" build;
# then ucx_perftest -t tag_bw 1 MiB over tcp on lo (Debian ucx-utils), both
# processes timed by /usr/bin/time (user + system CPU over the bytes moved,
# warm-up included).  Each round runs every program once; the table gives
# medians and ranges.  Traffic stays on 127.0.0.1.
#   [ROUNDS=5] [DURATION=3] [UCX_ITERS=4000] [NICE=-20] \
#     scripts/tcp_cpu_bench.sh AFTER_TEBENCH [BEFORE_TEBENCH [BEFORE_LIBDIR]]
# BEFORE_LIBDIR: where the before build's libtent.so.0 is (LD_LIBRARY_PATH),
# for a copy of a build outside its tree.  NICE (as root): the priority the
# programs run at, so that other work on the machine disturbs them less.
# GB/s are 10^9 bytes/s (ucx_perftest's MB/s are MiB/s: converted).
set -uo pipefail
AFTER=$1
BEFORE=${2:-}
BEFORE_LIB=${3:-}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-3}
ITERS=${UCX_ITERS:-4000}
NICE=${NICE:--20}
PORT=${UCX_PORT:-$((16000 + RANDOM % 2000))}
export MC_LOG_LEVEL=warn
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
have_ucx=1
command -v ucx_perftest >/dev/null && [ -x /usr/bin/time ] || have_ucx=0

pri() { nice -n "$NICE" "$@" 2>/dev/null || "$@"; }
rec() { [ -n "$2" ] && echo "$1 $2" >>"$OUT/rows"; }

# label tebench [libdir]: one round of the engine's two cases
engine() {
    local lab=$1 tb=$2 lib=${3:-} j
    j=$(LD_LIBRARY_PATH=$lib pri "$tb" --loopback --xport_type=tcp \
        --op_type=write --block_size=1M --batch_size=32 \
        --total_buffer_size=32M --duration="$DURATION" --json 2>/dev/null |
        head -1)
    read -r bw ci ct <<<"$(echo "$j" | python3 -c 'import json,sys
try:
    d = json.loads(sys.stdin.read())
    print(d["bw_gbps"], d["cpu_s_per_gib_initiator"], d["cpu_s_per_gib_target"])
except (ValueError, KeyError):
    pass')"
    rec "$lab.1m_gbps" "${bw:-}"
    rec "$lab.1m_cpu_i" "${ci:-}"
    rec "$lab.1m_cpu_t" "${ct:-}"
    j=$(LD_LIBRARY_PATH=$lib pri "$tb" --loopback --xport_type=tcp \
        --op_type=read --block_size=4K --batch_size=1 \
        --total_buffer_size=4K --duration="$DURATION" --json 2>/dev/null |
        head -1)
    read -r tx p99 <<<"$(echo "$j" | python3 -c 'import json,sys
try:
    d = json.loads(sys.stdin.read())
    print(d["avg_tx_us"], d["p99_tx_us"])
except (ValueError, KeyError):
    pass')"
    rec "$lab.4k_tx_us" "${tx:-}"
    rec "$lab.4k_p99_us" "${p99:-}"
}

ucx() {
    local srv out="" t0
    PORT=$((PORT + 1))
    UCX_TLS=tcp UCX_NET_DEVICES=lo /usr/bin/time -f "%U %S" -o "$OUT/ts" \
        nice -n "$NICE" ucx_perftest -p "$PORT" >/dev/null 2>&1 &
    srv=$!
    for _ in $(seq 50); do # until the server listens (a refusal is quick)
        t0=$SECONDS
        out=$(UCX_TLS=tcp UCX_NET_DEVICES=lo /usr/bin/time -f "%U %S" \
            -o "$OUT/tc" nice -n "$NICE" timeout 120 ucx_perftest 127.0.0.1 \
            -p "$PORT" -t tag_bw -s 1048576 -n "$ITERS" -w $((ITERS / 10)) \
            2>/dev/null | awk '/^Final:/ {print $7}')
        [ -n "$out" ] || [ $((SECONDS - t0)) -gt 2 ] && break
        sleep 0.1
    done
    [ -n "$out" ] || kill "$srv" 2>/dev/null
    wait "$srv" 2>/dev/null # it exits after its one test
    [ -n "$out" ] || return
    local gib
    gib=$(python3 -c "print(($ITERS + $ITERS // 10) / 1024)")
    rec ucx.1m_gbps "$(python3 -c "print($out * 1048576 / 1e9)")"
    rec ucx.1m_cpu_i "$(awk -v g="$gib" '{print ($1 + $2) / g}' "$OUT/tc")"
    rec ucx.1m_cpu_t "$(awk -v g="$gib" '{print ($1 + $2) / g}' "$OUT/ts")"
}

START="$(date -u '+%F %T') UTC"
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$ROUNDS"); do
    echo "tcp_cpu_bench: round $r/$ROUNDS" >&2
    [ -n "$BEFORE" ] && engine before "$BEFORE" "$BEFORE_LIB"
    engine after "$AFTER"
    [ "$have_ucx" = 1 ] && ucx
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$OUT/rows" "$START" "$LOAD0" "$LOAD1" "$ROUNDS" "$DURATION" \
    "$(nproc)" <<'PY'
import statistics, sys
from collections import defaultdict
rows, start, load0, load1, rounds, dur, ncpu = sys.argv[1:8]
v = defaultdict(list)
for line in open(rows):
    k, x = line.split()
    v[k].append(float(x))
def cell(k, fmt="%.3g"):
    x = v.get(k)
    if not x:
        return "-"
    return (fmt + " (" + fmt + "-" + fmt + ")") % (
        statistics.median(x), min(x), max(x))
print("%s, %s CPUs, %s rounds of %s s, load %s -> %s" %
      (start, ncpu, rounds, dur, load0, load1))
print()
print("| | 1 MiB x 32 WRITE GB/s | CPU-I s/GiB | CPU-T s/GiB | "
      "4 KiB READ Avg Tx us (p99) |")
print("|---|---|---|---|---|")
for lab, name in (("before", "engine before"), ("after", "engine"),
                  ("ucx", "UCX tag_bw")):
    if not any(k.startswith(lab + ".") for k in v):
        continue
    tx = cell(lab + ".4k_tx_us")
    if lab + ".4k_p99_us" in v:
        tx += " (p99 %.3g)" % statistics.median(v[lab + ".4k_p99_us"])
    print("| %s | %s | %s | %s | %s |" % (
        name, cell(lab + ".1m_gbps"), cell(lab + ".1m_cpu_i"),
        cell(lab + ".1m_cpu_t"), tx if lab != "ucx" else "-"))
PY
