#!/usr/bin/env bash
# Issue 45's targets: the engine (tebench --loopback) against the peers it
# is judged by, measured on this machine in alternated rounds and reported
# as medians:
#   UCX    ucx_perftest (Debian ucx-utils), two processes on 127.0.0.1:
#          tag_lat 8 B and tag_bw 1 MiB over tcp on lo, ucp_put_bw 8 B over
#          posix,cma
#   fabric bench/fabric_rma_bench.c over tcp;ofi_rxm: 4 KiB read latency
#          (batch 1, both sides polling their CQs) and 1 MiB x 32 write
#          bandwidth; with tcp;ofi_rxm and shm the ceiling of the engine's
#          libfabric transport (issue 44: 1 MiB x 32, 4 KiB read)
#   engine tcp 4 KiB READ batch 1, shm 8 B x 128 WRITE, tcp 1 MiB x 32 WRITE,
#          libfabric 1 MiB x 32 WRITE/READ and 4 KiB READ batch 1
# and prints each target with its ratio.  Every program runs itself and its
# peer process; traffic stays on 127.0.0.1.
#   [ROUNDS=5] [DURATION=2] [BUILD=build] scripts/compare_peers.sh
#   ... [--markdown]   (the table as the markdown of docs/performance.md)
# GB/s are 10^9 bytes/s (ucx_perftest's MB/s are MiB/s: converted).
# Exit 0 when every figure was measured (targets missed or not; with
# COMPARE_STRICT=1, only when every target is met), 1 when a program gave no
# figure in any round, 77 when a program is missing (CTest: skipped).
set -uo pipefail
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-2}
BUILD=${BUILD:-build}
MARKDOWN=0
[ "${1:-}" = --markdown ] && MARKDOWN=1
B=$BUILD/mooncake-transfer-engine/tent/bench
TEBENCH=${TEBENCH:-$B/tebench}
FABRIC=${FABRIC:-$B/tent_fabric_rma_bench}
PORT=${UCX_PORT:-$((14000 + RANDOM % 2000))}
for p in "$TEBENCH" "$FABRIC"; do
    [ -x "$p" ] || {
        echo "compare_peers: $p not built" >&2
        exit 77
    }
done
command -v ucx_perftest >/dev/null || {
    echo "compare_peers: ucx_perftest not found (apt-get install -y ucx-utils)" >&2
    exit 77
}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export MC_LOG_LEVEL=warn

# ucx_perftest TLS TEST SIZE ITERS -> its "Final:" line's fields
ucx_run() {
    local tls=$1 test=$2 size=$3 iters=$4 srv out=""
    PORT=$((PORT + 1))
    UCX_TLS=$tls UCX_NET_DEVICES=lo ucx_perftest -p "$PORT" >/dev/null 2>&1 &
    srv=$!
    local t0
    for _ in $(seq 50); do # until the server listens (a refusal is quick)
        t0=$SECONDS
        out=$(UCX_TLS=$tls UCX_NET_DEVICES=lo timeout 60 ucx_perftest \
            127.0.0.1 -p "$PORT" -t "$test" -s "$size" -n "$iters" \
            -w $((iters / 10)) \
            2>/dev/null | awk '/^Final:/ {print $2, $3, $4, $5, $6, $7}')
        [ -n "$out" ] || [ $((SECONDS - t0)) -gt 2 ] && break
        sleep 0.1
    done
    [ -n "$out" ] || echo "compare_peers: ucx_perftest $test gave no figure" >&2
    kill "$srv" 2>/dev/null
    wait "$srv" 2>/dev/null
    echo "$out"
}

# tebench ARGS... -> its JSON line
tb() {
    "$TEBENCH" --loopback --duration="$DURATION" --json "$@" 2>/dev/null |
        head -1
}

