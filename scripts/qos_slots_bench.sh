#!/usr/bin/env bash
# Priority slots shared between processes (docs/qos.md), measured: the HIGH
# 4 KiB read latency of one process under another process's LOW 1 MiB
# writes, with and without the shared slots region, over
#   tcp-lo     tcp on loopback,
#   tcp-shaped tcp between two network namespaces joined by a tbf-shaped
#              link (scripts/lib/rails_net.sh; 1 Gbit/s by default),
#   shm        the shm transport,
# each pair alternated off/on ROUNDS times (tent_qos_bench runs the three
# processes: a target, the LOW writer, the HIGH reader).
#   scripts/qos_slots_bench.sh [build dir] [tcp-lo tcp-shaped shm]
# Environment: ROUNDS (3), SECS (5), WARMUP (2), RATE (1gbit),
# NICE (-20: run the bench at this niceness when allowed).
# tcp-shaped needs root, iproute2 and tc (skipped with the reason if not).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:-$HERE/../build}
shift || true
CASES=${*:-tcp-lo tcp-shaped shm}
BENCH=$BUILD/mooncake-transfer-engine/tent/bench/tent_qos_bench
ROUNDS=${ROUNDS:-3} SECS=${SECS:-5} WARMUP=${WARMUP:-2} RATE=${RATE:-1gbit}
NICE=${NICE:--20}
[ -x "$BENCH" ] || { echo "no $BENCH: build the target tent_qos_bench" >&2; exit 1; }
run() { nice -n "$NICE" "$@" 2>/dev/null || "$@"; }
ARGS=(--secs="$SECS" --warmup="$WARMUP")

echo "# $(date -u '+%F %T UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for c in $CASES; do
    case $c in
    tcp-lo | shm)
        x=${c%-lo}
        for r in $(seq "$ROUNDS"); do
            for s in "" --slots; do
                echo "## $c round $r $s (load $(cut -d' ' -f1 /proc/loadavg))"
                run "$BENCH" --xport="$x" $s "${ARGS[@]}"
            done
        done
        ;;
    tcp-shaped)
        . "$HERE/lib/rails_net.sh"
        if ! why=$(rails_net_can); then
            echo "## tcp-shaped skipped: $why"
            continue
        fi
        trap 'kill "$TPID" 2>/dev/null; rails_net_down' EXIT
        rails_net_up "q$$" "$RATE" "$RATE" || { echo "namespaces failed" >&2; exit 1; }
        out=$(mktemp)
        ip netns exec "$RN_T" "$BENCH" --target --host=10.77.1.2 >"$out" &
        TPID=$!
        for _ in $(seq 50); do [ -s "$out" ] && break; sleep 0.1; done
        read -r seg base <"$out"
        for r in $(seq "$ROUNDS"); do
            for s in "" --slots; do
                echo "## $c ($RATE) round $r $s (load $(cut -d' ' -f1 /proc/loadavg))"
                run ip netns exec "$RN_I" "$BENCH" --xport=tcp $s "${ARGS[@]}" \
                    --host=10.77.1.1 --region="/tent_qos_slots_$$" \
                    --seg="$seg" --base="$base"
                rm -f "/dev/shm/tent_qos_slots_$$"
            done
        done
        kill "$TPID" 2>/dev/null
        wait "$TPID" 2>/dev/null
        rm -f "$out"
        rails_net_down
        trap - EXIT
        ;;
    *) echo "unknown case $c (tcp-lo, tcp-shaped, shm)" >&2; exit 2 ;;
    esac
done
