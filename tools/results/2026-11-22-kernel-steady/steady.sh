#!/bin/sh
# Interleaved rounds in one boot: uma, eco, eco + page reuse; time-step
# --steps 3 and --steps 10, Hera-like; /shim.so times mmap/munmap/madvise.
# $1: rounds (default 7); $2: "raise" to also run time-step --steps 10 with
# vm.page_reuse_max_pages at half of RAM after the default-bound rounds.
rounds=${1:-7}
echo madvise > /sys/kernel/mm/transparent_hugepage/enabled
echo "MEM $(grep MemTotal /proc/meminfo | tr -s ' ') bound $(cat /proc/sys/vm/page_reuse_max_pages) mm_bound $(cat /proc/sys/vm/page_reuse_mm_max_pages)"
run() { # tag profile reuse prog args...
  tag=$1 prof=$2 reuse=$3; shift 3
  echo "RUN round=$round prog=$tag profile=$prof reuse=$reuse"
  LD_PRELOAD="/shim.so /liblocus.so" LOCUS_PROFILE=$prof LOCUS_PAGE_REUSE=$reuse /page_reuse_test rss "$@" 2>&1 | grep -E "RESULT|MAXRSS|REUSE|SHIM (munmap|mmap)"
}
round=1
while [ $round -le $rounds ]; do
  for cfg in "uma 0" "eco 0" "eco 1"; do run timestep3 ${cfg% *} ${cfg#* } /timestep --quick --steps 3; done
  for cfg in "uma 0" "eco 0" "eco 1"; do run timestep10 ${cfg% *} ${cfg#* } /timestep --quick --steps 10; done
  for cfg in "uma 0" "eco 0" "eco 1"; do run hera ${cfg% *} ${cfg#* } /hera --quick --iters 150; done
  round=$((round + 1))
done
if [ "${2:-}" = raise ]; then
  echo $(( $(cat /proc/sys/vm/page_reuse_max_pages) * 2 )) > /proc/sys/vm/page_reuse_max_pages
  echo $(cat /proc/sys/vm/page_reuse_max_pages) > /proc/sys/vm/page_reuse_mm_max_pages
  echo "RAISED bound $(cat /proc/sys/vm/page_reuse_max_pages) mm_bound $(cat /proc/sys/vm/page_reuse_mm_max_pages)"
  round=1
  while [ $round -le $rounds ]; do
    for cfg in "uma 0" "eco 1"; do run timestep10-raised ${cfg% *} ${cfg#* } /timestep --quick --steps 10; done
    round=$((round + 1))
  done
fi
