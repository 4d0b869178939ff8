#!/usr/bin/env bash
# Installs the Debian packages the build needs and, unless told "runtime",
# what the tests and tools need too.  Skips apt entirely when everything is
# already there.
#   scripts/deps.sh [all|runtime]   (runtime: build the library, tebench and
#                                    the demo; all, the default: also test)
set -euo pipefail
# the library, its tools and the demo's baselines (fio)
RUNTIME=(build-essential cmake ninja-build pkg-config libcjson-dev
         libhiredis-dev libcurl4-openssl-dev libmicrohttpd-dev liburing-dev
         libssl-dev
         python3 python3-dev fio procps libfabric-dev)
# the tests: cmocka, sanitizers and fuzzers, valgrind, the servers they
# start, the Python suites, the netns tests, the comparison benchmarks
TEST=(libcmocka-dev clang libclang-rt-14-dev valgrind iproute2
      etcd-server redis-server openssl python3-pytest python3-numpy python3-torch
      python3-pip python3-setuptools python3-wheel python3-venv
      prometheus ucx-utils clang-format clang-tidy libfabric-bin)
case ${1:-all} in
runtime) PKGS=("${RUNTIME[@]}") ;;
all) PKGS=("${RUNTIME[@]}" "${TEST[@]}") ;;
*) echo "deps.sh: unknown set '$1' (all or runtime)" >&2; exit 2 ;;
esac
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "deps: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