# name value: one figure of this round
rec() { [ -n "$2" ] && echo "$1 $2" >>"$OUT/rows"; }
jget() { python3 -c 'import json,sys
try:
    d = json.loads(sys.stdin.read())
except ValueError:
    sys.exit(0)
print(" ".join(str(d[k]) for k in sys.argv[1:]))' "$@"; }

START="$(date -u '+%F %T') UTC"
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$ROUNDS"); do
    echo "compare_peers: round $r/$ROUNDS" >&2
    # engine
    read -r tx p99 ci ct <<<"$(tb --xport_type=tcp --op_type=read \
        --block_size=4K --batch_size=1 --total_buffer_size=4K |
        jget avg_tx_us p99_tx_us cpu_s_per_gib_initiator cpu_s_per_gib_target)"
    rec tcp4k_tx_us "${tx:-}"
    rec tcp4k_p99_us "${p99:-}"
    rec tcp4k_cpu_i "${ci:-}"
    rec tcp4k_cpu_t "${ct:-}"
    # per request: the run's time over its requests (bytes / 8)
    read -r sec bytes <<<"$(tb --xport_type=shm --op_type=write \
        --block_size=8 --batch_size=128 --total_buffer_size=1K |
        jget seconds bytes)"
    [ -n "${bytes:-}" ] &&
        rec shm8_ns "$(python3 -c "print($sec * 1e9 * 8 / $bytes)")"
    read -r bw ci ct <<<"$(tb --xport_type=tcp --op_type=write \
        --block_size=1M --batch_size=32 --total_buffer_size=32M |
        jget bw_gbps cpu_s_per_gib_initiator cpu_s_per_gib_target)"
    rec tcp1m_gbps "${bw:-}"
    rec tcp1m_cpu_i "${ci:-}"
    rec tcp1m_cpu_t "${ct:-}"
    # libfabric: the 4 KiB read with a target that polls its CQ (as the
    # engine's server polls after traffic) and one that sleeps in it
    read -r avg p99 <<<"$("$FABRIC" --provider 'tcp;ofi_rxm' --mode lat \
        --op read --size 4096 --iters 20000 --spin --json 2>/dev/null |
        jget avg_us p99_us)"
    rec fab_read_us "${avg:-}"
    rec fab_read_p99_us "${p99:-}"
    read -r avg <<<"$("$FABRIC" --provider 'tcp;ofi_rxm' --mode lat \
        --op read --size 4096 --iters 20000 --json 2>/dev/null |
        jget avg_us)"
    rec fab_read_sleep_us "${avg:-}"
    # issue 44: the engine's libfabric transport against the raw program,
    # same provider, block and window
    for prov in 'tcp;ofi_rxm' shm; do
        p=${prov%%;*}
        for op in write read; do
            read -r bw <<<"$(tb --xport_type=libfabric \
                --libfabric_provider="$prov" --op_type=$op --block_size=1M \
                --batch_size=32 --total_buffer_size=32M | jget bw_gbps)"
            rec "lf_${p}_${op}_gbps" "${bw:-}"
            read -r bw <<<"$("$FABRIC" --provider "$prov" --mode bw \
                --op $op --size 1M --window 32 --seconds "$DURATION" --json \
                2>/dev/null | jget gb_per_s)"
            rec "raw_${p}_${op}_gbps" "${bw:-}"
        done
        read -r tx <<<"$(tb --xport_type=libfabric --libfabric_provider="$prov" \
            --op_type=read --block_size=4K --batch_size=1 \
            --total_buffer_size=4K | jget avg_tx_us)"
        rec "lf_${p}_rd4k_us" "${tx:-}"
        read -r avg <<<"$("$FABRIC" --provider "$prov" --mode lat --op read \
            --size 4096 --iters 20000 --spin --json 2>/dev/null | jget avg_us)"
        rec "raw_${p}_rd4k_us" "${avg:-}"
    done
    read -r bw <<<"$("$FABRIC" --provider 'tcp;ofi_rxm' --mode bw \
        --op write --size 1M --window 32 --seconds "$DURATION" --json \
        2>/dev/null | jget gb_per_s)"
    rec fab_write_gbps "${bw:-}"
    # UCX: Final: iterations p50 avg overall MB/s(avg) MB/s(overall)
    read -r _ _ _ lat _ _ <<<"$(ucx_run tcp tag_lat 8 5000)"
    rec ucx_tag_lat_us "${lat:-}"
    read -r _ _ _ _ _ mbs <<<"$(ucx_run tcp tag_bw 1048576 2000)"
    [ -n "${mbs:-}" ] &&
        rec ucx_tag_bw_gbps "$(python3 -c "print($mbs * 1048576 / 1e9)")"
    read -r _ _ _ lat _ _ <<<"$(ucx_run posix,cma ucp_put_bw 8 2000000)"
    [ -n "${lat:-}" ] && rec ucx_put8_ns "$(python3 -c "print($lat * 1000)")"
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$OUT/rows" "$MARKDOWN" "$START" "$LOAD0" "$LOAD1" "$ROUNDS" \
    "$DURATION" "$(nproc)" "$(uname -r)" "${COMPARE_STRICT:-0}" <<'PY'
import statistics, sys
from collections import defaultdict
rows, md, start, load0, load1, rounds, dur, ncpu, kernel, strict = \
    sys.argv[1:11]
md = md == "1"
strict = strict == "1"
v = defaultdict(list)
for line in open(rows):
    k, x = line.split()
    v[k].append(float(x))
