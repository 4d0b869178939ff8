#!/usr/bin/env bash
# docs/design.md's layout names every folder of src/ (and of src/transport/)
# and no folder that does not exist.
#   design_layout_test.sh <repo root>
set -euo pipefail
root=$1
doc=$root/docs/design.md
src=$root/mooncake-transfer-engine/tent/src
fail=0
for d in "$src"/*/ "$src"/transport/*/; do
    rel=${d#"$src"/}
    rel=${rel%/}
    base=${rel##*/}
    # named as src/<rel>/, or inside a {a,b} group under its parent
    if ! grep -qE "src/${rel}/|src/${rel%/*}/\{[^}]*\b${base}\b[^}]*\}/|[ ,]${base}[ ,]" "$doc"; then
        echo "docs/design.md's layout does not name src/$rel/"
        fail=1
    fi
done
# every src/<x>/ the layout names exists
for named in $(grep -oE 'src/[a-z_]+/' "$doc" | sort -u); do
    [ -d "$root/mooncake-transfer-engine/tent/$named" ] || {
        echo "docs/design.md names $named, which does not exist"
        fail=1
    }
done
[ $fail = 0 ] && echo "docs/design.md's layout matches src/"
exit $fail
