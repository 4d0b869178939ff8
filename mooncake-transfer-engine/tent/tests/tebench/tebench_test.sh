#!/usr/bin/env bash
# tebench end-to-end checks, one scenario per CTest test:
#   tebench_test.sh <path to tebench> <scenario> [transport]
# Scenarios: flags, loopback <xport>, metrics <xport>, mix <xport>, json <xport>,
# mainjob <expected default xport>, loglevel <xport>, corrupt <xport>,
# corrupt_read <xport>,
# range <xport>, target <xport>, auto <xport used>, unreachable,
# file <io_uring|bufio>.
set -u

TEBENCH=$1
SCENARIO=$2
XPORT=${3:-}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tebench_test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/out
ERR=$WORK/err
export MC_LOG_LEVEL=${MC_LOG_LEVEL:-warn}
# memfabric outside --loopback: mf_host over host_tcp unless told otherwise
if [ "$XPORT" = memfabric ]; then
    export MF_PROTOCOL=${MF_PROTOCOL:-host_tcp}
fi

fail() {
    echo "FAIL [$SCENARIO${XPORT:+ $XPORT}]: $*" >&2
    echo "---- stdout" >&2
    cat "$OUT" >&2 2>/dev/null
    echo "---- stderr" >&2
    tail -n 40 "$ERR" >&2 2>/dev/null
    exit 1
}

# run <expected status> args...: runs tebench with a hard time limit.
RC=0
run() {
    local want=$1
    shift
    timeout 90 "$TEBENCH" "$@" >"$OUT" 2>"$ERR"
    RC=$?
    if [ "$want" != any ] && [ "$RC" -ne "$want" ]; then
        fail "tebench $* exited $RC, expected $want"
    fi
}

# check_table <rows> <transport> [baseline]: the table has the tebench
# columns, one row per case, every number parses, BW > 0.
check_table() {
    local rows=$1 xport=$2 baseline=${3:-}
    local header
    header=$(grep -m1 'BlkSize (B)' "$OUT") || fail "no table header"
    for col in 'BlkSize (B)' 'Batch' 'BW (GB/S)' 'Avg Inst GB/s' \
        'Avg Lat (us)' 'Avg Tx (us)' 'P99 Tx (us)' 'P999 Tx (us)' \
        'Threads' 'Transport'; do
        case $header in
        *"$col"*) ;;
        *) fail "header lacks column '$col'" ;;
        esac
    done
    for col in 'CPU-I (s/GiB)' 'CPU-T (s/GiB)'; do
        case $header in
        *"$col"*) ;;
        *) fail "header lacks column '$col'" ;;
        esac
    done
    local nfields=12
    if [ -n "$baseline" ]; then
        for col in 'Memcpy (GB/S)' 'Socket (GB/S)' 'BW/Memcpy' 'BW/Socket' \
            'PingPong (us)' 'PP/AvgTx'; do
            case $header in
            *"$col"*) ;;
            *) fail "header lacks column '$col'" ;;
            esac
        done
        nfields=18
    fi
    local got
    got=$(grep -cE '^ *[0-9]+ +[0-9]+ ' "$OUT")
    [ "$got" -eq "$rows" ] || fail "expected $rows rows, got $got"
    grep -E '^ *[0-9]+ +[0-9]+ ' "$OUT" | awk -v n="$nfields" -v x="$xport" '
        NF != n { print "row has " NF " fields, expected " n ": " $0; bad = 1 }
        {
            for (i = 1; i <= 9; i++)
                if ($i !~ /^[0-9]+(\.[0-9]+)?$/) {
                    print "field " i " not a number: " $0; bad = 1
                }
            if (x != "" && $10 != x) {
                print "transport " $10 ", expected " x; bad = 1
            }
            if ($3 + 0 <= 0) { print "BW not > 0: " $0; bad = 1 }
            # the CPU cost per GiB: a number, or - when not known
            for (i = NF - 1; i <= NF; i++)
                if ($i !~ /^([0-9]+(\.[0-9]+)?|-)$/) {
                    print "CPU field " i " not a number: " $0; bad = 1
                }
            # the ceilings (memcpy, socket, ping-pong) are positive; a
            # ratio may print 0.000 (a 4 KiB batch-1 row against memcpy
            # on a loaded machine)
            for (i = 11; i <= NF - 2; i++)
                if ($i !~ /^[0-9]+(\.[0-9]+)?$/ ||
                    ((i == 11 || i == 12 || i == 15) && $i + 0 <= 0)) {
                    print "baseline field " i " not a number (ceilings > 0): " $0
                    bad = 1
                }
        }
        END { exit bad }' >"$WORK/awk" || fail "$(cat "$WORK/awk")"
}

