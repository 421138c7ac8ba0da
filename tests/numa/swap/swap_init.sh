#!/bin/sh
# Runs inside the guest (busybox sh, as root): turns on swap on a 64 MiB
# zram device (zram and the lz4 modules loaded from / when not built in;
# zram writes synchronously, so MADV_PAGEOUT frees a page at once instead of
# leaving it in the swap cache, where mincore would still count it
# resident), then runs /swap_calloc with liblocus preloaded under
# LOCUS_PROFILE=uma. Exit 77 (skip) when no swap can be had; else
# swap_calloc's status.
set -u
lib=${LOCUS_LIB:-/liblocus.so}
for m in lz4_compress lz4hc_compress zram; do
  [ -e /$m.ko ] && { insmod /$m.ko || { echo "swap_init: SKIP: insmod $m failed"; exit 77; }; }
done
[ -e /sys/block/zram0/disksize ] || { echo "swap_init: SKIP: no zram0"; exit 77; }
echo 64M > /sys/block/zram0/disksize || { echo "swap_init: SKIP: cannot size zram0"; exit 77; }
mkswap /dev/zram0 >/dev/null || { echo "swap_init: SKIP: mkswap /dev/zram0 failed"; exit 77; }
swapon /dev/zram0 || { echo "swap_init: SKIP: swapon /dev/zram0 failed"; exit 77; }
cat /proc/swaps
LD_PRELOAD=$lib LOCUS_PROFILE=uma /swap_calloc "$@"
