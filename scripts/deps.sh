#!/usr/bin/env bash
# Installs the Debian packages the build, the tests and the tools need.
# Skips apt entirely when everything is already there.
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config libcjson-dev libcmocka-dev
      clang libclang-rt-14-dev valgrind iproute2 procps
      etcd-server redis-server libhiredis-dev libcurl4-openssl-dev python3
      python3-dev python3-pytest python3-numpy python3-torch
      python3-pip python3-setuptools python3-wheel python3-venv
      libmicrohttpd-dev prometheus liburing-dev fio ucx-utils
      libfabric-dev libfabric-bin)
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