COMMON=(--total_buffer_size=4M --duration=1 --warmup=0.1)

case $SCENARIO in
flags)
    run 2 --bogus_flag=1
    grep -q "unknown flag '--bogus_flag=1'" "$ERR" || fail "offending flag not named"
    grep -q '^Usage:' "$ERR" || fail "no usage on stderr"
    run 2 --block_size=4096,abc
    grep -q -- '--block_size' "$ERR" || fail "bad --block_size not named"
    run 2 --duration
    grep -q "flag '--duration' needs a value" "$ERR" || fail "missing value"
    run 2 --op_type=sideways
    grep -q -- '--op_type=sideways' "$ERR" || fail "bad --op_type not named"
    run 2 --xport_type=carrier_pigeon
    grep -q -- '--xport_type=carrier_pigeon' "$ERR" || fail "bad --xport_type"
    run 2 --check_consistency=maybe
    grep -q -- '--check_consistency=maybe' "$ERR" || fail "bad boolean"
    run 2 --threads=8:1
    grep -q -- '--threads' "$ERR" || fail "bad range not named"
    run 2 stray_argument
    grep -q "stray_argument" "$ERR" || fail "stray argument not named"
    run 2 --loopback --target_seg_name=x
    run 2 --config="$WORK/no_such_config.json"
    grep -q -- "--config=$WORK/no_such_config.json" "$ERR" || fail "bad --config not named"
    run 2 --seg_type=VRAM
    grep -q -- '--seg_type=VRAM' "$ERR" || fail "bad --seg_type not named"
    run 2 --backend=classic
    run 2 --metadata_type=zookeeper
    run 2 --rpc_server_port=70000
    grep -q -- '--rpc_server_port=70000' "$ERR" || fail "bad port not named"
    run 2 --total_buffer_size=12Q
    run 2 --nobogus
    grep -q "unknown flag '--nobogus'" "$ERR" || fail "--nobogus not named"
    run 2 --noduration
    run 0 --nojson --check_consistency=false -loopback=true --duration 3 --help
    grep -q -- '--xport_type' "$OUT" || fail "--help lacks flags"
    ;;
