#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds a program against
# the installed libtransfer_engine with pkg-config (transfer_engine.pc), as
# a consumer does, then runs it: its own RUNPATH finds libtransfer_engine,
# and libtransfer_engine finds libtent next to itself ($ORIGIN).  The .pc
# files find the prefix from where they are (${pcfiledir}), so an install
# into another prefix than the configured one needs nothing more.
set -euo pipefail
build=${1:?usage: install_test.sh <build dir> <source dir> [sanitizers]}
src=${2:?}
# A sanitized build's libraries need the consumer built the same way.
san=${3:+-fsanitize=$3}
work=$(mktemp -d /tmp/classic-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
pc=$(find "$work/prefix" -name transfer_engine.pc | head -1)
[ -n "$pc" ] || { echo "FAIL: transfer_engine.pc not installed"; exit 1; }
[ -f "$work/prefix/include/transfer_engine_c.h" ] ||
  { echo "FAIL: include/transfer_engine_c.h not installed"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
export PKG_CONFIG_PATH="$libdir/pkgconfig"
static=""
if [ ! -e "$libdir/libtransfer_engine.so" ]; then static="--static"; fi
# shellcheck disable=SC2046,SC2086
cc -std=c11 -Wall -Werror $san "$src/mooncake-transfer-engine/tent/examples/example_classic.c" \
  $(pkg-config $static --cflags --libs transfer_engine) -Wl,-rpath,"$libdir" \
  -o "$work/example_classic"
env -u LD_LIBRARY_PATH "$work/example_classic" | tee "$work/out.txt"
grep -q "moved and verified" "$work/out.txt"
