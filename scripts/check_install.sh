#!/usr/bin/env bash
# Builds and runs a program that uses only TENT's C API against an installed
# copy, once through pkg-config and once through find_package(tent); and the
# same for one that uses only Mooncake's classic C API (libtransfer_engine:
# transfer_engine.pc, tent::transfer_engine).
set -euo pipefail
PREFIX=${1:?usage: check_install.sh <install prefix>}
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
libdir=$(dirname "$(find "$PREFIX" -name 'tent.pc' | head -1)")/..
export PKG_CONFIG_PATH="$libdir/pkgconfig"
static=""
if [ ! -e "$libdir/libtent.so" ]; then static="--static"; fi
# as docs/getting-started.md builds it: the library's directory as the run
# path, so the program runs with no LD_LIBRARY_PATH under any prefix
rpath=()
if [ -z "$static" ]; then rpath=(-Wl,-rpath,"$(pkg-config --variable=libdir tent)"); fi
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror mooncake-transfer-engine/tent/examples/example_copy.c \
  $(pkg-config $static --cflags --libs tent) "${rpath[@]}" -o "$work/example_pc"
env -u LD_LIBRARY_PATH "$work/example_pc" 1048576 | tee "$work/out.txt"
grep -q "moved and verified" "$work/out.txt"
# Mooncake's classic C API: libtransfer_engine through transfer_engine.pc.
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror mooncake-transfer-engine/tent/examples/example_classic.c \
  $(pkg-config $static --cflags --libs transfer_engine) -o "$work/example_classic"
LD_LIBRARY_PATH="$libdir" "$work/example_classic" 1048576 | grep -q "moved and verified"

mkdir -p "$work/cm"
cp mooncake-transfer-engine/tent/examples/example_copy.c \
  mooncake-transfer-engine/tent/examples/example_classic.c "$work/cm/"
cat > "$work/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(consumer C)
find_package(tent REQUIRED)
add_executable(example_cm example_copy.c)
target_link_libraries(example_cm PRIVATE tent::tent)
add_executable(classic_cm example_classic.c)
target_link_libraries(classic_cm PRIVATE tent::transfer_engine)
CM
cmake -S "$work/cm" -B "$work/cm/build" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX" >/dev/null
cmake --build "$work/cm/build" >/dev/null
LD_LIBRARY_PATH="$libdir" "$work/cm/build/example_cm" 1048576 | grep -q "moved and verified"
LD_LIBRARY_PATH="$libdir" "$work/cm/build/classic_cm" 1048576 | grep -q "moved and verified"
echo "check_install: pkg-config and find_package consumers (tent, transfer_engine) built and moved bytes"

# The operator's tool and the man pages (tebench(1), tent-admin(1), tent(3)).
admin=$(find "$PREFIX" -path '*/bin/tent-admin' | head -1)
[ -x "$admin" ] || { echo "check_install: no bin/tent-admin under $PREFIX" >&2; exit 1; }
"$admin" --help | grep -q "usage: tent-admin"
rc=0; "$admin" list --metadata p2p 2>/dev/null || rc=$?
[ "$rc" = 3 ] || { echo "check_install: tent-admin list --metadata p2p exited $rc, want 3" >&2; exit 1; }
for page in man1/tebench.1 man1/tent-admin.1 man3/tent.3; do
  f=$(find "$PREFIX" -path "*/share/man/$page" | head -1)
  [ -s "$f" ] || { echo "check_install: no share/man/$page under $PREFIX" >&2; exit 1; }
  name=$(basename "$page" | sed 's/\.[0-9]$//')
  if command -v groff >/dev/null; then
    out=$(groff -man -Tutf8 -ww "$f" 2>&1 >/dev/null)
    [ -z "$out" ] || { echo "check_install: groff warns on $page: $out" >&2; exit 1; }
    groff -man -Tutf8 "$f" 2>/dev/null | grep -q "$name" ||
      { echo "check_install: $page does not render" >&2; exit 1; }
  fi
done
echo "check_install: tent-admin and the man pages tebench(1), tent-admin(1), tent(3) are installed"

# The installed tebench loads the installed mf_host library, not a build
# tree's, with no environment.
tebench=$(find "$PREFIX" -path '*/bin/tebench' | head -1)
if [ -x "$tebench" ] && [ -n "$(find "$PREFIX" -path '*/mf_host/libmf_smem.so' | head -1)" ]; then
  out=$(env -u MF_SMEM_LIBRARY -u LD_LIBRARY_PATH "$tebench" --loopback --xport_type=memfabric \
        --block_size=4K --batch_size=1 --duration=0.2 --total_buffer_size=64K 2>&1) ||
    { echo "check_install: installed tebench over memfabric failed: $out" >&2; exit 1; }
  lib=$(echo "$out" | sed -n 's/.*loopback over memfabric (mf_host \([^,]*\),.*/\1/p')
  case $lib in
  "$(cd "$PREFIX" && pwd -P)"/*) echo "check_install: installed tebench loads $lib" ;;
  *) echo "check_install: installed tebench loaded '$lib', not the installed library" >&2; exit 1 ;;
  esac
fi
