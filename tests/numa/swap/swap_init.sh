#!/bin/sh
# Runs inside the guest (busybox sh, as root): turns on swap on a 64 MiB
# zram device (zram and the lz4 modules loaded from / when not built in;
# zram writes synchronously, so MADV_PAGEOUT frees a page at once instead of
# leaving it in the swap cache, where mincore would still count it
# resident), then runs /swap_calloc with liblocus preloaded under
# LOCUS_PROFILE=uma, in 4 KiB pages (also with /proc hidden from it: no
# pagemap) and then in 2 MiB pages. Exit 77 (skip)
# when no swap can be had; else swap_calloc's first failing status.
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
# Once in 4 KiB pages (the kernel turns THP off in a guest under 512 MiB),
# once with the blocks in 2 MiB pages (paged out, a huge page is split).
thp=/sys/kernel/mm/transparent_hugepage/enabled
echo "swap_init: THP $(cat $thp 2>/dev/null)"
LD_PRELOAD=$lib LOCUS_PROFILE=uma /swap_calloc "$@" || exit $?
# Without pagemap (a tmpfs over /proc in the process's mount namespace).
LD_PRELOAD=$lib LOCUS_PROFILE=uma /swap_calloc --no-proc "$@" || exit $?
if [ -w $thp ] && echo madvise > $thp; then
  echo "swap_init: THP $(cat $thp)"
  LD_PRELOAD=$lib LOCUS_PROFILE=uma /swap_calloc "$@" || exit $?
fi
