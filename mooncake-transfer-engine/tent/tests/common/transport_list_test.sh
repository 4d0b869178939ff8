#!/usr/bin/env bash
# README's transport table lists exactly the transports of
# src/transport/transports.def, in its order, each with its TRANSPORT_* name
# and the value the public header gives it.
#   transport_list_test.sh <transports.def> <README.md> <transfer_engine.h>
set -euo pipefail
def=$1 readme=$2 header=$3
want=$(sed -n 's/^TENT_XPORT(\([a-z_0-9]*\), *\([A-Z_0-9]*\)).*/\1 \2/p' "$def")
[ -n "$want" ] || { echo "no TENT_XPORT lines in $def"; exit 1; }
# rows of the table under "## Transports": | `name` | `TRANSPORT_X` (n) | ...
got=$(awk '/^## Transports/{t=1; next} /^## /{t=0} t && /^\| `/' "$readme" |
      sed -n 's/^| `\([a-z_0-9]*\)` | `TRANSPORT_\([A-Z_0-9]*\)` (\([0-9]*\)) |.*/\1 \2 \3/p')
fail=0
if [ "$(echo "$want")" != "$(echo "$got" | cut -d' ' -f1,2)" ]; then
    echo "README's transport table does not list transports.def's transports in order"
    echo "transports.def:"; echo "$want"
    echo "README:"; echo "$got"
    fail=1
fi
while read -r name suffix value; do
    [ -n "$name" ] || continue
    hv=$(sed -n "s/^#define TRANSPORT_${suffix}[[:space:]]*(\([0-9]*\)).*/\1/p" "$header")
    if [ "$hv" != "$value" ]; then
        echo "README gives TRANSPORT_${suffix} = $value, the header $hv"
        fail=1
    fi
done <<<"$got"
# every TENT_XPORT_TYPE value matches the header too (the build checks it
# as well; this names the line)
while read -r suffix value; do
    hv=$(sed -n "s/^#define TRANSPORT_${suffix}[[:space:]]*(\([0-9]*\)).*/\1/p" "$header")
    [ "$hv" = "$value" ] || { echo "transports.def: TRANSPORT_$suffix = $value, header: $hv"; fail=1; }
done < <(sed -n 's/^TENT_XPORT_TYPE(\([A-Z_0-9]*\), *\([0-9]*\),.*/\1 \2/p' "$def")
[ $fail = 0 ] && echo "transport list: $(echo "$want" | tr '\n' ' ')matches README and the header"
exit $fail
