#!/usr/bin/env bash
# tools/sharing.py on bench_ab_lockstep: under locus the allocator's own code
# makes few lines travel between the two threads' caches (the two-thread
# exchange's transfers are the workload's: the block it reads, the slot it
# swaps), and the tool sees an allocator that does make them travel
# (mimalloc's free, when installed), so the first check can fail.
# Usage: sharing_test.sh <source dir> <bench bin dir> <liblocus.so>; exit 77: skipped.
set -uo pipefail
src=$1 bin=$2 lib=$3
command -v valgrind >/dev/null || { echo "skip: valgrind is not installed (scripts/setup.sh test)"; exit 77; }
command -v nm >/dev/null || { echo "skip: nm is not installed (binutils)"; exit 77; }
row() { # output, row name, column (2 hitm, 3 rfo, 4 inval)
  awk -v r="$2" -v c="$3" '$1 == r { print $c; exit }' <<<"$1"
}
run() { python3 "$src/tools/sharing.py" --lib "$1" --bench-bin "$bin" --ops 4000 --warm 3000 --top 4 2>&1; }
out=$(run "$lib") || { echo "FAIL: sharing.py under locus: $out"; exit 1; }
echo "$out"
w=$(row "$out" workload 2) a=$(row "$out" allocator 2) r=$(row "$out" allocator 3)
[ -n "$w" ] && [ -n "$a" ] && [ -n "$r" ] || { echo "FAIL: rows missing"; exit 1; }
awk -v w="$w" 'BEGIN { exit !(w > 0.5) }' || { echo "FAIL: workload hitm $w per operation, expected > 0.5"; exit 1; }
awk -v a="$a" -v r="$r" 'BEGIN { exit !(a + r < 0.1) }' ||
  { echo "FAIL: locus's own code takes $a + $r modified lines per operation from the other thread (expected < 0.1)"; exit 1; }
mi=$(ls /usr/lib/*/libmimalloc.so.2 2>/dev/null | head -1)
if [ -n "$mi" ]; then
  out=$(run "$mi") || { echo "FAIL: sharing.py under mimalloc: $out"; exit 1; }
  a=$(row "$out" allocator 2)
  awk -v a="$a" 'BEGIN { exit !(a > 0.5) }' ||
    { echo "FAIL: mimalloc's code: $a modified lines per operation, expected > 0.5 (the tool no longer sees them?)"; echo "$out"; exit 1; }
  echo "ok: mimalloc's code takes $a modified lines per operation from the other thread"
fi
echo "ok"