broken_ascend)
    # names from transports.def (and Mooncake's through the classic table);
    # a transport this build lacks is refused by name
    # a transport this build lacks is refused by name; rdma and efa run on
    # the libfabric transport with their provider where it is built (here
    # without a device: the engine fails naming the provider)
    for x in rdma:verbs\;ofi_rxm efa:efa; do
        name=${x%%:*} prov=${x#*:}
        "$TEBENCH" --xport_type=$name --loopback >"$OUT" 2>"$ERR" </dev/null
        RC=$?
        if grep -q 'this engine has no rdma transport' "$ERR"; then
            [ "$RC" -eq 2 ] || fail "$name refused with exit $RC, expected 2"
        else
            [ "$RC" -ne 0 ] || fail "$name ran: no $prov device expected here"
            grep -q "provider '$prov'" "$ERR" ||
                fail "$name: neither refused nor run on libfabric's $prov"
        fi
    done
    # ascend/memfabric on a broken setup fails with the seed's words, as the
    # classic API and mooncake.engine do
    for x in ascend memfabric; do
        env -u MF_PROTOCOL -u MF_DATA_OP_TYPE "$TEBENCH" --xport_type=$x \
            --metadata_type=p2p >"$OUT" 2>"$ERR" </dev/null
        RC=$?
        [ "$RC" -ne 0 ] || fail "$x without MF_PROTOCOL exited 0"
        grep -q 'InvalidArgument: MF_PROTOCOL must be set' "$ERR" ||
            fail "$x without MF_PROTOCOL: no seed words"
        MF_PROTOCOL=host_tcp MF_SMEM_LIBRARY=$WORK/libmf_smem.so \
            "$TEBENCH" --xport_type=$x --metadata_type=p2p \
            >"$OUT" 2>"$ERR" </dev/null
        RC=$?
        [ "$RC" -ne 0 ] || fail "$x without libmf_smem.so exited 0"
        grep -q 'DeviceNotFound: .*libmf_smem.so unavailable' "$ERR" ||
            fail "$x without libmf_smem.so: no seed words"
    done
    ;;
metrics)
    # --metrics: after each case, the transport's cumulative counters
    run 0 --loopback --xport_type="$XPORT" --op_type=write \
        --block_size=4096,65536 --metrics "${COMMON[@]}"
    check_table 2 "$XPORT"
    for c in 1 2; do
        grep -qE "^# metrics after case $c: transport=$XPORT read_bytes=0 write_bytes=[1-9][0-9]* read_requests=0 write_requests=[1-9][0-9]* read_failures=0 write_failures=0 attempts=[1-9][0-9]* attempt_failures=0 failovers_from=0 in_flight=0\$" "$OUT" ||
            fail "no metrics line for case $c"
    done
    r1=$(sed -n "s/^# metrics after case 1: .* write_requests=\([0-9]*\) .*/\1/p" "$OUT")
    r2=$(sed -n "s/^# metrics after case 2: .* write_requests=\([0-9]*\) .*/\1/p" "$OUT")
    [ "$r2" -gt "$r1" ] || fail "counters not cumulative: $r1 then $r2"
    # JSON rows stay alone on stdout; the metrics lines go to stderr
    run 0 --loopback --xport_type="$XPORT" --json --metrics "${COMMON[@]}"
    grep -q "^# metrics after case 1: transport=$XPORT" "$ERR" ||
        fail "no metrics line on stderr with --json"
    if grep -q '^# metrics' "$OUT"; then fail "metrics line on stdout with --json"; fi
    ;;
loopback)
    # read, batches and blocks: 2 x 2 cases, every byte verified
    run 0 --loopback --xport_type="$XPORT" --check_consistency \
        --block_size=4096,65536 --batch_size=1,4 "${COMMON[@]}"
    check_table 4 "$XPORT"
    grep -q 'every byte read back verified' "$ERR" || fail "no verification"
    ;;
mix)
    # writes read back, mixed ops, two threads, a range of block sizes
    run 0 --loopback --xport_type "$XPORT" --op_type=write \
        --check_consistency --block_size=4K:16K:4 --threads=2 "${COMMON[@]}"
    check_table 2 "$XPORT"
    run 0 --loopback --xport_type="$XPORT" --op_type=mix --check_consistency \
        --block_size=8192 --batch_size=8 --start_num_threads=1 \
        --max_num_threads=2 "${COMMON[@]}"
    check_table 2 "$XPORT"
    ;;
json)
    run 0 --loopback --xport_type="$XPORT" --json --baseline \
        --block_size=4096,16384 "${COMMON[@]}"
    n=$(grep -c '^{.*}$' "$OUT")
    [ "$n" -eq 2 ] || fail "expected 2 JSON rows, got $n"
    if command -v python3 >/dev/null; then
        python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    for k in ("block_size", "batch_size", "threads", "bw_gbps", "avg_lat_us",
              "avg_tx_us", "p99_tx_us", "p999_tx_us", "transport"):
        assert k in r, k
    assert r["bw_gbps"] > 0 and r["transport"] == sys.argv[2], r
    # --baseline: the ceilings and the ratios to them
    for k in ("memcpy_gbps", "socket_gbps", "pingpong_us"):
        assert r[k] > 0, (k, r)
    assert abs(r["ratio_pingpong"] - r["pingpong_us"] / r["avg_tx_us"]) \
        < 1e-3 * r["ratio_pingpong"] + 1e-6, r
    # --loopback: the CPU cost of both processes per GiB moved
    for k in ("cpu_s_per_gib_initiator", "cpu_s_per_gib_target"):
        assert r[k] >= 0, (k, r)
' "$OUT" "$XPORT" || fail "JSON rows malformed"
    fi
    ;;
