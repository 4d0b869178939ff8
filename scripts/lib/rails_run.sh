# Engines on the two hosts of rails_net.sh, for the rail benchmark
# (scripts/rails_bench.sh) and test (tests/e2e/rails_netns_test.sh).
# Source rails_net.sh first, bring the hosts up, set RAILS_TOOL (the
# tent_rails_tool binary) and RAILS_WORK (a scratch directory), then call
# the functions below: targets, initiator runs, and figures from a run's
# ticks (op: write, read or both, the data's direction; rail: 1 or 2;
# times in ms of the run's clock).

RAILS_TARGETS=""
RAILS_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# rails_target_start <id> <host> <port> <mib> [--set k=v]...
#   a target engine in $RN_T bound to host; sets <id>_SEG, <id>_ADDR (its
#   segment name and buffer address) and <id>_PID
rails_target_start() {
    local id=$1 host=$2 port=$3 mib=$4
    shift 4
    local fifo="$RAILS_WORK/$id.stdin" out="$RAILS_WORK/$id.out"
    rm -f "$fifo"
    mkfifo "$fifo" || return 1
    ip netns exec "$RN_T" "$RAILS_TOOL" target --host "$host" --port "$port" \
        --mib "$mib" "$@" <"$fifo" >"$out" 2>"$RAILS_WORK/$id.err" &
    printf -v "${id}_PID" '%s' "$!"
    # The target serves until its stdin closes: a holder keeps the fifo
    # open, and nothing else does (a shell's descriptor would be inherited
    # by every process started later, which would keep it open too).
    sleep 1000000 >"$fifo" &
    printf -v "${id}_HOLD" '%s' "$!"
    RAILS_TARGETS="$RAILS_TARGETS $id"
    local i pidv="${id}_PID"
    for i in $(seq 100); do
        if grep -q '^segment ' "$out" 2>/dev/null; then
            local _seg name addr
            read -r _seg name addr <"$out"
            printf -v "${id}_SEG" '%s' "$name"
            printf -v "${id}_ADDR" '%s' "$addr"
            return 0
        fi
        kill -0 "${!pidv}" 2>/dev/null || break
        sleep 0.1
    done
    echo "target $id did not start:" >&2
    cat "$RAILS_WORK/$id.err" >&2
    return 1
}

# rails_target_stop <id>: closes its stdin and waits for it (20 s, then
# kills it); returns its status
rails_target_stop() {
    local holdv="${1}_HOLD" pidv="${1}_PID"
    [ -n "${!holdv:-}" ] || return 0
    kill "${!holdv}" 2>/dev/null
    wait "${!holdv}" 2>/dev/null
    printf -v "$holdv" '%s' ""
    # it ends within the engine's shutdown; a target that does not is
    # killed after 20 s
    local i
    for i in $(seq 200); do
        kill -0 "${!pidv}" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "${!pidv}" 2>/dev/null; then
        echo "target $1 did not end within 20 s of its stdin closing: killed" >&2
        kill -9 "${!pidv}" 2>/dev/null
    fi
    wait "${!pidv}" 2>/dev/null
}

# rails_targets_stop: every target started
rails_targets_stop() {
    local id
    for id in $RAILS_TARGETS; do
        rails_target_stop "$id"
    done
    RAILS_TARGETS=""
}

# rails_run <out> <id> [run options]...: an initiator in $RN_I (bound to
# 10.77.1.1) against target <id>, its stdout in <out> (stderr in
# <out>.err); returns the tool's status
rails_run() {
    local out=$1 id=$2
    shift 2
    local segv="${id}_SEG" addrv="${id}_ADDR"
    # without a cluster secret a named address serves and sends from that
    # NIC alone: the initiator names both (a caller's --set comes later)
    ip netns exec "$RN_I" "$RAILS_TOOL" run --host 10.77.1.1 \
        --target "${!segv}" --addr "${!addrv}" \
        --set "transports/tcp/nics=${RN_PFX}i1,${RN_PFX}i2" "$@" \
        >"$out" 2>"$out.err"
}

# rails_result <out> <key>: a figure of the result line
rails_result() {
    sed -n 's/^result\(.*\) '"$2"'=\([^ ]*\).*/\2/p' "$1" | tail -n 1
}

