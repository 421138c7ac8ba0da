#!/bin/sh
# The LOCUS_DEBUG build's run: configures and builds a second tree with the
# invariant assertions and the periodic heap validator compiled in, then runs
# the unit, stress (op counts halved: LOCUS_DEBUG_STRESS_SCALE) and misuse tests
# and the fuzz regressions against it.
#   run.sh SOURCE_DIR BINARY_DIR
set -u
src=$1 dir=$2/tree
gen=""
command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
[ -f "$dir/Makefile" ] && gen=""
start=$(date +%s)
# shellcheck disable=SC2086
if ! cmake -S "$src" -B "$dir" $gen -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOCUS_DEBUG=ON -DLOCUS_NESTED=ON \
     -DLOCUS_BUILD_BENCH=OFF -DLOCUS_STRESS_SCALE=${LOCUS_DEBUG_STRESS_SCALE:-2} >"$dir.configure.log" 2>&1; then
  cat "$dir.configure.log"; echo "debug: configure FAILED"; exit 1
fi
if ! cmake --build "$dir" -j 2 >"$dir.build.log" 2>&1; then
  tail -50 "$dir.build.log"; echo "debug: build FAILED"; exit 1
fi
built=$(date +%s)
echo "debug: LOCUS_DEBUG tree built in $((built - start)) s"
ctest --test-dir "$dir" -j 2 --output-on-failure --timeout 600 -L 'unit|stress|misuse|fuzz' -E 'fuzz_run|_long'
status=$?
echo "debug: tests ran in $(($(date +%s) - built)) s against the LOCUS_DEBUG build (status $status)"
exit $status
