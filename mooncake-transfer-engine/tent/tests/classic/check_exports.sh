#!/usr/bin/env bash
# libtransfer_engine exports exactly the functions transfer_engine_c.h
# declares: nothing missing, nothing of its own (or of libtent) leaking.
set -euo pipefail
lib=${1:?usage: check_exports.sh <libtransfer_engine.so> <transfer_engine_c.h>}
header=${2:?}
want=$(grep -oE '^[a-z_]+[ *]+\**[A-Za-z]+\(' "$header" |
       sed -E 's/.*[ *]([A-Za-z]+)\($/\1/' | sort -u)
have=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TW]$/ {print $3}' | sort -u)
if [ "$want" != "$have" ]; then
  echo "exported symbols differ from the header's functions:"
  diff <(echo "$want") <(echo "$have") || true
  exit 1
fi
echo "$(echo "$want" | wc -l) functions exported, as declared"
