#!/usr/bin/env bash
# Every function of the public headers has a doc comment right above it:
# TENT's API (include/tent/*.h, the TENT_API declarations) and Mooncake's
# classic C API (include/transfer_engine_c.h, every prototype).
#   api_docs_test.sh <include dir>
set -euo pipefail
inc=$1
fail=0
check() { # file, regex of a declaration's first line
    awk -v re="$2" -v f="$1" '
        /^[ \t]*$/ { next }
        $0 ~ re && prev !~ /\*\/[ \t]*$/ {
            printf "%s:%d: no doc comment above: %s\n", f, NR, $0; bad = 1
        }
        { prev = $0 }
        END { exit bad }' "$1" || fail=1
}
for h in "$inc"/tent/*.h; do
    check "$h" '^TENT_API '
done
# the classic header: a line that starts a prototype at column 0
check "$inc/transfer_engine_c.h" '^[a-z_][a-z_0-9 *]*[ *][a-zA-Z_][a-zA-Z_0-9]*\('
[ $fail = 0 ] && echo "every public function is documented"
exit $fail
