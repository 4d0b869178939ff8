#!/usr/bin/env bash
# The libfabric transport's rails in network namespaces (issue 44, item 6):
#   rails_netns_libfabric_test.sh <path to tent_rails_tool>
#
# Two veth pairs (scripts/lib/rails_net.sh, shaped 1 and 3 Gbit/s), libfabric
# alone over tcp;ofi_rxm, one rail per veth, opened in opposite orders by
# the two ends (transports/libfabric/domains): rails must pair by fabric.
# The initiator reads, then writes and reads back, 1 MiB x 32 batches with
# every byte compared while rail 2's link goes down and comes back.
# Asserted (the contract in docs/transports/libfabric.md): status 0; no task
# FAILED but by the dead rail's timeout; no byte differs (but see the known
# limitation at the byte check); both rails carried bytes before the outage;
# data keeps moving during it; rail 2 carries bytes again within REJOIN_MS
# of link-up.  RAILS_TEST_KEEP=<dir> keeps the output.
# Needs root, iproute2 and tc (tbf); else it prints why and exits 77.
set -u

RAILS_TOOL=${1:?usage: rails_netns_libfabric_test.sh <path to tent_rails_tool>}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../../../../scripts/lib/rails_test.sh"
rails_test_start rails_netns_libfabric_test "$RAILS_TOOL"
command -v fi_info >/dev/null 2>&1 || {
    echo "SKIP rails_netns_libfabric_test: fi_info (libfabric-bin) not installed"
    exit 77
}

SLACK=${RAILS_TIME_SLACK:-2}
TIMEOUT_MS=1000 # transports/libfabric/timeout_ms: a dead rail's operations fail by then
# Rail 2 comes back once the operations abandoned on it return from the
# provider (its pair is rebuilt only then), that is when TCP retransmits
# on the old connection.  Its back-off doubles from an RTO that the shaped
# link's queueing (and a loaded machine) makes large: after the 3 s outage
# the next retransmission can come several seconds after link-up (CI saw
# none within 8 s after a 3.5 s outage), so the run goes on 10.5 s after
# it.
REJOIN_MS=$((4500 * SLACK))
TICK=100

# libfabric alone, tcp;ofi_rxm, the two veths as rails (both ends)
LF=(--set transports/tcp/enable=false --set transports/shm/enable=false
    --set transports/libfabric/enable=true
    --set "transports/libfabric/provider=tcp;ofi_rxm"
    --set transports/libfabric/max_rails=2
    --set "transports/libfabric/timeout_ms=$TIMEOUT_MS"
    --set transports/libfabric/rail_backoff_max_ms=800 ${RAILS_LF_EXTRA:-})

rails_netns_setup 1gbit 3gbit
# both ends must list the veths as their first two domains (a subnet each)
for ns in "$RN_I" "$RN_T"; do
    doms=$(ip netns exec "$ns" fi_info -p 'tcp;ofi_rxm' -t FI_EP_RDM 2>/dev/null |
        awk '/domain:/ { if (!seen[$2]++) print $2 }' | head -n 2 | sort | tr '\n' ' ')
    case "$doms" in
    "${RN_PFX}"?1" ${RN_PFX}"?2" ") ;;
    *)
        echo "SKIP rails_netns_libfabric_test: tcp;ofi_rxm in $ns lists '$doms' first, not its two veths"
        exit 77
        ;;
    esac
done

rails_test_target 10.77.1.2 17787 "${LF[@]}" \
    --set "transports/libfabric/domains=${RN_PFX}t1,${RN_PFX}t2"
# the initiator's rail 0 is the veth of rail 2
LF+=(--set "transports/libfabric/domains=${RN_PFX}i2,${RN_PFX}i1")

rails_event_script "$RAILS_WORK/ev_down.sh" rails_net_link 2 down
rails_event_script "$RAILS_WORK/ev_up.sh" rails_net_link 2 up

