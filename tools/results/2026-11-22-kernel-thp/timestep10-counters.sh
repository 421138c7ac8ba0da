#!/bin/sh
echo madvise > /sys/kernel/mm/transparent_hugepage/enabled
for bound in default 131072; do
  [ $bound = default ] || echo $bound > /proc/sys/vm/page_reuse_max_pages
  for round in 1 2; do
    for cfg in "uma 0" "eco 1"; do
      prof=${cfg% *} reuse=${cfg#* }
      echo "RUN round=$round prog=/timestep10-bound$bound profile=$prof reuse=$reuse"
      LD_PRELOAD=/liblocus.so LOCUS_PROFILE=$prof LOCUS_PAGE_REUSE=$reuse /page_reuse_test rss /timestep --quick --steps 10 | grep -E "RESULT|MAXRSS|REUSE"
    done
  done
done