auto)
    # --xport_type=auto: the engine picks (shm before tcp when both are
    # enabled); the Transport column reports what it actually used
    echo '{"transports": {"tcp": {"enable": true}, "shm": {"enable": true}}}' \
        >"$WORK/auto.json"
    run 0 --loopback --xport_type=auto --config="$WORK/auto.json" --json \
        --block_size=65536 "${COMMON[@]}"
    grep -q "\"transport\": \"$XPORT\"" "$OUT" ||
        fail "Transport is not the one the engine used ($XPORT)"
    ;;
mainjob)
    # the README main job: no --xport_type, so the default transport
    # (memfabric over mf_host when built, else tcp; $XPORT says which),
    # with the memcpy and socket ceilings and the ratios
    run 0 --loopback --baseline --check_consistency --block_size=4096,1M \
        "${COMMON[@]}"
    check_table 2 "$XPORT" baseline
    # tebench's log level is warning by default: no INFO line among the rows
    if grep -q ' INFO ' "$OUT" "$ERR"; then fail "INFO lines in the output"; fi
    ;;
loglevel)
    # --log_level (default warning) decides the engine's log level, over
    # the config file's; a bad value is refused naming the flag
    printf '{"log_level": "info"}\n' >"$WORK/info.json"
    run 0 --loopback --xport_type="$XPORT" --config="$WORK/info.json" \
        --block_size=4096 "${COMMON[@]}"
    check_table 1 "$XPORT"
    if grep -q ' INFO ' "$OUT" "$ERR"; then fail "INFO lines by default"; fi
    run 0 --loopback --xport_type="$XPORT" --log_level=info \
        --block_size=4096 "${COMMON[@]}"
    check_table 1 "$XPORT"
    grep -q ' INFO .*engine created' "$ERR" ||
        fail "--log_level=info shows no INFO line"
    if grep -q ' INFO ' "$OUT"; then fail "INFO lines on stdout"; fi
    run 2 --log_level=loud
    grep -q -- '--log_level=loud' "$ERR" || fail "bad --log_level not named"
    ;;
corrupt)
    TEBENCH_TEST_CORRUPT=1 run any --loopback --xport_type="$XPORT" \
        --check_consistency --block_size=4096 "${COMMON[@]}"
    [ "$RC" -eq 3 ] || fail "expected exit 3 (mismatch), got $RC"
    grep -q 'consistency mismatch: .*buffer offset 100 .*expected 0x[0-9a-f]*, got 0x' "$ERR" ||
        fail "no mismatch line naming offset and bytes"
    ;;
corrupt_read)
    # flipped well after the seed pass: caught by a benchmark read
    TEBENCH_TEST_CORRUPT=1 TEBENCH_TEST_CORRUPT_DELAY_MS=300 run any \
        --loopback --xport_type="$XPORT" --check_consistency \
        --block_size=4096 --total_buffer_size=1M --duration=2 --warmup=0.1
    [ "$RC" -eq 3 ] || fail "expected exit 3 (mismatch), got $RC"
    grep -q 'consistency mismatch: case 1 (.*op=read, read), .*buffer offset 100 .*expected 0x[0-9a-f]*, got 0x' "$ERR" ||
        fail "no mismatch line for a benchmark read"
    ;;
range)
    # --target_offset/--target_range_size: a window of the target buffer
    run 0 --loopback --xport_type="$XPORT" --check_consistency \
        --op_type=mix --target_offset=12288 --target_range_size=1M \
        --block_size=4096 --batch_size=4 "${COMMON[@]}"
    check_table 1 "$XPORT"
    run 1 --loopback --xport_type="$XPORT" --target_offset=8M \
        --block_size=4096 "${COMMON[@]}"
    grep -q -- '--target_offset=8388608' "$ERR" || fail "bad offset not named"
    ;;
