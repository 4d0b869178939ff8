#!/usr/bin/env bash
# clang-tidy over every C file of src/ with the checks of .clang-tidy
# (bugprone, cognitive complexity), from a build's compile_commands.json;
# exits non-zero on any finding.  CI runs it.
#   scripts/tidy.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -f "$build/compile_commands.json" ] || {
    echo "tidy: $build/compile_commands.json is missing: configure with CMake first" >&2
    exit 1
}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# only the files this build compiles (a transport's folder is left out when
# its library is missing)
git ls-files 'mooncake-transfer-engine/tent/src/*.c' |
    while read -r f; do grep -q "\"file\": \"$PWD/$f\"" "$build/compile_commands.json" && echo "$f"; done |
    xargs -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet --extra-arg=-Wno-unknown-warning-option >"$out" 2>/dev/null || true
if grep -qE '(warning|error): ' "$out"; then
    grep -E '(warning|error): ' "$out" | sed "s|$PWD/||" | sort -u
    echo "tidy: findings above (.clang-tidy; NOLINT(check) with a reason where a finding is the intent)" >&2
    exit 1
fi
echo "tidy: $(git ls-files 'mooncake-transfer-engine/tent/src/*.c' | wc -l) files, no findings"
