#!/usr/bin/env bash
# Issue 13's performance table: every case through tebench --loopback
# --baseline, with the buffer as 256M and as exactly block x batch x threads,
# three rounds; with two tebench binaries the rounds alternate between them
# (a "before" and an "after" build measured under the same conditions).
# Ratios use the ceilings of the first binary's run in the same round.
#   [ROUNDS=n] [CASES_RE=regex] scripts/perf_table.sh AFTER_TEBENCH [BEFORE_TEBENCH]
# CASES_RE runs only the cases whose names match (e.g. '^tcp'); the tables
# leave out the others.  BUFFERS=exact (or 256M) runs one buffer of the two.
# Prints the raw rows (CSV) to perf_table.csv and the medians as tables.
set -uo pipefail
AFTER=$1
BEFORE=${2:-}
OUT=${OUT:-perf_table.csv}
NOMERGE=$(mktemp)
trap 'rm -f "$NOMERGE"' EXIT
echo '{"merge_requests": false}' >"$NOMERGE"
export MC_LOG_LEVEL=warn
# name|threads|transport|op|block|batch|exact buffer|extra flags|environment
CASES=(
"shm8x128nm|1|shm|write|8|128|1K|--config=$NOMERGE|"
"shm8x128m|1|shm|write|8|128|1K||"
"shm4Kx32nm|1|shm|write|4K|32|128K|--config=$NOMERGE|"
"shm4Kx32m|1|shm|write|4K|32|128K||"
"shm1Mx1|1|shm|write|1M|1|1M||"
"shm1Mx32|1|shm|write|1M|32|32M||"
"tcp4Krd1|1|tcp|read|4K|1|4K||"
"tcp64Kx32t1|1|tcp|write|64K|32|2M||"
"tcp64Kx32t2|2|tcp|write|64K|32|4M||"
"tcp1Mx1t1|1|tcp|write|1M|1|1M||"
"tcp1Mx1t2|2|tcp|write|1M|1|2M||"
"tcp1Mx32t1|1|tcp|write|1M|32|32M||"
"tcp1Mx32t2|2|tcp|write|1M|32|64M||"
"tcp4Kx1|1|tcp|write|4K|1|4K||"
"mft4Kx1|1|memfabric|write|4K|1|4K||MF_PROTOCOL=host_tcp"
"tcp4Kx32|1|tcp|write|4K|32|128K||"
"mft4Kx32|1|memfabric|write|4K|32|128K||MF_PROTOCOL=host_tcp"
"shm4Kx32|1|shm|write|4K|32|128K||"
"mfs4Kx32|1|memfabric|write|4K|32|128K||MF_PROTOCOL=host_shm"
"shm4Kx32t2|2|shm|write|4K|32|256K||"
"shm1Mx32t2|2|shm|write|1M|32|64M||"
"mft4Kx32t2|2|memfabric|write|4K|32|256K||MF_PROTOCOL=host_tcp"
"mft1Mx32t1|1|memfabric|write|1M|32|32M||MF_PROTOCOL=host_tcp"
"mft1Mx32t2|2|memfabric|write|1M|32|64M||MF_PROTOCOL=host_tcp"
)
: >"$OUT"
for round in $(seq "${ROUNDS:-3}"); do
    for c in "${CASES[@]}"; do
        IFS='|' read -r name thr x op blk bat exact extra envs <<<"$c"
        [[ "$name" =~ ${CASES_RE:-.} ]] || continue
        for buf in ${BUFFERS:-256M exact}; do
            [ "$buf" = exact ] && buf=$exact
            for which in after before; do
                tb=$AFTER
                [ "$which" = before ] && tb=$BEFORE
                [ -n "$tb" ] || continue
                # shellcheck disable=SC2086 # extra and envs are word lists
                row=$(env $envs "$tb" --loopback --baseline --duration=2 \
                    --total_buffer_size="$buf" --threads="$thr" \
                    --xport_type="$x" --op_type="$op" --block_size="$blk" \
                    --batch_size="$bat" $extra 2>/dev/null |
                    grep -E '^ +[0-9]' | tail -1)
                # shellcheck disable=SC2086
                set -- $row
                tag=256M
                [ "$buf" = 256M ] || tag=exact
                echo "$name,$tag,$which,$round,${3:-},${6:-},${11:-},${12:-},${15:-}" >>"$OUT"
            done
        done
    done
done
python3 - "$OUT" <<'PY'
import csv, statistics, sys
from collections import defaultdict
rows = defaultdict(list)
for name, buf, which, rnd, bw, tx, mem, sock, pp in csv.reader(open(sys.argv[1])):
    num = lambda v: float(v) if v else float("nan")
    rows[name, buf, which].append(dict(bw=num(bw), tx=num(tx), mem=num(mem),
                                       sock=num(sock), pp=num(pp)))
builds = [b for b in ("before", "after") if any(k[2] == b for k in rows)]
have = {k[0] for k in rows}  # the cases run (CASES_RE)
BUFS = [b for b in ("256M", "exact") if any(k[1] == b for k in rows)]
def med(vals):
    vals = [v for v in vals if v == v]
    return statistics.median(vals) if vals else float("nan")
def col(name, buf, which, key):
    return med([r[key] for r in rows.get((name, buf, which), [])])
def ratio(name, buf, which, f):
    # the ceilings come from the "after" binary's run of the same round
    pairs = zip(rows.get((name, buf, which), []), rows.get((name, buf, "after"), []))
    return med([f(r, c) for r, c in pairs])
