#!/usr/bin/env bash
# Real client: GNU sort on a generated file of tens of MiB, with and without
# the allocator preloaded; every output compared byte for byte.
#   sort.sh [MIB]   (default 40)
. "$(dirname "$0")/common.sh"
need sort awk cmp
mib=${1:-40}
cd "$WORK"

# Deterministic input: lines of 3 fields (random word, number, padding of
# random length) from a linear congruential generator, about $mib MiB.
awk -v target=$((mib * 1048576)) 'BEGIN {
  srand(1); x = 12345; bytes = 0; n = 0
  abc = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
  while (bytes < target) {
    x = (x * 1103515245 + 12345) % 2147483648
    w = ""; len = 3 + x % 13
    for (i = 0; i < len; i++) { x = (x * 1103515245 + 12345) % 2147483648; w = w substr(abc, 1 + x % 62, 1) }
    x = (x * 1103515245 + 12345) % 2147483648
    pad = substr("................................................................................", 1, x % 80)
    line = w "\t" (x % 1000003) "\t" n "\t" pad
    print line; bytes += length(line) + 1; n++
  }
}' >input.txt || die "could not generate the input"
say "input: $(wc -l <input.txt) lines, $(wc -c <input.txt) bytes"

# -S 8M forces temporary files and multi-way merges; --parallel=2 runs the
# sort threads (blocks freed by other threads than their allocators).
for loc in C C.UTF-8; do
  export LC_ALL=$loc
  run_and_compare "plain-$loc" sort -S 8M -T "$WORK" --parallel=2 input.txt
  run_and_compare "numeric-$loc" sort -S 64M -T "$WORK" -t "$(printf '\t')" -k2,2n -k3,3n input.txt
  run_and_compare "unique-$loc" sort -u -f -t "$(printf '\t')" -k1,1 input.txt
done
export LC_ALL=C
sort -c "$WORK/plain-C.lib.out" || die "preloaded sort output is not sorted"
[ "$(wc -l <"$WORK/plain-C.lib.out")" = "$(wc -l <input.txt)" ] || die "preloaded sort lost lines"
say "PASS"
