#!/usr/bin/env bash
# Builds the kernel test programs and runs them in a 2-node QEMU guest
# booted with the given kernel (tests/numa/guest/run.sh).
#
#   run_guest.sh [--stock] [--bench] [IMAGE]
#
# IMAGE: the kernel to boot (default: the cached patched kernel of
# scripts/kernel.sh; skip, 77, if there is none).  --stock: the kernel is a
# stock one (Debian's, from tests/numa/guest/kernel.sh, when no IMAGE is
# given): the tests check that the advice is rejected and nothing is reused.
# --bench: also measure (fault cost; the time-step and Hera-like workloads of
# $LOCUS_BENCH_DIR, default build/bench, with uma, eco and eco + page reuse).
# Guest memory: 2 nodes of $LOCUS_KERNEL_GUEST_MEM each, default 512M, and 1G
# with --bench: the time-step workload frees ~300 MiB per step, more than
# the pool's default bound (a quarter of RAM) in a 1 GiB guest, which would
# make a recycled working set of 30 % of RAM the measured case (an HPC node
# has 2-8 GiB per core; docs/kernel.md, Measurements).
# LOCUS_KERNEL_GUEST_APPEND: more kernel arguments for the patched kernel.
# Exit status: the guest's (0 all passed); 77 skip.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
say() { echo "run_guest.sh: $*" >&2; }
mode=patched bench="" gmem=${LOCUS_KERNEL_GUEST_MEM:-}
while (($#)); do
  case "$1" in
    --stock) mode=stock; shift ;;
    --bench) bench=bench; gmem=${gmem:-1G}; shift ;;
    *) break ;;
  esac
done
img=${1:-}
if [ -z "$img" ]; then
  if [ $mode = stock ]; then
    img=$(bash "$repo/tests/numa/guest/kernel.sh" --boot-image) || { say "SKIP: no stock guest kernel"; exit 77; }
  else
    img=$(bash "$repo/scripts/kernel.sh" image) || { say "SKIP: no cached patched kernel (scripts/kernel.sh build)"; exit 77; }
  fi
fi
out=${LOCUS_KERNEL_TEST_BUILD:-$repo/build-kernel-tests}
mkdir -p "$out"
cc=${CC:-cc}
$cc -O2 -Wall -Wextra -static -o "$out/page_reuse_test" "$here/page_reuse_test.c" || { say "cannot build page_reuse_test"; exit 1; }
$cc -O2 -Wall -Wextra -o "$out/calloc_test" "$here/calloc_test.c" || { say "cannot build calloc_test"; exit 1; }
$cc -O2 -Wall -Wextra -static -o "$out/page_reuse_mm_test" "$here/page_reuse_mm_test.c" || { say "cannot build page_reuse_mm_test"; exit 1; }
# The series' kselftest (tools/testing/selftests/mm/page_reuse.c, added
# whole by patch 0004: taken from the patch, whatever series the cached tree
# has applied), with kselftest.h from the kernel source tree.
ktree=${LOCUS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/locus}/kernel/work/linux-source-6.12
kpatch=$(ls "$repo"/kernel/0*-selftests-mm-add-a-page_reuse-test.patch 2>/dev/null | head -1)
ksft=()
if [ $mode = patched ] && [ -n "$kpatch" ] && [ -f "$ktree/tools/testing/selftests/kselftest.h" ]; then
  awk '/^\+\+\+ b\/tools\/testing\/selftests\/mm\/page_reuse.c/ {f=1; next}
       f && /^@@/ {next} f && /^\+/ {print substr($0, 2); next} f {exit}' "$kpatch" >"$out/ksft_page_reuse.c"
  $cc -O2 -Wall -static -I"$ktree/tools/testing/selftests/mm" -o "$out/ksft_page_reuse" "$out/ksft_page_reuse.c" ||
    { say "cannot build the page_reuse kselftest"; exit 1; }
  ksft=(--file "$out/ksft_page_reuse:/ksft_page_reuse")
fi
lib=${LOCUS_LIB:-}
if [ -z "$lib" ]; then
  if [ ! -f "$out/locus/liblocus.so" ]; then
    { cmake -S "$repo" -B "$out/locus" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
      cmake --build "$out/locus" -j2 --target locus >/dev/null; } || { say "cannot build liblocus"; exit 1; }
  else
    cmake --build "$out/locus" -j2 --target locus >/dev/null || { say "cannot build liblocus"; exit 1; }
  fi
  lib=$out/locus/liblocus.so
fi
files=(--file "$out/page_reuse_test:/page_reuse_test" --file "$out/page_reuse_mm_test:/page_reuse_mm_test" --file "$out/calloc_test:/calloc_test"
       --file "$lib:/liblocus.so" --file "$here/guest_tests.sh:/guest_tests.sh" "${ksft[@]}")
if [ -n "$bench" ]; then
  bdir=${LOCUS_BENCH_DIR:-$repo/build/bench}
  for w in timestep hera; do
    [ -x "$bdir/bench_$w" ] && files+=(--file "$bdir/bench_$w:/$w")
  done
fi
envs=()
# movablecore=: half of the memory in ZONE_MOVABLE, so that the offline test
# finds blocks holding pooled pages that may go offline.
# LOCUS_KERNEL_GUEST_APPEND: more kernel arguments (scripts/kernel.sh debug:
# debug_pagealloc=on page_owner=on).
append=()
[ $mode = patched ] && append=(--append "movablecore=50%${LOCUS_KERNEL_GUEST_APPEND:+ $LOCUS_KERNEL_GUEST_APPEND}")
exec bash "$repo/tests/numa/guest/run.sh" --nodes 2 --cpus 2 --mem-per-node "${gmem:-512M}" "${append[@]}" \
  --timeout "${LOCUS_KERNEL_TEST_TIMEOUT:-$([ -n "$bench" ] && echo 3600 || echo 900)}" --kernel "$img" "${files[@]}" "${envs[@]}" \
  -- /bin/sh /guest_tests.sh "$mode" $bench