KINDS = {
    "ns": lambda n, b, w: f"{col(n, b, w, 'tx') * 1000 / 128:.0f} ns",
    "mem": lambda n, b, w: f"{ratio(n, b, w, lambda r, c: r['bw'] / c['mem']):.2f} ({col(n, b, w, 'bw'):.2f} GB/s)",
    "sock": lambda n, b, w: f"{ratio(n, b, w, lambda r, c: r['bw'] / c['sock']):.2f} ({col(n, b, w, 'bw'):.2f} GB/s)",
    "pp": lambda n, b, w: f"{ratio(n, b, w, lambda r, c: c['pp'] / r['tx']):.2f} ({col(n, b, w, 'tx'):.1f} us)",
}
TABLE = [
    ("shm 8 B x 128, merging off: per request", "shm8x128nm", "ns", "<= 150 ns"),
    ("shm 8 B x 128, merging on: per request", "shm8x128m", "ns", "<= 60 ns"),
    ("shm 4 KiB x 32, merging off: BW/memcpy", "shm4Kx32nm", "mem", ">= 0.9"),
    ("shm 4 KiB x 32, merging on: BW/memcpy", "shm4Kx32m", "mem", ">= 0.9"),
    ("shm 1 MiB x 1: BW/memcpy", "shm1Mx1", "mem", ">= 0.9"),
    ("shm 1 MiB x 32: BW/memcpy", "shm1Mx32", "mem", ">= 0.9"),
    ("tcp 4 KiB read, batch 1: PingPong/AvgTx", "tcp4Krd1", "pp", ">= 0.66"),
    ("tcp 64 KiB x 32, 1 thread: BW/socket", "tcp64Kx32t1", "sock", ">= 0.9"),
    ("tcp 64 KiB x 32, 2 threads: BW/socket", "tcp64Kx32t2", "sock", ">= 0.9"),
    ("tcp 1 MiB x 1, 1 thread: BW/socket", "tcp1Mx1t1", "sock", ">= 0.9"),
    ("tcp 1 MiB x 1, 2 threads: BW/socket", "tcp1Mx1t2", "sock", ">= 0.9"),
    ("tcp 1 MiB x 32, 1 thread: BW/socket", "tcp1Mx32t1", "sock", ">= 0.9"),
    ("tcp 1 MiB x 32, 2 threads: BW/socket", "tcp1Mx32t2", "sock", ">= 0.9"),
]
print("| case | buffer | " + " | ".join(builds) + " | target |")
print("|---|---|" + "---|" * len(builds) + "---|")
for label, name, kind, target in TABLE:
    if name not in have:
        continue
    for buf in BUFS:
        print(f"| {label} | {buf} | " + " | ".join(KINDS[kind](name, buf, w) for w in builds) + f" | {target} |")
if {"mft4Kx1", "tcp4Kx1", "mft4Kx32", "tcp4Kx32", "mfs4Kx32", "shm4Kx32"} <= have:
    print()
    print("| memfabric over mf_host | buffer | " + " | ".join(builds) + " | target |")
    print("|---|---|" + "---|" * len(builds) + "---|")
    for buf in BUFS:
        cells = [f"{col('mft4Kx1', buf, w, 'tx') / col('tcp4Kx1', buf, w, 'tx'):.2f}x ({col('mft4Kx1', buf, w, 'tx'):.1f} vs {col('tcp4Kx1', buf, w, 'tx'):.1f} us)" for w in builds]
        print(f"| host_tcp 4 KiB batch 1: Avg Tx / tcp's | {buf} | " + " | ".join(cells) + " | <= 1.2x |")
        for mf, other, label in (("mft4Kx32", "tcp4Kx32", "host_tcp 4 KiB x 32: BW / tcp's"),
                                 ("mfs4Kx32", "shm4Kx32", "host_shm 4 KiB x 32: BW / shm's")):
            cells = [f"{col(mf, buf, w, 'bw') / col(other, buf, w, 'bw'):.2f} ({col(mf, buf, w, 'bw'):.2f} vs {col(other, buf, w, 'bw'):.2f} GB/s)" for w in builds]
            print(f"| {label} | {buf} | " + " | ".join(cells) + " | >= 0.9 |")
print()
print("| 2 threads / 1 thread, BW | buffer | " + " | ".join(builds) + " |")
print("|---|---|" + "---|" * len(builds))
for two, one, label in (("shm4Kx32t2", "shm4Kx32", "shm 4 KiB x 32"), ("shm1Mx32t2", "shm1Mx32", "shm 1 MiB x 32"),
                        ("tcp64Kx32t2", "tcp64Kx32t1", "tcp 64 KiB x 32"), ("tcp1Mx1t2", "tcp1Mx1t1", "tcp 1 MiB x 1"),
                        ("tcp1Mx32t2", "tcp1Mx32t1", "tcp 1 MiB x 32"), ("mft4Kx32t2", "mft4Kx32", "memfabric 4 KiB x 32"),
                        ("mft1Mx32t2", "mft1Mx32t1", "memfabric 1 MiB x 32")):
    if two not in have or one not in have:
        continue
    for buf in BUFS:
        print(f"| {label} | {buf} | " + " | ".join(f"{col(two, buf, w, 'bw') / col(one, buf, w, 'bw'):.2f}" for w in builds) + " |")
PY
