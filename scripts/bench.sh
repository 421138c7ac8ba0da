#!/usr/bin/env bash
# The main benchmark command: installs the peer allocators, builds locus and
# the workloads (Release), then runs the full comparison with tools/bench.py.
# Extra arguments go to tools/bench.py, e.g.
#   scripts/bench.sh --repeat 3 --only timestep,hera --allocators glibc,locus-eco
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