med = {k: statistics.median(x) for k, x in v.items()}
def m(k):
    return med.get(k, float("nan"))
def rng(k):
    x = v.get(k)
    return "%.3g-%.3g" % (min(x), max(x)) if x else "-"
# (target, engine figure, peer figure, ratio, goal, met)
t = []
def target(name, ek, pk, unit, higher_better, goal):
    e, p = m(ek), m(pk)
    ratio = e / p if p == p and p else float("nan")
    met = (ratio >= goal) if higher_better else (ratio <= goal)
    t.append((name, "%.4g %s (%s)" % (e, unit, rng(ek)),
              "%.4g %s (%s)" % (p, unit, rng(pk)), "%.2f" % ratio,
              ("≥ %.2f" if higher_better else "≤ %.2f") % goal,
              "yes" if met and ratio == ratio else "no"))
target("tcp 4 KiB READ batch 1, Avg Tx vs libfabric tcp;ofi_rxm RMA read",
       "tcp4k_tx_us", "fab_read_us", "µs", False, 1.5)
target("shm 8 B x 128 per request vs UCX ucp_put_bw 8 B (posix,cma) per message",
       "shm8_ns", "ucx_put8_ns", "ns", False, 1.0)
target("tcp 1 MiB x 32 WRITE vs UCX tag_bw 1 MiB (tcp, lo)",
       "tcp1m_gbps", "ucx_tag_bw_gbps", "GB/s", True, 1.0)
for p, name in (("tcp", "tcp;ofi_rxm"), ("shm", "shm")):
    for op in ("write", "read"):
        target("libfabric transport %s 1 MiB x 32 %s vs raw libfabric RMA"
               % (name, op.upper()), "lf_%s_%s_gbps" % (p, op),
               "raw_%s_%s_gbps" % (p, op), "GB/s", True, 0.9)
    target("libfabric transport %s 4 KiB READ batch 1, Avg Tx vs raw RMA read"
           % name, "lf_%s_rd4k_us" % p, "raw_%s_rd4k_us" % p, "µs", False, 1.3)
head = ("target", "engine (median, range)", "peer (median, range)",
        "engine/peer", "goal", "met")
ref = [
    ("tcp 4 KiB READ P99 Tx", "%.4g µs" % m("tcp4k_p99_us"),
     "libfabric read p99 %.4g µs" % m("fab_read_p99_us")),
    ("libfabric tcp;ofi_rxm 4 KiB read, target sleeping in its CQ",
     "%.4g µs" % m("fab_read_sleep_us"), ""),
    ("UCX tag_lat 8 B (tcp, lo), one way", "%.4g µs" % m("ucx_tag_lat_us"), ""),
    ("libfabric tcp;ofi_rxm 1 MiB x 32 write", "%.4g GB/s" %
     m("fab_write_gbps"), "engine/libfabric %.2f" %
     (m("tcp1m_gbps") / m("fab_write_gbps")) if m("fab_write_gbps") else ""),
    ("engine CPU, tcp 4 KiB READ (initiator, target)",
     "%.3g, %.3g s/GiB" % (m("tcp4k_cpu_i"), m("tcp4k_cpu_t")), ""),
    ("engine CPU, tcp 1 MiB x 32 WRITE (initiator, target)",
     "%.3g, %.3g s/GiB" % (m("tcp1m_cpu_i"), m("tcp1m_cpu_t")), ""),
]
hdr = ("compare_peers: %s, %s cores, kernel %s, %s alternated rounds of "
       "%s s, medians; load average %s at the start, %s at the end"
       % (start, ncpu, kernel, rounds, dur, load0, load1))
if md:
    print(hdr)
    print()
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in t:
        print("| " + " | ".join(r) + " |")
    print()
    print("| reference | figure | |")
    print("|---|---|---|")
    for r in ref:
        print("| " + " | ".join(r) + " |")
else:
    print(hdr)
    w = [max(len(str(r[i])) for r in t + [head]) for i in range(len(head))]
    for r in [head] + t:
        print("  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)))
    print()
    for r in ref:
        print("%-60s %s  %s" % r)
missing = [k for k in ("tcp4k_tx_us", "fab_read_us", "shm8_ns", "ucx_put8_ns",
                       "tcp1m_gbps", "ucx_tag_bw_gbps") if k not in v]
if missing:
    print("no figure in any round: " + ", ".join(missing), file=sys.stderr)
    sys.exit(1)
if strict and any(r[5] != "yes" for r in t):
    print("COMPARE_STRICT: a target is missed", file=sys.stderr)
    sys.exit(1)
PY
