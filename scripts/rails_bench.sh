#!/usr/bin/env bash
# The rail benchmark (issue 21, items 6 and 7):  scripts/rails_bench.sh [build]
#
# Two hosts in network namespaces (scripts/lib/rails_net.sh) joined by two
# tbf-shaped rails, 1 Gbit/s (10.77.1.0/24) and 3 Gbit/s (10.77.2.0/24);
# cases (a) bulk writes, (b)/(b') a rail down at either end, (c) a rail
# throttled, (d) HIGH reads under LOW bulk per qdisc, each printed beside
# raw-TCP ceilings over the same rails (tent_tcp_stream, before and after)
# and the issue's goal.  What each case measures: docs/performance.md,
# "Rails".  About 5 minutes.  RAILS_BENCH_CASES (default "a b b2 c d")
# picks cases; RAILS_BENCH_KEEP=<dir> keeps every run's ticks; D_QDISCS,
# D_PAIRS tune (d).  Needs root, iproute2 and tc with tbf (else exits 77);
# every exit path removes the namespaces it creates.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
BENCH_DIR=$BUILD/mooncake-transfer-engine/tent/bench
RAILS_TOOL=$BENCH_DIR/tent_rails_tool
STREAM=$BENCH_DIR/tent_tcp_stream
for b in "$RAILS_TOOL" "$STREAM"; do
    [ -x "$b" ] || {
        echo "rails_bench: $b not found (build the project first)" >&2
        exit 2
    }
done

. "$ROOT/scripts/lib/rails_net.sh"
. "$ROOT/scripts/lib/rails_run.sh"

if ! why=$(rails_net_can); then
    echo "rails_bench: skipped: $why"
    exit 77
fi

