#!/bin/sh
# Where eco+reuse's steady-state time goes: syscall time (shim), TLB
# shootdown IPIs (/proc/interrupts), vmstat; 2 threads and 1 thread.
echo madvise > /sys/kernel/mm/transparent_hugepage/enabled
echo 131072 > /proc/sys/vm/page_reuse_max_pages
snap() { grep -E "TLB|CAL" /proc/interrupts | tr -s ' '; grep -E "^(thp_fault_alloc|pgfault|nr_tlb|pgfree|pgalloc_normal) " /proc/vmstat | tr '\n' ' '; echo; }
for round in 1 2 3; do
  for th in 2 1; do
  for cfg in "uma 0" "eco 1"; do
    prof=${cfg% *} reuse=${cfg#* }
    echo "RUN round=$round threads=$th profile=$prof reuse=$reuse"
    echo "BEFORE"; snap
    LD_PRELOAD="/shim.so /liblocus.so" LOCUS_STATS=1 LOCUS_PROFILE=$prof LOCUS_PAGE_REUSE=$reuse /page_reuse_test rss /timestep --quick --steps 10 --threads $th 2>&1 | grep -E "RESULT|MAXRSS|REUSE|SHIM|mmap|munmap|page reuse"
    echo "AFTER"; snap
  done
  done
done
