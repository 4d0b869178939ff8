#!/usr/bin/env bash
# The RPC server routes frame types to the handlers transports install and
# knows their frames only through those handlers: nothing under src/rpc/
# includes a transport header or names a transport's frames -- the frame
# types (e.g. tcp's READ, WRITE, HELLO, FENCE, in identifiers or prose) and
# the identifiers each transport's wire header (src/transport/*/*_wire.h)
# declares.
#   rpc_frames_layering_test.sh <src dir>
set -u
SRC=$1
fail=0
if hits=$(grep -rnE '#include "(\.\./)*transport/' "$SRC/rpc"); then
    echo "FAIL: src/rpc includes a transport header:"
    echo "$hits"
    fail=1
fi
headers=$(ls "$SRC"/transport/*/*_wire.h 2>/dev/null)
[ -n "$headers" ] || { echo "FAIL: no transport wire header under $SRC/transport"; exit 1; }
# identifiers the wire headers declare (macros, types, functions, enum values)
ids=$(grep -ohE '\b[A-Za-z]+_wire_[A-Za-z0-9_]+\b|\b[A-Z]+_WIRE_[A-Z0-9_]+\b' $headers |
    grep -vE '^(TENT_WIRE_|tent_wire_)' | sort -u)
# the frame names: enum values of the form <PREFIX>_WIRE_<NAME> = <n>
frames=$(grep -ohE '\b[A-Z]+_WIRE_[A-Z0-9_]+ *= *[0-9]+' $headers | sed -E 's/^[A-Z]+_WIRE_([A-Z0-9_]+).*/\1/' | sort -u)
[ -n "$frames" ] || { echo "FAIL: no frame type found in $headers"; exit 1; }
pattern="$(echo "$ids" | sed 's/^/\\b/; s/$/\\b/' | paste -sd'|')"
fpattern="\\b([A-Za-z0-9]+_WIRE_)?($(echo "$frames" | paste -sd"|"))\\b"
if hits=$(grep -rnE "$pattern" "$SRC/rpc"); then
    echo "FAIL: src/rpc names a transport's wire identifiers:"
    echo "$hits"
    fail=1
fi
if hits=$(grep -rnE "$fpattern" "$SRC/rpc"); then
    echo "FAIL: src/rpc names a transport's frame types ($(echo $frames)):"
    echo "$hits"
    fail=1
fi
if [ $fail = 0 ]; then
    echo "PASS: $(ls "$SRC"/rpc/*.[ch] | wc -l) files of src/rpc name none of the $(echo "$ids" | wc -l)" \
        "identifiers and $(echo "$frames" | wc -l) frame types of $(echo "$headers" | wc -l) transport wire header(s)"
fi
exit $fail
