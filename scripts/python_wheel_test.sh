#!/usr/bin/env bash
# The Python package as people install it: builds the `tent` wheel offline
# with Debian's packaging tools (pip wheel --no-build-isolation; setuptools
# runs the project's CMake), installs it into a fresh virtual environment and
# runs the Python test suites there, against the installed package only.
#
#   scripts/python_wheel_test.sh [WORK_DIR]      (default: build-wheel/)
#
# The venv sees Debian's site packages for numpy, torch and pytest
# (--system-site-packages); `tent` and `mooncake` must come from the wheel,
# which is checked before the tests run (and again by the tests' conftest).
# TENT_PYTHON_MOONCAKE_SHIM=OFF builds the wheel without the `mooncake`
# package (for hosts with a real Mooncake) and checks that it is absent.
# Debian packages: python3-pip python3-setuptools python3-wheel python3-venv
# (scripts/deps.sh installs them).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mkdir -p "${1:-$ROOT/build-wheel}" && cd "${1:-$ROOT/build-wheel}" && pwd)
PY=${TENT_WHEEL_PYTHON:-/usr/bin/python3}
PYSRC=$ROOT/mooncake-transfer-engine/tent/python
SHIM=${TENT_PYTHON_MOONCAKE_SHIM:-ON}
export TENT_PYTHON_MOONCAKE_SHIM=$SHIM TENT_PY_MOONCAKE_SHIM=$SHIM
unset PYTHONPATH

echo "== wheel: building in $WORK"
rm -rf "$WORK/dist" "$WORK/venv" "$WORK/setuptools"
export TENT_WHEEL_WORK_DIR=$WORK
(cd "$PYSRC" && "$PY" -m pip wheel --no-build-isolation --no-deps --no-index \
   --disable-pip-version-check -q -w "$WORK/dist" .)
WHEEL=$(ls "$WORK"/dist/tent-*.whl)
echo "== wheel: $(basename "$WHEEL")"
"$PY" -m zipfile -l "$WHEEL" | awk 'NR > 1 {print "   " $1}'

echo "== venv: $WORK/venv"
"$PY" -m venv --system-site-packages "$WORK/venv"
VPY=$WORK/venv/bin/python
"$VPY" -m pip install --no-index --no-deps --disable-pip-version-check -q \
  "$WHEEL"
SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
(cd "$WORK" && "$VPY" - "$SITE" "$SHIM" <<'PY'
import importlib.util, os, sys
site, shim = os.path.realpath(sys.argv[1]), sys.argv[2] != "OFF"
import tent, tent._tent, tent.mooncake
mods = [tent, tent._tent, tent.mooncake]
if shim:
    import mooncake.engine
    mods.append(mooncake.engine)
elif os.path.isdir(os.path.join(site, "mooncake")):
    sys.exit("TENT_PYTHON_MOONCAKE_SHIM=OFF, yet the wheel has mooncake")
for m in mods:
    where = os.path.realpath(m.__file__)
    if not where.startswith(site + os.sep):
        sys.exit("%s was imported from %s, not from the wheel in %s"
                 % (m.__name__, where, site))
print("   tent from", os.path.dirname(tent.__file__))
# mf_host's libmf_smem.so ships in the wheel and runs memfabric without an NPU
lib = tent.mf_host_library()
if not lib or not os.path.realpath(lib).startswith(site + os.sep):
    sys.exit("the wheel has no mf_host libmf_smem.so (got %r)" % (lib,))
print("   mf_host library", lib)
PY
)
EXT=$(ls "$SITE"/tent/_tent*.so)
if ldd "$EXT" | grep -q 'libtent\.so'; then
  echo "wheel: $EXT needs a libtent.so:" >&2
  ldd "$EXT" >&2
  exit 1
fi
if ldd "$EXT" | grep -q 'not found'; then
  echo "wheel: $EXT has unresolved libraries:" >&2
  ldd "$EXT" >&2
  exit 1
fi

echo "== tests (memfabric cases over mf_host's libmf_smem.so)"
cmake --build "$WORK/cmake" --target mf_smem >/dev/null
export TENT_MF_HOST_LIB=$WORK/cmake/mf_host/libmf_smem.so
export TENT_PY_EXPECT_SITE=$SITE
export PYTHONDONTWRITEBYTECODE=1
cd "$WORK"   # not the source tree: `import tent` must find the wheel's
"$VPY" -m pytest -q -p no:cacheprovider -rs "$PYSRC/tests"
