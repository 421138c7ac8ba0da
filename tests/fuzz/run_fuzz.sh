#!/bin/sh
# Runs the libFuzzer target fuzz_ops for SECONDS.
#   run_fuzz.sh SECONDS SOURCE_DIR BINARY_DIR [FUZZ_BINARY]
# Without FUZZ_BINARY (the build is not clang), configures a clang build of the
# project in BINARY_DIR/clang-build and builds fuzz_ops there.
# Crash inputs are written to SOURCE_DIR/tests/fuzz/regressions/ (replayed by the
# fuzz_regressions ctest); the corpus grows in SOURCE_DIR/tests/fuzz/corpus-work/
# (git-ignored). Exit 77 (ctest: skipped) when clang or libFuzzer is missing.
set -u
secs=$1 src=$2 bin=$3 fz=${4:-}

if [ -z "$fz" ]; then
  clang=$(command -v clang || command -v clang-14 || true)
  if [ -z "$clang" ]; then
    echo "fuzz: SKIPPED: clang not found (scripts/setup.sh test installs it)"
    exit 77
  fi
  clangxx=$(command -v "${clang}++" || command -v clang++ || command -v c++ || true)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$tmp/t.c"
  if ! "$clang" -fsanitize=fuzzer,address "$tmp/t.c" -o "$tmp/t" >"$tmp/log" 2>&1; then
    echo "fuzz: SKIPPED: $clang cannot link -fsanitize=fuzzer (libfuzzer-14-dev / libclang-rt-14-dev missing)"
    cat "$tmp/log"
    exit 77
  fi
  bdir=$bin/clang-build
  gen=""
  if command -v ninja >/dev/null 2>&1 && [ ! -f "$bdir/Makefile" ]; then gen="-G Ninja"; fi
  echo "fuzz: building fuzz_ops with $clang in $bdir"
  # shellcheck disable=SC2086
  CC=$clang CXX=$clangxx cmake -S "$src" -B "$bdir" $gen -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLOCUS_BUILD_BENCH=OFF >"$bdir.configure.log" 2>&1 || { cat "$bdir.configure.log"; echo "fuzz: configure failed"; exit 1; }
  cmake --build "$bdir" --target fuzz_ops -j 2 || { echo "fuzz: build failed"; exit 1; }
  fz=$bdir/tests/fuzz/fuzz_ops
fi

corpus=$src/tests/fuzz/corpus-work
regress=$src/tests/fuzz/regressions
mkdir -p "$corpus" "$regress"
echo "fuzz: $fz for ${secs}s, corpus $corpus, crashes to $regress/"
# libFuzzer's own default error exit code is 77, which ctest would read as "skipped".
"$fz" -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 -max_len=4096 \
  -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
  -artifact_prefix="$regress/" "$corpus"
rc=$?
if [ $rc -ne 0 ]; then
  echo "fuzz: FAILED (exit $rc); the input is in $regress/; replay: $fz $regress/<file>"
  exit 1
fi
echo "fuzz: PASSED"
exit 0
