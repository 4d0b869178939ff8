#!/usr/bin/env bash
# The transport contract's layering rule (README, "The transport contract"):
# nothing under src/transport/ includes a runtime header or calls a function
# the runtime declares -- a transport gets what it needs from the environment
# table it is handed at install.
#   transport_layering_test.sh <src dir>
set -u
SRC=$1
fail=0
if hits=$(grep -rnE '#include "(\.\./)*runtime/' "$SRC/transport"); then
    echo "FAIL: a transport includes a runtime header:"
    echo "$hits"
    fail=1
fi
# every function a runtime header declares
names=$(grep -ohE '\b(tent_[a-z0-9_]+)\(' "$SRC"/runtime/*.h | tr -d '(' | sort -u)
[ -n "$names" ] || { echo "FAIL: no function found in $SRC/runtime/*.h"; exit 1; }
pattern=$(echo "$names" | paste -sd'|')
if hits=$(grep -rnwE "$pattern" "$SRC/transport" --include='*.c' --include='*.h'); then
    echo "FAIL: a transport calls or names the runtime's functions:"
    echo "$hits"
    fail=1
fi
if [ $fail = 0 ]; then
    echo "PASS: $(find "$SRC/transport" -name '*.[ch]' | wc -l) transport files, none includes runtime/ or" \
        "names one of the $(echo "$names" | wc -l) functions the runtime's headers declare"
fi
exit $fail
