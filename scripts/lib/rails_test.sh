# The frame of the rail tests in network namespaces (tests/e2e/
# rails_netns_test.sh, tests/libfabric/rails_netns_libfabric_test.sh):
# loads rails_net.sh and rails_run.sh, then
#
#   rails_test_start <name> <tool>
#       exits 77 (prints why) where namespaces cannot be made and 1 where
#       the tent_rails_tool binary is missing; sets RAILS_TEST (the name in
#       every message) and RAILS_TOOL
#   rails_netns_setup <rate1> <rate2>
#       a scratch RAILS_WORK, the two hosts up (rails_net_up) and
#       rails_netns_teardown on exit; exits 1 where the hosts do not come up
#   rails_netns_teardown
#       stops every target, copies RAILS_WORK to $RAILS_TEST_KEEP when that
#       is set, removes the namespaces and RAILS_WORK
#   rails_test_target <host> <port> [--set k=v]...
#       target T (64 MiB) in $RN_T; exits 1 where it does not start
#   check <what> <condition (awk)> <figures...>
#       prints PASS or FAIL and the figures; counts failures in FAILS
#   res <run> <key>      a figure of a run's result line, -1 when none
#   rails_test_finish <log lines> [what]
#       stops target T and checks its status, then prints PASS and returns,
#       or prints FAIL with the last log lines of every run and exits 1

RAILS_TEST_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$RAILS_TEST_LIB/rails_net.sh"
. "$RAILS_TEST_LIB/rails_run.sh"

FAILS=0

rails_test_start() {
    RAILS_TEST=$1
    RAILS_TOOL=$2
    local why
    if ! why=$(rails_net_can); then
        echo "SKIP $RAILS_TEST: $why"
        exit 77
    fi
    [ -x "$RAILS_TOOL" ] || {
        echo "FAIL $RAILS_TEST: tent_rails_tool not found at $RAILS_TOOL" >&2
        exit 1
    }
}

rails_netns_teardown() {
    rails_targets_stop
    if [ -n "${RAILS_TEST_KEEP:-}" ]; then
        mkdir -p "$RAILS_TEST_KEEP" && cp -r "$RAILS_WORK"/. "$RAILS_TEST_KEEP"/
    fi
    rails_net_down
    rm -rf "$RAILS_WORK"
}

rails_netns_setup() {
    RAILS_WORK=$(mktemp -d "${TMPDIR:-/tmp}/tent_$RAILS_TEST.XXXXXX")
    trap rails_netns_teardown EXIT
    trap 'exit 1' INT TERM HUP
    rails_net_up "$$" "$1" "$2" || {
        echo "FAIL $RAILS_TEST: cannot set up the namespaces"
        exit 1
    }
}

rails_test_target() {
    local host=$1 port=$2
    shift 2
    rails_target_start T "$host" "$port" 64 "$@" || {
        echo "FAIL $RAILS_TEST: the target did not start"
        exit 1
    }
}

check() {
    local what=$1 cond=$2
    shift 2
    if awk "BEGIN { exit !($cond) }"; then
        echo "PASS $what ($*)"
    else
        echo "FAIL $what ($*)"
        FAILS=$((FAILS + 1))
    fi
}

res() {
    local v
    v=$(rails_result "$RAILS_WORK/$1" "$2")
    echo "${v:--1}"
}

rails_test_finish() {
    local lines=$1 what=${2:+ $2} trc f
    rails_target_stop T
    trc=$?
    check "the target ended cleanly" "$trc == 0" "status $trc"
    if [ "$FAILS" -gt 0 ]; then
        echo "FAIL $RAILS_TEST$what: $FAILS check(s) failed"
        for f in "$RAILS_WORK"/*.err; do
            [ -s "$f" ] || continue
            echo "---- $(basename "$f")"
            tail -n "$lines" "$f"
        done
        exit 1
    fi
    echo "PASS $RAILS_TEST$what"
}
