#!/usr/bin/env bash
# tcp 1 MiB x 1 with 2 threads on loopback against its ceilings, measured in
# the same rounds: the 2-stream socket ceiling (tebench --baseline) and UCX's
# ucx_perftest -t tag_bw over tcp on lo (Debian ucx-utils).  Rounds
# alternate the engine (and a "before" build, when given), the socket and
# UCX, so a noisy 2-core VM moves them together; the table gives medians.
#   [ROUNDS=7] [DURATION=4] [TEBENCH_FLAGS=...] \
#     scripts/tcp_ucx_bench.sh AFTER_TEBENCH [BEFORE_TEBENCH]
# GB/s are 10^9 bytes/s (ucx_perftest's MB/s are MiB/s: converted).
# Traffic stays on 127.0.0.1.
set -uo pipefail
AFTER=$1
BEFORE=${2:-}
ROUNDS=${ROUNDS:-7}
DURATION=${DURATION:-4}
PORT=${UCX_PORT:-13377}
command -v ucx_perftest >/dev/null || {
    echo "tcp_ucx_bench: ucx_perftest not found (apt-get install ucx-utils)" >&2
    exit 1
}

engine_row() { # tebench binary -> "engine_gbps socket_gbps"
    # shellcheck disable=SC2086 # TEBENCH_FLAGS is a word list
    "$1" --loopback --baseline --xport_type=tcp --op_type=write \
        --block_size=1M --batch_size=1 --threads=2 --duration="$DURATION" \
        --total_buffer_size=2M --json ${TEBENCH_FLAGS:-} 2>/dev/null |
        python3 -c 'import json,sys
d=json.loads(sys.stdin.readline())
print("%.4f %.4f" % (d["bw_gbps"], d["socket_gbps"]))'
}

ucx_gbps() {
    local srv
    UCX_TLS=tcp UCX_NET_DEVICES=lo ucx_perftest -p "$PORT" >/dev/null 2>&1 &
    srv=$!
    local out=""
    for _ in $(seq 50); do # until the server listens
        out=$(UCX_TLS=tcp UCX_NET_DEVICES=lo timeout 60 ucx_perftest \
            127.0.0.1 -p "$PORT" -t tag_bw -s 1048576 -n 4000 2>/dev/null |
            awk '/^Final:/ {print $6}')
        [ -n "$out" ] && break
        sleep 0.1
    done
    kill "$srv" 2>/dev/null
    wait "$srv" 2>/dev/null
    if [ -z "$out" ]; then
        echo "tcp_ucx_bench: ucx_perftest gave no figure this round (counted as 0)" >&2
        out=0
    fi
    python3 -c "print('%.4f' % ($out * 1048576 / 1e9))"
}

median() { tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

E="" S="" U="" B="" BS="" ES=""
echo "tcp_ucx_bench: $(date -u '+%F %T') UTC, $(nproc) cores, $ROUNDS rounds"
printf "%-6s %10s %10s %10s %10s %8s\n" round engine socket ucx before eng/sock
for r in $(seq "$ROUNDS"); do
    read -r e s <<<"$(engine_row "$AFTER")"
    u=$(ucx_gbps)
    b=- bs=-
    if [ -n "$BEFORE" ]; then
        read -r b bs <<<"$(engine_row "$BEFORE")"
        B="$B $b" BS="$BS $bs"
    fi
    es=$(python3 -c "print('%.3f' % ($e / $s if $s > 0 else 0))")
    E="$E $e" S="$S $s" U="$U $u" ES="$ES $es"
    printf "%-6s %10s %10s %10s %10s %8s\n" "$r" "$e" "$s" "$u" "$b" "$es"
done
me=$(echo $E | median) ms=$(echo $S | median) mu=$(echo $U | median)
mes=$(echo $ES | median)
echo
echo "medians (GB/s): engine $me, 2-stream socket $ms, UCX tag_bw $mu"
# each round's socket figure comes from the same tebench run as its engine
# figure, a second before it: the median of those ratios is the steadier
# one when a socket run drops (one 1 s run of it moves by 2x here)
echo "median of the rounds' own engine / socket: $mes"
python3 - "$me" "$ms" "$mu" <<'EOF'
import sys
e, s, u = map(float, sys.argv[1:4])
print("engine / socket %.2f (goal >= 0.90), engine / UCX %.2f (goal >= 1.00)"
      % (e / s, e / u))
EOF
if [ -n "$BEFORE" ]; then
    mb=$(echo $B | median) mbs=$(echo $BS | median)
    python3 - "$me" "$mb" "$mbs" <<'EOF'
import sys
e, b, bs = map(float, sys.argv[1:4])
print("before: %.4f GB/s (%.2f of its socket); after / before %.2f"
      % (b, b / bs, e / b))
EOF
fi
