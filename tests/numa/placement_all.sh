#!/bin/sh
# Runs inside the guest: the placement checks under locus (numa profile, every
# case must reach 100 %), under LOCUS_NUMA=bind:1, and, for comparison (not
# required), under the C library's malloc and each peer allocator present.
# With --heaps, first the placement of user heaps (tests/numa/heaps.c, linked
# against locus: node heaps 100 % on their node, interleaved heaps even).
#   placement_all.sh [--locus-only] [--heaps HEAPS_PROGRAM] PLACEMENT_PROGRAM
peers=1 heaps=""
[ "$1" = --locus-only ] && peers=0 && shift
[ "$1" = --heaps ] && heaps=$2 && shift 2
prog=$1
lib=${LOCUS_LIB:-/liblocus.so}
status=0
if [ -n "$heaps" ]; then
  echo "=== placement: locus user heaps (locus_heap_create with c.node, c.interleave)"
  t0=$(cut -d' ' -f1 /proc/uptime)
  "$heaps" || { status=1; echo "=== placement: user heaps FAILED"; }
  echo "=== placement: user heaps took $(awk -v a="$t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.1f", b - a }') s (guest clock)"
fi
# Next touch through userfaultfd (the guest runs as root): a warning that it
# cannot be used fails the run; then next touch alone through page protection.
echo "=== placement: locus (LOCUS_PROFILE=numa, LOCUS_NEXT_TOUCH=uffd)"
LD_PRELOAD=$lib LOCUS_PROFILE=numa LOCUS_NEXT_TOUCH=uffd "$prog" --require 2>/tmp/placement.err || status=1
cat /tmp/placement.err
if grep -q "userfaultfd cannot be used" /tmp/placement.err; then
  echo "placement: next touch could not use userfaultfd in the guest"
  status=1
fi
echo "=== placement: locus next touch (LOCUS_PROFILE=numa, LOCUS_NEXT_TOUCH=protect)"
LD_PRELOAD=$lib LOCUS_PROFILE=numa LOCUS_NEXT_TOUCH=protect PLACEMENT_NEXT_TOUCH_ONLY=1 "$prog" --require || status=1
echo "=== placement: locus (LOCUS_NUMA=bind:1)"
LD_PRELOAD=$lib LOCUS_NUMA=bind:1 "$prog" --require || status=1
[ $peers = 1 ] || exit $status
echo "=== placement: glibc"
"$prog" || status=1
for peer in jemalloc:/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \
            tcmalloc:/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \
            mimalloc:/usr/lib/x86_64-linux-gnu/libmimalloc.so.2; do
  name=${peer%%:*} path=${peer#*:}
  if [ -e "$path" ]; then
    echo "=== placement: $name"
    LD_PRELOAD=$path "$prog" || status=1
  else
    echo "=== placement: $name not in the guest, skipped"
  fi
done
exit $status
