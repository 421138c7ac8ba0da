#!/usr/bin/env bash
# ctest cross_aarch64: builds locus for aarch64 with Debian's cross compiler
# and runs its unit, stress and misuse tests under qemu-user.
#
#   run.sh SOURCE_DIR BUILD_DIR [CMAKE] [CTEST] [HOST_LIBLOCUS_A]
#
# 1. configures BUILD_DIR with cmake/toolchain-aarch64-linux-gnu.cmake
#    (-DLOCUS_NESTED=ON -DLOCUS_BUILD_BENCH=OFF, Release, Ninja; the stress op
#    counts divided by LOCUS_STRESS_SCALE) and builds every target;
# 2. checks that liblocus.so, liblocus.a and a test program are AArch64 ELF,
#    and that liblocus.a defines exactly the names liblocus.so exports, all of
#    them API names (and the same set as HOST_LIBLOCUS_A, the x86-64 archive);
# 3. runs `ctest -L 'unit|stress|misuse'` in BUILD_DIR: the toolchain file
#    makes ctest run each test program under qemu-aarch64 -L /usr/aarch64-linux-gnu.
#
# Environment: LOCUS_CROSS_SCALE (stress op divisor, default 30),
# LOCUS_CROSS_LABELS (ctest label regex, default 'unit|stress|misuse'),
# LOCUS_CROSS_EXCLUDE (ctest -E regex, default '^test_numa$': qemu-user has no
# get_mempolicy/mbind/move_pages, so NUMA placement cannot be tested under it),
# LOCUS_CROSS_JOBS (ctest and build parallelism, default 2).
# Exit 77 (ctest: skipped) when the cross compiler, the cross libc, qemu-user
# or ninja is missing, or when the host is aarch64 itself.
set -u
src=$1 bin=$2
cmake_bin=${3:-cmake} ctest_bin=${4:-ctest} host_a=${5:-}
triple=aarch64-linux-gnu
sysroot=/usr/$triple
scale=${LOCUS_CROSS_SCALE:-30}
labels=${LOCUS_CROSS_LABELS:-unit|stress|misuse}
exclude=${LOCUS_CROSS_EXCLUDE-^test_numa\$}
jobs=${LOCUS_CROSS_JOBS:-2}
toolchain=$src/cmake/toolchain-aarch64-linux-gnu.cmake
t0=$(date +%s)

skip() { echo "cross_aarch64: SKIPPED: $*"; exit 77; }
fail() { echo "cross_aarch64: FAILED: $* ($(($(date +%s) - t0)) s)"; exit 1; }
elapsed() { echo $(($(date +%s) - $1)); }

# ---- what is needed
[ "$(uname -m)" = aarch64 ] && skip "the host is aarch64: the normal suite already runs there"
for tool in $triple-gcc $triple-g++ $triple-objcopy $triple-nm $triple-readelf; do
  command -v "$tool" >/dev/null 2>&1 ||
    skip "$tool not found (apt-get install gcc-$triple g++-$triple)"
done
[ -e "$sysroot/lib/ld-linux-aarch64.so.1" ] && [ -e "$sysroot/include/stdio.h" ] ||
  skip "no aarch64 C library in $sysroot (apt-get install libc6-dev-arm64-cross)"
qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static) ||
  skip "qemu-aarch64 not found (apt-get install qemu-user)"
command -v ninja >/dev/null 2>&1 || skip "ninja not found (apt-get install ninja-build)"
[ -f "$toolchain" ] || fail "no toolchain file $toolchain"

echo "cross_aarch64: compiler: $($triple-gcc --version | head -1)"
echo "cross_aarch64: compiler: $($triple-g++ --version | head -1)"
echo "cross_aarch64: emulator: $("$qemu" --version | head -1) ($qemu -L $sysroot)"
echo "cross_aarch64: cmake:    $("$cmake_bin" --version | head -1)"

# qemu-user writes a core file of the guest for each abort (the misuse cases
# abort on purpose) when core files are allowed.
ulimit -c 0 2>/dev/null

# ---- configure and build
mkdir -p "$bin"
# A tree configured from another source dir or with another generator is started anew.
if [ -f "$bin/CMakeCache.txt" ]; then
  if ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$src" "$bin/CMakeCache.txt" ||
     ! grep -qx "CMAKE_GENERATOR:INTERNAL=Ninja" "$bin/CMakeCache.txt"; then
    rm -rf "$bin"; mkdir -p "$bin"
  fi
fi
t=$(date +%s)
if ! "$cmake_bin" -S "$src" -B "$bin" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$toolchain" \
     -DCMAKE_BUILD_TYPE=Release -DLOCUS_NESTED=ON -DLOCUS_BUILD_BENCH=OFF \
     -DLOCUS_LONG_TESTS=OFF -DLOCUS_STRESS_SCALE="$scale" >"$bin.configure.log" 2>&1; then
  cat "$bin.configure.log"
  fail "configure of $bin"
