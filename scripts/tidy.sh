#!/usr/bin/env bash
# clang-tidy over every C file of src/ with the checks of .clang-tidy
# (bugprone, cognitive complexity), from a build's compile_commands.json
# (configuring is enough: nothing needs building); exits non-zero on any
# finding, and when it cannot run (no clang-tidy, no file to check, a file
# clang cannot parse).  CI runs it.
#   scripts/tidy.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tidy=${CLANG_TIDY:-clang-tidy}
command -v "$tidy" >/dev/null || {
    echo "tidy: $tidy not found (apt-get install clang-tidy)" >&2
    exit 1
}
[ -f "$build/compile_commands.json" ] || {
    echo "tidy: $build/compile_commands.json is missing: configure with CMake first" >&2
    exit 1
}
out=$(mktemp)
err=$(mktemp)
files=$(mktemp)
trap 'rm -f "$out" "$err" "$files"' EXIT
# only the files this build compiles (a transport's folder is left out when
# its library is missing)
git ls-files 'mooncake-transfer-engine/tent/src/*.c' |
    while read -r f; do
        if grep -q "\"file\": \"$PWD/$f\"" "$build/compile_commands.json"; then echo "$f"; fi
    done >"$files"
nfiles=$(wc -l <"$files")
[ "$nfiles" -gt 0 ] || {
    echo "tidy: $build/compile_commands.json names no file of src/ (configured from another checkout?)" >&2
    exit 1
}
# clang-tidy exits 1 on a finding (xargs: 123); anything else is a failure
# to run, reported below
rc=0
xargs -P "$(nproc)" -n 4 "$tidy" -p "$build" --quiet \
    --extra-arg=-Wno-unknown-warning-option <"$files" >"$out" 2>"$err" || rc=$?
if grep -qE '(warning|error): ' "$out"; then
    grep -E '(warning|error): ' "$out" | sed "s|$PWD/||" | sort -u
    echo "tidy: findings above (.clang-tidy; NOLINT(check) with a reason where a finding is the intent)" >&2
    exit 1
fi
if [ "$rc" -ne 0 ] || grep -q 'Error while processing' "$err"; then
    cat "$err" >&2
    echo "tidy: clang-tidy failed (xargs exit $rc)" >&2
    exit 1
fi
echo "tidy: $nfiles files, no findings"
