#!/bin/sh
echo madvise > /sys/kernel/mm/transparent_hugepage/enabled
for round in 1 2 3 4 5 6 7; do
  for cfg in "uma 0" "eco 0" "eco 1"; do
    prof=${cfg% *} reuse=${cfg#* }
    echo "RUN round=$round prog=/timestep profile=$prof reuse=$reuse"
    LD_PRELOAD=/liblocus.so LOCUS_PROFILE=$prof LOCUS_PAGE_REUSE=$reuse /page_reuse_test rss /timestep --quick --steps 3 | grep -E "RESULT|MAXRSS"
  done
  for cfg in "uma 0" "eco 1"; do
    prof=${cfg% *} reuse=${cfg#* }
    echo "RUN round=$round prog=/timestep10 profile=$prof reuse=$reuse"
    LD_PRELOAD=/liblocus.so LOCUS_PROFILE=$prof LOCUS_PAGE_REUSE=$reuse /page_reuse_test rss /timestep --quick --steps 10 | grep -E "RESULT|MAXRSS"
  done
done
