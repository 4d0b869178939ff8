#!/usr/bin/env bash
# tcp 4 KiB READ, batch 1, on loopback (tebench --loopback) with
# transports/tcp/spin_us at each budget given, in alternated rounds; prints
# each round and the medians of Avg Tx, P99 Tx and both processes' CPU
# seconds per GiB, with the machine's load average at the start and end.
#   [ROUNDS=5] [DURATION=2] scripts/spin_sweep.sh TEBENCH [BUDGET...]
# BUDGETs are microseconds (default: 0 10 20 50 100 200).
set -uo pipefail
TB=$1
shift
BUDGETS=("$@")
[ ${#BUDGETS[@]} -gt 0 ] || BUDGETS=(0 10 20 50 100 200)
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-2}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
for s in "${BUDGETS[@]}"; do
    echo "{\"transports\": {\"tcp\": {\"spin_us\": $s}}}" >"$DIR/spin$s.json"
done
echo "spin_sweep: $(date -u '+%F %T') UTC, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $ROUNDS rounds of ${DURATION} s"
printf "%-6s %8s %10s %10s %8s %8s\n" round spin_us avg_tx_us p99_tx_us cpu_i cpu_t
for r in $(seq "$ROUNDS"); do
    for s in "${BUDGETS[@]}"; do
        "$TB" --loopback --config="$DIR/spin$s.json" --xport_type=tcp \
            --op_type=read --block_size=4K --batch_size=1 \
            --total_buffer_size=4K --duration="$DURATION" --json 2>/dev/null |
            python3 -c 'import json,sys
r, s = sys.argv[1:3]
try:
    d = json.loads(sys.stdin.readline())
except ValueError:
    sys.exit(0)
print("%-6s %8s %10.2f %10.2f %8.3f %8.3f" % (r, s, d["avg_tx_us"],
      d["p99_tx_us"], d["cpu_s_per_gib_initiator"],
      d["cpu_s_per_gib_target"]))' "$r" "$s" | tee -a "$DIR/rows"
    done
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$DIR/rows" <<'PY'
import statistics, sys
from collections import defaultdict
rows = defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    rows[int(f[1])].append([float(v) for v in f[2:6]])
print()
print("medians:")
print("%8s %10s %10s %8s %8s %6s" % ("spin_us", "avg_tx_us", "p99_tx_us",
                                     "cpu_i", "cpu_t", "n"))
for s in sorted(rows):
    cols = list(zip(*rows[s]))
    m = [statistics.median(c) for c in cols]
    print("%8d %10.2f %10.2f %8.3f %8.3f %6d" % (s, *m, len(rows[s])))
PY