# rails_ticks <out> <op>: the tick lines as columns
#   t_ms bytes failed in1 ewma1 in2 ewma2 data1 data2
# (in: the NIC's bytes in flight, ewma: its bandwidth in bytes/s, data:
# bytes its link carried in the data's direction since the previous tick
# -- sent for write, received for read, both for both; -1 when the
# kernel's counters are not readable), rails 1 and 2 by NIC name
rails_ticks() {
    awk -v n1="${RN_PFX}i1" -v n2="${RN_PFX}i2" -v op="$2" '
    /^tick / {
        t = b = f = ""; in1 = in2 = e1 = e2 = 0; c1 = c2 = -1
        for (i = 2; i <= NF; i++) {
            split($i, kv, "=")
            if (kv[1] == "t_ms") t = kv[2]
            else if (kv[1] == "bytes") b = kv[2]
            else if (kv[1] == "failed") f = kv[2]
            else if (kv[1] == "nic" || kv[1] == "link") {
                m = split(kv[2], p, ":")
                if (kv[1] == "nic" && p[1] == n1) { in1 = p[2]; e1 = p[3] }
                if (kv[1] == "nic" && p[1] == n2) { in2 = p[2]; e2 = p[3] }
                v = op == "read" ? p[3] : op == "both" ? p[2] + p[3] : p[2]
                if (kv[1] == "link" && p[1] == n1) c1 = v
                if (kv[1] == "link" && p[1] == n2) c2 = v
            }
        }
        d1 = (c1 >= 0 && have) ? c1 - l1 : -1
        d2 = (c2 >= 0 && have) ? c2 - l2 : -1
        l1 = c1; l2 = c2; have = 1
        print t, b, f, in1, e1, in2, e2, d1, d2
    }' "$1"
}

# rails_events <out>: the event lines as t_ms end_ms rc
rails_events() {
    sed -n 's/^event t_ms=\([0-9]*\) end_ms=\([0-9]*\) rc=\([-0-9]*\) .*/\1 \2 \3/p' "$1"
}

# rails_event_script <path> <command>...: a script for --event that runs
# the command (with RN_* set and rails_net.sh loaded)
rails_event_script() {
    local path=$1
    shift
    {
        echo '#!/usr/bin/env bash'
        printf 'RN_TAG=%q RN_T=%q RN_I=%q RN_PFX=%q\n' "$RN_TAG" "$RN_T" \
            "$RN_I" "$RN_PFX"
        [ -n "${RN_LATENCY:-}" ] && printf 'RN_LATENCY=%q\n' "$RN_LATENCY"
        printf '. %q\n' "$RAILS_LIB_DIR/rails_net.sh"
        printf '%q ' "$@"
        echo
    } >"$path"
    chmod +x "$path"
}

# rails_rate <out> <from> <to>: GB/s the engine completed between the
# first tick at or after from and the last at or before to
rails_rate() {
    rails_ticks "$1" write | awk -v a="$2" -v b="$3" '
        $1 >= a && t0 == "" { t0 = $1; b0 = $2 }
        $1 <= b { t1 = $1; b1 = $2 }
        END { printf "%.4f\n", (t1 > t0) ? (b1 - b0) / (t1 - t0) / 1e6 : 0 }'
}

# rails_min_rate <out> <from> <to> <win>: the least GB/s completed over
# any win ms between from and to
rails_min_rate() {
    rails_ticks "$1" write | awk -v a="$2" -v b="$3" -v w="$4" '
        $1 >= a && $1 <= b { n++; t[n] = $1; y[n] = $2 }
        END {
            m = -1
            for (i = 1; i <= n; i++)
                for (j = i + 1; j <= n; j++)
                    if (t[j] - t[i] >= w) {
                        r = (y[j] - y[i]) / (t[j] - t[i]) / 1e6
                        if (m < 0 || r < m) m = r
                        break
                    }
            printf "%.4f\n", m < 0 ? 0 : m
        }'
}

# rails_first_carry <out> <op> <rail> <from> <bytes>: the first tick at or
# after from in which the rail's link carried at least bytes (-1: none)
rails_first_carry() {
    rails_ticks "$1" "$2" | awk -v r="$3" -v a="$4" -v min="$5" '
        $1 >= a && found == "" && $(7 + r) >= min { found = $1 }
        END { print found == "" ? -1 : found }'
}

# rails_probe_only <out> <op> <rail> <from> <share> <win>: the first tick
# t at or after from such that in every window of win ms starting at a
# tick from t on (to the end of the run) the rail's link carried at most
# share of what both links carried (-1: none)
rails_probe_only() {
    rails_ticks "$1" "$2" | awk -v r="$3" -v a="$4" -v share="$5" -v w="$6" '
        $1 >= a && $8 >= 0 && $9 >= 0 { n++; t[n] = $1; d[n] = $(7 + r); s[n] = $8 + $9 }
        END {
            # ok[i]: the window of ticks (t[i], t[i] + w] is within share
            last = 0
            for (i = 1; i <= n; i++) {
                if (t[n] - t[i] < w) { ok[i] = 1; continue }
                mine = all = 0
                for (j = i + 1; j <= n && t[j] - t[i] <= w; j++) {
                    mine += d[j]; all += s[j]
                }
                ok[i] = mine <= share * all
            }
            found = -1
            for (i = n; i >= 1 && ok[i]; i--)
                found = t[i]
            if (found >= 0 && t[n] - found < w) found = -1
            print found
        }'
}

# rails_max_inflight <out> <rail>: the most bytes in flight at a tick
rails_max_inflight() {
    rails_ticks "$1" write | awk -v r="$2" '
        { v = $(2 + 2 * r); if (v > m) m = v }
        END { print m + 0 }'
}
