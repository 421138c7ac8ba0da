#!/bin/sh
# Runs inside the guest (busybox sh): runs a program once per mode and exits
# with the first non-zero status (0 when every run passed).
#   guest_test.sh MODE... -- PROGRAM [ARGS...]
# Modes:
#   plain    the program as it is (linked against liblocus or not)
#   preload  the program with LD_PRELOAD=$LOCUS_LIB (default /liblocus.so)
modes=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do modes="$modes $1"; shift; done
[ "${1:-}" = "--" ] && shift
if [ $# -eq 0 ] || [ -z "$modes" ]; then
  echo "usage: guest_test.sh MODE... -- PROGRAM [ARGS...]" >&2
  exit 2
fi
lib=${LOCUS_LIB:-/liblocus.so}
first=0
# Automatic NUMA balancing (on in Debian's kernel) may move pages behind the
# placement checks' back: the tests measure locus's placement, not the
# kernel's, so it is off (bench-numa.sh has an option of its own).
[ -w /proc/sys/kernel/numa_balancing ] && echo 0 >/proc/sys/kernel/numa_balancing
for m in $modes; do
  echo "=== guest_test: $m: $*"
  case $m in
    plain) "$@" ;;
    preload)
      if [ ! -e "$lib" ]; then echo "guest_test: $lib is not in the guest" >&2; exit 2; fi
      LD_PRELOAD=$lib "$@" ;;
    *) echo "guest_test: unknown mode '$m'" >&2; exit 2 ;;
  esac
  st=$?
  echo "=== guest_test: $m: exit status $st"
  [ "$st" -ne 0 ] && [ "$first" -eq 0 ] && first=$st
done
exit $first