target)
    # target mode prints the exact initiator command; two targets serve one
    # initiator (comma list); SIGINT ends a target cleanly
    pids=()
    cmds=()
    for i in 1 2; do
        "$TEBENCH" --xport_type="$XPORT" --total_buffer_size=2M \
            >"$WORK/t$i.out" 2>"$WORK/t$i.err" &
        pids+=($!)
    done
    for i in 1 2; do
        for _ in $(seq 100); do
            grep -q 'Serving until' "$WORK/t$i.out" 2>/dev/null && break
            sleep 0.1
        done
        cmd=$(grep -- '--target_seg_name=' "$WORK/t$i.out") ||
            { kill "${pids[@]}"; fail "target $i printed no initiator command"; }
        cmds+=("$cmd")
    done
    # run target 1's command exactly as printed, with case flags appended
    read -r -a argv <<<"${cmds[0]}"
    [ "${argv[0]}" = "$TEBENCH" ] || { kill "${pids[@]}"; fail "command is not this tebench: ${argv[0]}"; }
    timeout 60 "${argv[@]}" --block_size=4096 --check_consistency \
        "${COMMON[@]}" >"$OUT" 2>"$ERR" ||
        { kill "${pids[@]}"; fail "printed initiator command failed"; }
    check_table 1 "$XPORT"
    name1=${cmds[0]#*--target_seg_name=}
    name1=${name1%% *}
    name2=${cmds[1]#*--target_seg_name=}
    name2=${name2%% *}
    timeout 60 "$TEBENCH" --target_seg_name="$name1,$name2" \
        --xport_type="$XPORT" --threads=2 --block_size=4096 --op_type=write \
        --check_consistency "${COMMON[@]}" >"$OUT" 2>"$ERR" ||
        { kill "${pids[@]}"; fail "two-target run failed"; }
    check_table 1 "$XPORT"
    kill -INT "${pids[@]}"
    for p in "${pids[@]}"; do
        wait "$p" || fail "target $p exited $? after SIGINT"
    done
    ;;
unreachable)
    start=$(date +%s%N)
    run any --target_seg_name=127.0.0.1:1 --duration=1
    end=$(date +%s%N)
    [ "$RC" -ne 0 ] || fail "unreachable target exited 0"
    [ $(((end - start) / 1000000)) -lt 6000 ] || fail "took more than 5 s"
    grep -q "127.0.0.1:1" "$ERR" || fail "error does not name the target"
    ;;
file)
    # a file segment: tebench creates the file with data, every byte of a
    # read/write mix checked; then a corrupted byte in the file is noticed;
    # then --baseline runs fio on the same file (when fio is installed)
    F=$WORK/kv.bin
    run 0 --target_seg_name="file://$F" --xport_type="$XPORT" \
        --total_buffer_size=8M --block_size=4096,65536 --batch_size=8 \
        --op_type=mix --check_consistency --duration=0.5 --warmup=0.1
    check_table 2 "$XPORT"
    [ "$(stat -c %s "$F")" -eq $((8 << 20)) ] || fail "file not created"
    run 0 --target_seg_name="file://$F" --xport_type="$XPORT" \
        --total_buffer_size=8M --op_type=write_seed --check_consistency \
        --block_size=65536 --batch_size=4 --duration=0.2 --warmup=0
    printf 'X' | dd of="$F" bs=1 seek=123457 conv=notrunc status=none
    run 3 --target_seg_name="file://$F" --xport_type="$XPORT" \
        --total_buffer_size=8M --op_type=read_verify --block_size=65536 \
        --batch_size=4 --duration=0.2 --warmup=0
    grep -q "offset 123457" "$ERR" || fail "the corrupted offset is not named"
    run 1 --target_seg_name="file://$WORK" --xport_type="$XPORT" --duration=0.2
    grep -q "is a directory" "$ERR" || fail "a directory target is not refused by name"
    if command -v fio >/dev/null; then
        run 0 --target_seg_name="file://$F" --xport_type="$XPORT" \
            --total_buffer_size=8M --block_size=65536 --batch_size=8 \
            --op_type=read --json --baseline --duration=0.5 --warmup=0.1
        python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
assert len(rows) == 1, rows
r = rows[0]
assert r["transport"] == sys.argv[2] and r["bw_gbps"] > 0, r
assert r["fio_gbps"] > 0, r
assert abs(r["ratio_fio"] - r["bw_gbps"] / r["fio_gbps"]) < 1e-3, r
assert "memcpy_gbps" not in r, r
' "$OUT" "$XPORT" || fail "file --baseline JSON rows malformed"
    else
        echo "fio not installed: the --baseline part is not checked" >&2
    fi
    ;;
*)
    fail "unknown scenario"
    ;;
esac
echo "PASS [$SCENARIO${XPORT:+ $XPORT}]"