RAILS_WORK=$(mktemp -d "${TMPDIR:-/tmp}/tent_rails_bench.XXXXXX")
SERVERS=()
CASES=" ${RAILS_BENCH_CASES:-a b b2 c d} "
want() { [[ "$CASES" == *" $1 "* ]]; }
cleanup() {
    rails_targets_stop
    if [ -n "${RAILS_BENCH_KEEP:-}" ]; then
        mkdir -p "$RAILS_BENCH_KEEP" && cp -r "$RAILS_WORK"/. "$RAILS_BENCH_KEEP"/
    fi
    for p in "${SERVERS[@]}"; do
        kill "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    rails_net_down
    rm -rf "$RAILS_WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

die() {
    echo "rails_bench: $*" >&2
    local f
    for f in "$RAILS_WORK"/*.err; do
        [ -s "$f" ] || continue
        echo "---- $(basename "$f")" >&2
        tail -n 5 "$f" >&2
    done
    exit 1
}

TICK=100 # ms between tick lines
PORT2=17777
PORT1=17778
MIB=272 # target memory: (d)'s 2 threads x 2 x 64 MiB and the 4 KiB

T_START=$(date +%s%N)
stamp() { # stamp <what>: a progress line with the seconds since the start
    echo "$(awk -v a="$T_START" -v b="$(date +%s%N)" 'BEGIN { printf "%5.1fs", (b - a) / 1e9 }') $*"
}
echo "rails_bench: $(date -u '+%F %T') UTC, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
rails_net_up "$$" 1gbit 3gbit || die "cannot set up the namespaces"

# ---- ceilings --------------------------------------------------------------
for r in 1 2; do
    ip netns exec "$RN_T" "$STREAM" serve "10.77.$r.2" 5201 \
        >"$RAILS_WORK/serve$r.out" 2>&1 &
    SERVERS+=($!)
done
sleep 0.3
rail_paths() { # rail_paths <rails...>: tent_tcp_stream's path per rail
    local r
    for r in "$@"; do echo "10.77.$r.1=10.77.$r.2:5201"; done
}
stream() { # stream <seconds> <op> <rails...>: the total GB/s
    local secs=$1 op=$2 paths
    shift 2
    mapfile -t paths < <(rail_paths "$@")
    ip netns exec "$RN_I" "$STREAM" run "$secs" "$op" "${paths[@]}" \
        >"$RAILS_WORK/stream.out" 2>"$RAILS_WORK/stream.err" ||
        die "tent_tcp_stream run $op ${paths[*]} failed"
    awk '$1 == "total" { print $2 }' "$RAILS_WORK/stream.out"
}
ceilings() { # sets C1, C2, C12 (GB/s) and says so
    C1=$(stream 3 write 1)
    C2=$(stream 3 write 2)
    C12=$(stream 3 write 1 2)
    stamp "raw TCP write streams (GB/s): rail 1 $C1, rail 2 $C2, both $C12"
}
ceilings
C1_FIRST=$C1 C2_FIRST=$C2 C12_FIRST=$C12

# without a cluster secret a named address serves that NIC alone: name both
rails_target_start T2 10.77.1.2 $PORT2 $MIB \
    --set "transports/tcp/nics=${RN_PFX}t1,${RN_PFX}t2" || die "target (both NICs)"
rails_target_start T1 10.77.1.2 $PORT1 $MIB \
    --set "transports/tcp/nics=${RN_PFX}t1" || die "target (one NIC)"

run() { # run <name> <target> [options]: out file in $RAILS_WORK/<name>
    local name=$1 tgt=$2
    shift 2
    rails_run "$RAILS_WORK/$name" "$tgt" --interval-ms $TICK "$@"
    local rc=$?
    grep -q '^result ' "$RAILS_WORK/$name" ||
        die "$name: tent_rails_tool run failed (status $rc)"
    return 0
}
res() { rails_result "$RAILS_WORK/$1" "$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
ms_after() { # ms_after <tick time or -1> <event time>
    awk -v t="$1" -v e="$2" 'BEGIN { if (t < 0) print "never"; else printf "%d", t - e }'
}

ROWS=()
# row <case> <engine> <reference> <ratio> <goal> <single-rail>; a reference
# @C1, @C2 or @C12 is that ceiling, the higher of its two measurements
# (before and after the cases), and the ratio is computed at the end
row() {
    local IFS=$'\x1f'
    ROWS+=("$*")
}

# ---- (a) both rails, 1 MiB x 32 writes -------------------------------------
stamp "(a) 1 MiB x 32 writes"
run a1 T1 --seconds 6 --after-ms 1500
A1=$(res a1 gbps)
A1_P99=$(awk -v v="$(res a1 p99_us)" 'BEGIN { printf "%.1f", v / 1e3 }')
if want a; then
    run a2 T2 --seconds 8 --after-ms 2000
    A2=$(res a2 gbps)
    row "(a) write 1MiBx32, GB/s" "$A2" @C12 "" ">=0.90" "$A1"
fi
row "    single rail vs its stream (rail 1)" "$A1" @C1 "" "" ""

# ---- (b) a link down and up mid-transfer -----------------------------------
outage() { # outage <name> <down command...>; then the up command in UP
    local name=$1
    rails_event_script "$RAILS_WORK/$name.down" "${DOWN[@]}"
    rails_event_script "$RAILS_WORK/$name.up" "${UP[@]}"
    run "$name" T2 --seconds 12 --after-ms 1000 \
        --event "3000=$RAILS_WORK/$name.down" --event "8000=$RAILS_WORK/$name.up"
    local ev
    ev=$(rails_events "$RAILS_WORK/$name")
    [ "$(echo "$ev" | wc -l)" = 2 ] || die "$name: the link events did not run"
    local down_end up_end
    down_end=$(echo "$ev" | awk 'NR == 1 { print $2 }')
    up_end=$(echo "$ev" | awk 'NR == 2 { print $2 }')
    B_FAILED=$(res "$name" failed)
    B_RATE=$(rails_rate "$RAILS_WORK/$name" $((down_end + 1000)) "$up_end")
    B_GAP=$(res "$name" gap_max_ms)
    # rail 2's share of a tick at its raw stream's rate, halved
    local half
    half=$(awk -v c="$C2" -v t=$TICK 'BEGIN { printf "%d", c * 1e9 * t / 1e3 / 2 }')
    B_BACK=$(ms_after "$(rails_first_carry "$RAILS_WORK/$name" write 2 "$up_end" 1048576)" "$up_end")
    B_FULL=$(ms_after "$(rails_first_carry "$RAILS_WORK/$name" write 2 "$up_end" "$half")" "$up_end")
}
outage_rows() { # outage_rows <label>
    row "$1: tasks FAILED" "$B_FAILED" "0" "" "=0" "-"
    row "    GB/s during the outage" "$B_RATE" @C1 "" "" "$A1"
    row "    longest wait for a task, ms" "$B_GAP" "" "" "" ""
    row "    ms from link up to a slice on rail 2" "$B_BACK" "" "" "<=2000" "-"
    row "    ms from link up to its share again" "$B_FULL" "" "" "" "-"
}
if want b; then
stamp "(b) rail 2 down at the initiator, then up"
DOWN=(rails_net_link 2 down)
UP=(rails_net_link 2 up)
outage b
outage_rows "(b) link down"
fi

if want b2; then
stamp "(b') rail 2 down at the target, then up"
DOWN=(ip -n "$RN_T" link set "${RN_PFX}t2" down)
UP=(ip -n "$RN_T" link set "${RN_PFX}t2" up)
outage b2
outage_rows "(b') far end down"
fi

# ---- (c) the fast rail throttled -------------------------------------------
if want c; then
stamp "(c) rail 2 throttled to 0.2 Gbit/s"
rails_event_script "$RAILS_WORK/c.shape" rails_net_shape 2 200mbit
run c T2 --seconds 10 --after-ms 5000 --event "3000=$RAILS_WORK/c.shape"
rails_net_shape 2 3gbit || die "cannot reshape rail 2 back to 3 Gbit/s"
c_end=$(rails_events "$RAILS_WORK/c" | awk 'NR == 1 { print $2 }')
[ -n "$c_end" ] || die "c: the throttle did not run"
C_PROBE=$(ms_after "$(rails_probe_only "$RAILS_WORK/c" write 2 "$c_end" 0.05 1000)" "$c_end")
C_P99=$(awk -v v="$(res c p99_us)" 'BEGIN { printf "%.1f", v / 1e3 }')
C_RATE=$(res c gbps)
row "(c) throttled: ms until probes only" "$C_PROBE" "" "" "<=2000" "-"
row "    p99 of 1 MiB tasks after, ms" "$C_P99" "$A1_P99" "$(ratio "$C_P99" "$A1_P99")" "<=1.50" "$A1_P99"
row "    GB/s after" "$C_RATE" @C1 "" "" "$A1"
fi

# ---- (d) priorities ----------------------------------------------------------
# d_case <qdisc>: the (d) rows with that qdisc behind every shaper
# (rails_net_child); the issue's setup is tbf's own FIFO.
d_case() {
    local q=$1 tag=""
    if [ "$q" != fifo ]; then # the shapers are made with their own FIFO
        rails_net_child "$q" || die "cannot put $q behind the shapers"
        tag=" [$q]"
    fi
    stamp "(d)$tag HIGH 4 KiB reads under LOW 64 MiB writes"
    local HI=(--lat-block 4096 --lat-op read --lat-prio 0)
    local BULK=(--threads 2 --block 64M --batch 2)
    # The 2-rail reference and load alternate D_PAIRS times (default 3) and
    # the table gives the medians (of an even count, the lower middle one):
    # an unloaded p99 here once moved between about 90 and 650 us from one
    # run to the next (54-75 us since the lend thread stopped being woken per
    # request), which alone could move the ratio past 2.  p50 and the count
    # of reads are the last pair's.
    local U2S="" P2S="" G2S="" PAIRS="" i u h
    for i in $(seq "$D_PAIRS"); do
        run du2.$q.$i T2 --seconds 8 --after-ms 2000 --threads 0 "${HI[@]}"
        run dp2.$q.$i T2 --seconds 8 --after-ms 2000 "${BULK[@]}" --prio 2 "${HI[@]}"
        u=$(res du2.$q.$i lat_p99_us)
        h=$(res dp2.$q.$i lat_p99_us)
        U2S+=" $u" P2S+=" $h" G2S+=" $(res dp2.$q.$i gbps)"
        PAIRS+=" $h/$u=$(ratio "$h" "$u")"
    done
    cp "$RAILS_WORK/dp2.$q.$D_PAIRS" "$RAILS_WORK/dp2.$q" # p50 and count: the last pair
    run du1.$q T1 --seconds 8 --after-ms 2000 --threads 0 "${HI[@]}"
    run dp1.$q T1 --seconds 8 --after-ms 2000 "${BULK[@]}" --prio 2 "${HI[@]}"
    run dn2.$q T2 --seconds 8 --after-ms 2000 "${BULK[@]}" --prio 0 "${HI[@]}"
    run dn1.$q T1 --seconds 8 --after-ms 2000 "${BULK[@]}" --prio 0 "${HI[@]}"
    local U2 U1 m label h2 h1 g2 g1 last
    U2=$(echo "$U2S" | median)
    U1=$(res du1.$q lat_p99_us)
    row "(d)$tag unloaded: 4 KiB read p99, us (median)" "$U2" "" "" "" "$U1"
    for m in p n; do
        if [ $m = p ]; then label="(d)$tag HIGH reads, LOW writes"; else label="(d')$tag one class (HIGH) for both"; fi
        h2=$(res d${m}2.$q lat_p99_us)
        h1=$(res d${m}1.$q lat_p99_us)
        g2=$(res d${m}2.$q gbps)
        last=""
        if [ $m = p ]; then
            last=" (last pair)"
            h2=$(echo "$P2S" | median)
            g2=$(echo "$G2S" | median)
        fi
        g1=$(res d${m}1.$q gbps)
        row "$label: read p99, us" "$h2" "$U2" "$(ratio "$h2" "$U2")" "<=2.00" "$h1"
        row "    read p50, us${last}" "$(res d${m}2.$q lat_p50_us)" "" "" "" "$(res d${m}1.$q lat_p50_us)"
        row "    reads done in 6 s${last}" "$(res d${m}2.$q lat_n)" "" "" "" "$(res d${m}1.$q lat_n)"
        row "    64 MiB writes, GB/s" "$g2" @C12 "" ">=0.80" "$g1"
    done
    # the floor: what plain sockets get for the same latency stream (marked
    # HIGH, answers unmarked, as the engine's) alone and under plain LOW
    # streams over both rails
    local RU RL RP
    RU=$(raw_ping_p99 "")
    RL=$(raw_ping_p99 bulk)
    RP=$(raw_ping_p99 paced)
    row "(d)$tag raw sockets: 4 KiB ping p99, us" "$RL" "$RU" "$(ratio "$RL" "$RU")" "(floor)" ""
    row "    LOW streams paced at 0.95 of each rail" "$RP" "$RU" "$(ratio "$RP" "$RU")" "(floor)" ""
    row "    those paced streams, GB/s" "$(awk '$1 == "total" { print $2 }' "$RAILS_WORK/ping_bulk.out")" @C12 "" "" ""
    D_PAIRS_LINES+=("(d)$tag loaded/unloaded p99 (us) of each of the $D_PAIRS pairs:$PAIRS")
    [ "$q" = fifo ] || rails_net_child fifo || die "cannot take $q from behind the shapers"
}
# raw_ping_p99 [bulk|paced]: tent_tcp_stream's 4 KiB ping over both rails
# (7 s), alone or under LOW (SO_PRIORITY 2) write streams on both -- paced
# at 0.95 of each rail's raw stream (SO_MAX_PACING_RATE), as the engine
# paces LOW under HIGH; its p99 in us
raw_ping_p99() {
    local paths lows bp="" p99
    mapfile -t paths < <(rail_paths 1 2)
    lows=("${paths[@]}")
    if [ "$1" = paced ]; then
        lows=("${paths[0]}/$(awk -v c="$C1_FIRST" 'BEGIN { printf "%.0f", 0.95 * c * 1e9 }')"
              "${paths[1]}/$(awk -v c="$C2_FIRST" 'BEGIN { printf "%.0f", 0.95 * c * 1e9 }')")
    fi
    if [ -n "$1" ]; then
        ip netns exec "$RN_I" "$STREAM" run --prio 2 9 write "${lows[@]}" \
            >"$RAILS_WORK/ping_bulk.out" 2>&1 &
        bp=$!
        sleep 1
    fi
    ip netns exec "$RN_I" "$STREAM" run --prio 6 7 ping "${paths[@]}" \
        >"$RAILS_WORK/ping.out" 2>"$RAILS_WORK/ping.err" ||
        die "tent_tcp_stream ping failed"
    if [ -n "$bp" ]; then wait "$bp" || die "tent_tcp_stream's LOW streams failed"; fi
    p99=$(sed -n 's/.*p99_us=\([0-9]*\).*/\1/p' "$RAILS_WORK/ping.out")
    [ -n "$p99" ] || die "tent_tcp_stream ping printed no p99"
    echo "$p99"
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
D_PAIRS_LINES=()
if want d; then
    D_PAIRS=${D_PAIRS:-3}
    [[ "$D_PAIRS" =~ ^[1-9][0-9]*$ ]] || die "D_PAIRS must be a count (1 or more), not '$D_PAIRS'"
    for q in ${D_QDISCS:-fifo pfifo_fast}; do
        d_case "$q"
    done
fi

# ---- the table -------------------------------------------------------------
ceilings
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b) ? a : b }'; }
C1=$(max "$C1" "$C1_FIRST")
C2=$(max "$C2" "$C2_FIRST")
C12=$(max "$C12" "$C12_FIRST")
stamp "done"
echo
echo "rails_bench: rails 1 and 3 Gbit/s (tbf), target on the slow rail's address"
printf '%-44s %10s %10s %7s %9s %11s\n' case engine "ceil/ref" ratio goal "single-rail"
for r in "${ROWS[@]}"; do
    IFS=$'\x1f' read -r c e ref ra goal single <<<"$r"
    if [[ "$ref" == @* ]]; then
        ref=${ref#@}
        ref=${!ref}
        ra=$(ratio "$e" "$ref")
    fi
    printf '%-44s %10s %10s %7s %9s %11s\n' "$c" "$e" "$ref" "$ra" "$goal" "$single"
done
echo "ceil/ref: the raw TCP write streams over the same rails (GB/s; the higher"
echo "of the two measurements), or for a latency the reference the header names;"
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
for l in "${D_PAIRS_LINES[@]}"; do echo "$l"; done