# scenario <name> <op>: rail 2's link down at 2.5 s, up at 5.5 s, 16 s of
# <op> (write: each round read back)
scenario() {
    local n=$1 op=$2
    rails_run "$RAILS_WORK/$n" T --op "$op" --seconds 16 --after-ms 500 \
        --interval-ms $TICK --check "${LF[@]}" \
        --event "2500=$RAILS_WORK/ev_down.sh" --event "5500=$RAILS_WORK/ev_up.sh"
    RC=$?
    rails_net_link 2 up
    local ev1 ev2
    ev1=$(rails_events "$RAILS_WORK/$n" | awk 'NR == 1 { print $2 }')
    ev2=$(rails_events "$RAILS_WORK/$n" | awk 'NR == 2 { print $2 }')
    echo "$n: $(grep '^result' "$RAILS_WORK/$n" || echo 'no result line')"
    local failed
    failed=$(res "$n" failed)
    # an operation on the dead rail that does not complete within
    # timeout_ms fails its task with that cause (its bytes may still land
    # later: it is not posted elsewhere); nothing else fails
    local named
    named=$(grep -c "task FAILED: libfabric tcp;ofi_rxm (${RN_PFX}i2): $op of [0-9]* bytes not completed after $TIMEOUT_MS ms" \
        "$RAILS_WORK/$n.err")
    [ "$op" = write ] && named=$((named + $(grep -c "task FAILED: libfabric tcp;ofi_rxm (${RN_PFX}i2): read of [0-9]* bytes not completed after $TIMEOUT_MS ms" \
        "$RAILS_WORK/$n.err")))
    check "$n: every FAILED task names the timeout on rail 2" \
        "$failed >= 0 && $named == $failed" "failed=$failed, with that cause $named"
    # A known limitation (docs/transports/libfabric.md, "Operations left
    # with the provider"): libfabric 1.17 can neither cancel a timed-out
    # RMA nor close its endpoint, so a WRITE that failed by timeout_ms
    # during the outage can land after link-up, over a later round's
    # pattern.  Every byte must match when no write failed; when some did,
    # the mismatch is reported, not counted, until that is fixed.
    local bad
    bad=$(res "$n" check_bad)
    if [ "$op" = write ] && [ "$failed" -gt 0 ] && [ "$bad" -gt 0 ]; then
        echo "KNOWN $n: $bad byte(s) differ after $failed write(s) failed by" \
            "timeout: late landing of an operation left with the provider"
        bad=0
    fi
    check "$n: every byte checked" \
        "$(res "$n" check_bytes) > 0 && $bad == 0" \
        "check_bytes=$(res "$n" check_bytes) check_bad=$(res "$n" check_bad)"
    local ran
    ran=$(rails_events "$RAILS_WORK/$n" | wc -l)
    check "$n: the events ran" "$ran == 2" "$ran of 2, done at ${ev1:-?} ${ev2:-?} ms"
    ev1=${ev1:-0}
    ev2=${ev2:-0}
    local before="$RAILS_WORK/$n.before" c1 c2 moving first back
    awk -v e="$ev1" '/^tick / { split($2, t, "="); if (t[2] + 0 > e + 0) exit } { print }' \
        "$RAILS_WORK/$n" >"$before"
    c1=$(rails_first_carry "$before" both 1 0 1048576)
    c2=$(rails_first_carry "$before" both 2 0 1048576)
    check "$n: both rails carried bytes before the link went down" "$c1 >= 0 && $c2 >= 0" \
        "first tick with >= 1 MiB: rail 1 at $c1 ms, rail 2 at $c2 ms"
    moving=$(rails_min_rate "$RAILS_WORK/$n" $((ev1 + TIMEOUT_MS + 500)) "$ev2" 1000)
    check "$n: data keeps moving over rail 1 while rail 2 is down" "$moving > 0" \
        "least GB/s over 1 s of the outage after the first ${TIMEOUT_MS} ms: $moving"
    first=$(rails_first_carry "$RAILS_WORK/$n" both 2 "$ev2" 1048576)
    back=$(awk -v t="$first" -v e="$ev2" 'BEGIN { print (t < 0) ? 999999 : t - e }')
    check "$n: link up: rail 2 carries bytes again within ${REJOIN_MS} ms" \
        "$back <= $REJOIN_MS" "after $back ms"
}
scenario reads read
scenario writes write

rails_test_finish 12
