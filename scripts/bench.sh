#!/usr/bin/env bash
# The main benchmark command: installs the peer allocators and matplotlib if
# missing (scripts/setup.sh bench), builds locus and the workloads (Release),
# then runs the comparison with tools/bench.py:
#   scripts/bench.sh           the default run: 13 workloads, the four peers and
#                              two locus profiles, 3 repetitions (<= 10 min here)
#   scripts/bench.sh --full    every workload under every allocator, 5 repetitions (hours)
#   scripts/bench.sh --quick   a smoke test (every workload once, small sizes)
# Other arguments go to tools/bench.py too, e.g.
#   scripts/bench.sh --repeat 5 --only timestep,hera --allocators glibc,locus-eco
# Results land in results/scratch/<timestamp>/ (results.md, results.json, *.png),
# which git ignores; to publish a run, copy it to results/<date>-<what>/ and
# commit it (docs/benchmarks.md, "Publishing a run").
set -euo pipefail
cd "$(dirname "$0")/.."
build=${LOCUS_BENCH_BUILD_DIR:-build}

scripts/setup.sh bench
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
ninja -C "$build"
exec python3 tools/bench.py --locus-lib "$build/liblocus.so" --bin-dir "$build/bench" "$@"
