#!/bin/sh
# Interleaved rounds in one boot, after the eco huge-tail change: uma,
# eco (rounds 1-3 only: slow, and the change does not touch it), eco + page
# reuse with the locus before the change (/liblocus-old.so, "eco+reuse-old")
# and after it (/liblocus.so); time-step --steps 3 and 10, Hera-like.
# /shim.so times mmap/munmap/madvise.  $1: rounds (default 7).
rounds=${1:-7}
echo madvise > /sys/kernel/mm/transparent_hugepage/enabled
echo "MEM $(grep MemTotal /proc/meminfo | tr -s ' ') bound $(cat /proc/sys/vm/page_reuse_max_pages) mm_bound $(cat /proc/sys/vm/page_reuse_mm_max_pages)"
run() { # tag lib profile reuse prog args...
  tag=$1 lib=$2 prof=$3 reuse=$4; shift 4
  echo "RUN round=$round prog=$tag profile=$prof reuse=$reuse lib=$lib"
  LD_PRELOAD="/shim.so $lib" LOCUS_PROFILE=$prof LOCUS_PAGE_REUSE=$reuse /page_reuse_test rss "$@" 2>&1 | grep -E "RESULT|MAXRSS|REUSE|SHIM (munmap|mmap)"
}
cfgs() { # tag prog args...
  tag=$1; shift
  run $tag /liblocus.so uma 0 "$@"
  [ $round -le 3 ] && run $tag /liblocus.so eco 0 "$@"
  run $tag /liblocus-old.so eco 1 "$@"
  run $tag /liblocus.so eco 1 "$@"
}
round=1
while [ $round -le $rounds ]; do
  cfgs timestep3 /timestep --quick --steps 3
  cfgs timestep10 /timestep --quick --steps 10
  cfgs hera /hera --quick --iters 150
  round=$((round + 1))
done
