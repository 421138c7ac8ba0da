#!/bin/sh
# Runs inside the test bed's guest (busybox sh, docs/numa-testbed.md): turns
# the guest kernel's KSM on at PAGES pages per 20 ms (the host's KSM is never
# touched), mounts /dev/shm (for locus_shared_table), runs CMD and exits with
# its status, after the kernel's KSM and THP counters.
# --merge-across-nodes N sets that knob first (while nothing is merged).
#   ksm_guest.sh [--merge-across-nodes N] PAGES CMD [ARGS...]
mac=
if [ "$1" = --merge-across-nodes ]; then mac=$2; shift 2; fi
pages=$1
shift
k=/sys/kernel/mm/ksm
if [ ! -w $k/run ]; then echo "ksm_guest: the guest kernel has no KSM ($k/run)"; exit 77; fi
mkdir -p /dev/shm && mount -t tmpfs shm /dev/shm
if [ -n "$mac" ]; then echo "$mac" >$k/merge_across_nodes || exit 1; fi
echo "$pages" >$k/pages_to_scan && echo 20 >$k/sleep_millisecs && echo 1 >$k/run || exit 1
echo "ksm_guest: KSM run=$(cat $k/run) pages_to_scan=$(cat $k/pages_to_scan) sleep_millisecs=$(cat $k/sleep_millisecs)" \
     "merge_across_nodes=$(cat $k/merge_across_nodes) use_zero_pages=$(cat $k/use_zero_pages)" \
     "max_page_sharing=$(cat $k/max_page_sharing) smart_scan=$(cat $k/smart_scan 2>/dev/null);" \
     "THP $(cat /sys/kernel/mm/transparent_hugepage/enabled); nodes $(cat /sys/devices/system/node/online)"
"$@"
st=$?
echo "ksm_guest: KSM full_scans=$(cat $k/full_scans) pages_shared=$(cat $k/pages_shared) pages_sharing=$(cat $k/pages_sharing);" \
     "$(grep -E '^thp_(split_page|underused_split_page|deferred_split_page) ' /proc/vmstat | tr '\n' ' ')"
exit $st