fi
echo "cross_aarch64: configured $bin in $(elapsed "$t") s"
t=$(date +%s)
if ! "$cmake_bin" --build "$bin" -j "$jobs" >"$bin.build.log" 2>&1; then
  echo "---- compiler errors (full log: $bin.build.log)"
  grep -E -B2 -A6 'error:|Error [0-9]|FAILED:' "$bin.build.log" | head -150
  fail "aarch64 build"
fi
echo "cross_aarch64: built in $(elapsed "$t") s ($(grep -c 'warning:' "$bin.build.log") compiler warnings)"
grep -E -A3 'warning:' "$bin.build.log" | head -40

# ---- really aarch64?
machine() { $triple-readelf -h "$1" 2>/dev/null | sed -n 's/^ *Machine: *//p' | sort -u | tr '\n' ' '; }
for f in "$bin/liblocus.so" "$bin/liblocus.a" "$bin/tests/stress/stress"; do
  [ -e "$f" ] || fail "$f was not built"
  m=$(machine "$f")
  echo "cross_aarch64: $(basename "$f"): $m"
  [ "$m" = "AArch64 " ] || fail "$f is not AArch64 (readelf: ${m:-not ELF})"
done

# ---- liblocus.a defines only the API (internal names localised, as on x86-64)
api='^(locus_[A-Za-z0-9_]+|_Z(nw|na|dl|da)[A-Za-z0-9_]+|__libc_[a-z_]+|__posix_memalign|malloc|calloc|realloc|reallocarray|free|cfree|free_sized|free_aligned_sized|aligned_alloc|posix_memalign|memalign|valloc|pvalloc|malloc_usable_size|malloc_trim|malloc_info|malloc_stats|mallopt|mallinfo2?|sigaction|signal)$'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$triple-nm -g --defined-only "$bin/liblocus.a" | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/a"
$triple-nm -D --defined-only "$bin/liblocus.so" | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/so"
echo "cross_aarch64: liblocus.a defines $(wc -l <"$tmp/a") global names, liblocus.so exports $(wc -l <"$tmp/so")"
if grep -Ev "$api" "$tmp/a" >"$tmp/bad"; then
  echo "---- names of liblocus.a that are not API names:"; cat "$tmp/bad"
  fail "aarch64 liblocus.a defines internal names"
fi
if ! diff "$tmp/so" "$tmp/a" >"$tmp/diff"; then
  echo "---- liblocus.so exports (<) vs liblocus.a defines (>):"; cat "$tmp/diff"
  fail "aarch64 liblocus.a and liblocus.so differ in their global names"
fi
if [ -n "$host_a" ] && [ -f "$host_a" ]; then
  nm -g --defined-only "$host_a" | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/host"
  if ! diff "$tmp/host" "$tmp/a" >"$tmp/diff"; then
    echo "---- x86-64 $host_a (<) vs aarch64 liblocus.a (>):"; cat "$tmp/diff"
    fail "the aarch64 and x86-64 liblocus.a define different names"
  fi
  echo "cross_aarch64: liblocus.a: only API names, the same set as the x86-64 liblocus.a"
else
  echo "cross_aarch64: liblocus.a: only API names (no x86-64 liblocus.a given to compare)"
fi

# ---- the tests, under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR)
t=$(date +%s)
excl=()
[ -n "$exclude" ] && excl=(-E "$exclude")
echo "cross_aarch64: ctest -L '$labels' ${exclude:+-E '$exclude' }-j $jobs in $bin"
"$ctest_bin" --test-dir "$bin" -L "$labels" "${excl[@]}" -j "$jobs" --output-on-failure >"$tmp/ctest.log" 2>&1
rc=$?
cat "$tmp/ctest.log"
cp "$tmp/ctest.log" "$bin.ctest.log"
line=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$tmp/ctest.log" | tail -1)
total=$(sed -n 's/.* out of \([0-9]*\).*/\1/p' <<<"$line")
failed=$(sed -n 's/.*passed, \([0-9]*\) tests\{0,1\} failed.*/\1/p' <<<"$line")
[ -n "$total" ] || fail "ctest ran no test (label regex '$labels')"
echo "cross_aarch64: tests took $(elapsed "$t") s"
if [ "$rc" -ne 0 ] || [ "$failed" != 0 ]; then
  fail "$failed of $total aarch64 tests failed under $(basename "$qemu")"
fi
echo "cross_aarch64: PASSED: $total of $total aarch64 tests ($labels) under $("$qemu" --version | head -1 | sed 's/ (.*//'), $(elapsed "$t0") s in all"
exit 0
