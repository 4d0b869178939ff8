# Two "hosts" in network namespaces joined by two shaped links (rails), for
# the rail tests and benchmark.  Source it, then:
#   rails_net_up <tag> <rate1> <rate2>    e.g. rails_net_up $$ 1gbit 3gbit
#   rails_net_down
#   rails_net_shape <rail 1|2> <rate>      reshape one rail (both directions)
#   rails_net_link <rail 1|2> <up|down>    set the initiator's end down/up
#   rails_net_child <kind>                 the qdisc behind every shaper:
#       fifo (tbf's own byte FIFO, the default) or a qdisc tc knows by name
#       with no options, e.g. pfifo_fast (a Linux host's default: three
#       bands by SO_PRIORITY); which exist depends on the kernel (this VM's
#       has no prio or fq_codel).
# Host T (the target) is namespace $RN_T, host I (the initiator) $RN_I.
# Rail r joins $RN_I's 10.77.r.1 to $RN_T's 10.77.r.2 (/24), on veth pairs
# ${RN_PFX}ir / ${RN_PFX}tr.  Every address exists only inside the
# namespaces.  tbf shapes each end's egress (netem is not available here).
#
# rails_net_can  prints why namespaces cannot be made and fails, or
# succeeds silently.

rails_net_can() {
    if [ "$(id -u)" -ne 0 ]; then echo "not root (ip netns needs CAP_SYS_ADMIN)"; return 1; fi
    command -v ip >/dev/null 2>&1 || { echo "iproute2 (ip) not installed"; return 1; }
    command -v tc >/dev/null 2>&1 || { echo "tc (iproute2) not installed"; return 1; }
    local t="tent-trial-$$" err
    err=$(ip netns add "$t" 2>&1) || { echo "'ip netns add' is not permitted here: $err"; return 1; }
    ip netns del "$t" 2>/dev/null
    err=$(ip link add "rnt$$" type veth peer name "rnu$$" 2>&1) ||
        { echo "veth pairs are not permitted here: $err"; return 1; }
    if ! err=$(tc qdisc add dev "rnt$$" root tbf rate 1gbit burst 256kb latency 5ms 2>&1); then
        ip link del "rnt$$" 2>/dev/null
        echo "tc tbf is not available here: $err"
        return 1
    fi
    ip link del "rnt$$" 2>/dev/null
    return 0
}

# tbf burst for a rate: at least one tick's worth at HZ 100 and 256 KiB.
rails_net_burst() {
    local bits
    case "$1" in
    *gbit) bits=$(awk "BEGIN{print ${1%gbit} * 1e9}") ;;
    *mbit) bits=$(awk "BEGIN{print ${1%mbit} * 1e6}") ;;
    *) bits=1000000000 ;;
    esac
    awk "BEGIN{b = $bits / 8 / 100; if (b < 262144) b = 262144; printf \"%d\", b}"
}

rails_net_qdisc() { # rails_net_qdisc <ns> <dev> <rate> <add|change>
    tc -n "$1" qdisc "$4" dev "$2" root handle 1: tbf rate "$3" \
        burst "$(rails_net_burst "$3")" latency "${RN_LATENCY:-20ms}"
}

rails_net_up() {
    RN_TAG=$1
    RN_T=tent-rt-$RN_TAG
    RN_I=tent-ri-$RN_TAG
    RN_PFX=rn${RN_TAG}
    RN_RATE1=$2 RN_RATE2=$3
    ip netns add "$RN_T" || return 1
    ip netns add "$RN_I" || return 1
    ip -n "$RN_T" link set lo up
    ip -n "$RN_I" link set lo up
    local r rate
    for r in 1 2; do
        if [ $r = 1 ]; then rate=$2; else rate=$3; fi
        ip link add "${RN_PFX}i$r" type veth peer name "${RN_PFX}t$r" || return 1
        ip link set "${RN_PFX}i$r" netns "$RN_I" || return 1
        ip link set "${RN_PFX}t$r" netns "$RN_T" || return 1
        ip -n "$RN_I" addr add "10.77.$r.1/24" dev "${RN_PFX}i$r"
        ip -n "$RN_T" addr add "10.77.$r.2/24" dev "${RN_PFX}t$r"
        ip -n "$RN_I" link set "${RN_PFX}i$r" up
        ip -n "$RN_T" link set "${RN_PFX}t$r" up
        rails_net_qdisc "$RN_I" "${RN_PFX}i$r" "$rate" add || return 1
        rails_net_qdisc "$RN_T" "${RN_PFX}t$r" "$rate" add || return 1
    done
    return 0
}

rails_net_shape() {
    printf -v "RN_RATE$1" '%s' "$2"
    rails_net_qdisc "$RN_I" "${RN_PFX}i$1" "$2" change &&
        rails_net_qdisc "$RN_T" "${RN_PFX}t$1" "$2" change
}

rails_net_child() {
    local r ns dev
    for r in 1 2; do
        for ns in I T; do
            if [ $ns = I ]; then ns=$RN_I dev=${RN_PFX}i$r; else ns=$RN_T dev=${RN_PFX}t$r; fi
            if [ "$1" = fifo ]; then
                # a child deleted leaves tbf with one that drops everything:
                # the shaper is made again, with its own FIFO
                tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null
                rails_net_qdisc "$ns" "$dev" "$(rails_net_rate $r)" add || return 1
            else
                tc -n "$ns" qdisc replace dev "$dev" parent 1:1 handle 10: "$1" || return 1
            fi
        done
    done
    return 0
}

rails_net_rate() { # the rate rail $1 is shaped to now
    if [ "$1" = 1 ]; then echo "$RN_RATE1"; else echo "$RN_RATE2"; fi
}

rails_net_link() {
    ip -n "$RN_I" link set "${RN_PFX}i$1" "$2"
}

rails_net_down() {
    [ -n "${RN_T:-}" ] && ip netns del "$RN_T" 2>/dev/null
    [ -n "${RN_I:-}" ] && ip netns del "$RN_I" 2>/dev/null
    return 0
}
