#!/bin/sh
# Builds the libFuzzer targets (clang, ASan+UBSan) and runs each for
# <seconds> (default 60).  Exit status is non-zero if any target finds a crash.
# Usage: fuzz/run_fuzz.sh [seconds] [build-dir]
set -eu
secs=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=${2:-$root/build-fuzz}
targets="fuzz_wire_frame fuzz_wire_desc fuzz_peer_addr fuzz_shm_handle fuzz_meta_etcd
  fuzz_mf_host_wire"
CC=clang cmake -S "$root" -B "$build" -G Ninja -DTENT_BUILD_FUZZ=ON \
  -DTENT_BUILD_BENCH=OFF -DBUILD_UNIT_TESTS=OFF >/dev/null
ninja -C "$build" $targets
# one target: its corpus, then the run; its status in $build/$t.status
run_one() {
  t=$1
  corpus="$build/corpus/$t"
  mkdir -p "$corpus"
  cp -n "$here/corpus/$t/"* "$corpus/" 2>/dev/null || true
  bin=$(find "$build" -name "$t" -type f -perm -u+x | head -n 1)
  if "$bin" -max_total_time="$secs" -max_len=65536 -timeout=10 \
      -print_final_stats=1 "$corpus" >"$build/$t.log" 2>&1; then
    echo 0 >"$build/$t.status"
  else
    echo 1 >"$build/$t.status"
  fi
}
# as many targets at once as there are CPUs (FUZZ_JOBS overrides)
jobs=${FUZZ_JOBS:-$(nproc)}
set -- $targets
while [ $# -gt 0 ]; do
  batch=""
  i=0
  while [ $# -gt 0 ] && [ $i -lt "$jobs" ]; do
    batch="$batch $1"
    shift
    i=$((i + 1))
  done
  echo "== $batch for ${secs}s"
  for t in $batch; do run_one "$t" & done
  wait
done
status=0
for t in $targets; do
  if [ "$(cat "$build/$t.status" 2>/dev/null)" != 0 ]; then
    echo "!! $t failed; see $build/$t.log"
    tail -n 40 "$build/$t.log"
    status=1
  else
    echo "== $t"
    grep -E "stat::number_of_executed_units|Done" "$build/$t.log" | tail -n 2
  fi
done
exit $status
