#!/usr/bin/env bash
# NUMA benchmarks in a QEMU guest with several nodes (docs/benchmarks.md,
# "NUMA benchmarks in a guest"): builds liblocus, bench_numa_timestep,
# bench_numa_first_touch and the placement checks of tests/numa/placement.c
# (Release), then runs tools/bench_numa.py, which boots one guest with
# tests/numa/guest/run.sh and runs every workload under glibc, jemalloc,
# tcmalloc, mimalloc and locus (LOCUS_PROFILE=uma and =numa), interleaved.
# Extra arguments go to tools/bench_numa.py, e.g.
#   scripts/bench-numa.sh                  # 2 nodes, repeat 3
#   scripts/bench-numa.sh --nodes 4 --repeat 1
#   scripts/bench-numa.sh --quick          # smoke test, a minute or two
#   scripts/bench-numa.sh --only numa_timestep --allocators glibc,tcmalloc,locus-numa
# Results land in results/scratch/numa-<timestamp>/ (results.md, results.json,
# local_share.png, guest-console.log), which git ignores.
# Needs qemu-system-x86, busybox-static and cpio (scripts/setup.sh test); the
# guest kernel is fetched once by tests/numa/guest/kernel.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${LOCUS_BENCH_BUILD_DIR:-build}

scripts/setup.sh bench
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
targets=(locus bench_numa_timestep bench_numa_first_touch)
placement=()
if ninja -C "$build" -t query numa_placement >/dev/null 2>&1; then
  # the target of tests/numa/CMakeLists.txt (the test suite is configured)
  targets+=(numa_placement)
  placement=(--placement-bin "$build/tests/numa/numa_placement")
else
  # tests not configured (LOCUS_BUILD_TESTS=OFF): the same source, by hand
  mkdir -p "$build/bench"
  ${CC:-cc} -O2 -Wall -Wextra -pthread tests/numa/placement.c -o "$build/bench/numa_placement" -ldl
  placement=(--placement-bin "$build/bench/numa_placement")
fi
ninja -C "$build" "${targets[@]}"
exec python3 tools/bench_numa.py --build-dir "$build" "${placement[@]}" "$@"
