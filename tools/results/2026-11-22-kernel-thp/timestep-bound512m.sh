#!/bin/sh
echo madvise > /sys/kernel/mm/transparent_hugepage/enabled
echo "default vm.page_reuse_max_pages $(cat /proc/sys/vm/page_reuse_max_pages); set to 131072 (512 MiB, half of RAM)"
echo 131072 > /proc/sys/vm/page_reuse_max_pages
for round in 1 2 3 4 5; do
  for steps in 3 10; do
  for cfg in "uma 0" "eco 1"; do
    prof=${cfg% *} reuse=${cfg#* }
    echo "RUN round=$round prog=/timestep$steps profile=$prof reuse=$reuse"
    LD_PRELOAD=/liblocus.so LOCUS_PROFILE=$prof LOCUS_PAGE_REUSE=$reuse /page_reuse_test rss /timestep --quick --steps $steps | grep -E "RESULT|MAXRSS"
  done
  done
done
