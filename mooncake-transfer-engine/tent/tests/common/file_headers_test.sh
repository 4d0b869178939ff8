#!/usr/bin/env bash
# A source file or script starts with a short comment saying what it is and why (at
# most MAX lines); the rest of the story lives next to the code it explains
# or in docs/.
#   file_headers_test.sh <tent source dir> [MAX]
set -euo pipefail
dir=$1
max=${2:-22}
fail=0
while IFS= read -r f; do
    n=$(awk 'NR == 1 && !/^\/\*/ { print 0; exit } /\*\// { print NR; exit }' "$f")
    if [ "${n:-0}" -gt "$max" ]; then
        echo "${f#"$dir"/}: its opening comment runs $n lines (at most $max)"
        fail=1
    fi
done < <(find "$dir/src" "$dir/include" "$dir/bench" "$dir/tools" "$dir/python" \
    \( -name '*.c' -o -name '*.h' \) 2>/dev/null | sort)
# shell scripts: the '#' lines after the #! line (the repository's scripts/
# and the test scripts)
while IFS= read -r f; do
    n=$(awk 'NR == 1 && /^#!/ { next } /^#/ { k++; next } { exit } END { print k + 0 }' "$f")
    if [ "$n" -gt "$max" ]; then
        echo "${f#"$dir"/}: its opening comment runs $n lines (at most $max)"
        fail=1
    fi
done < <(find "$dir/../../scripts" "$dir/tests" "$dir/bench" "$dir/fuzz" \
    -name '*.sh' 2>/dev/null | sort)
[ $fail = 0 ] && echo "every opening comment is at most $max lines"
exit $fail
