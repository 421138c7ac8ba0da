#!/usr/bin/env bash
# Builds locus and runs the test suite (ctest). Extra arguments go to ctest,
# e.g. scripts/test.sh -R test_api. Set LOCUS_LONG_TESTS=1 for the long variants.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
build=${LOCUS_BUILD_DIR:-build}
long=OFF; [ "${LOCUS_LONG_TESTS:-0}" = 1 ] && long=ON
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOCUS_LONG_TESTS=$long >/dev/null
ninja -C "$build"
ctest --test-dir "$build" --output-on-failure -j2 --timeout 900 "$@"
