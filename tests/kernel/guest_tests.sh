#!/bin/sh
# Runs inside the QEMU guest (busybox sh, /init of tests/numa/guest/run.sh):
# the page-reuse tests against the kernel booted.
#   guest_tests.sh patched|stock [bench]
# Exit status 0 when every test passed.
mode=${1:-patched}
echo "=== kernel $(uname -r), mode $mode"
fail=0
/page_reuse_test "$mode" || fail=1
echo "=== calloc through locus (eco profile, LD_PRELOAD)"
LD_PRELOAD=/liblocus.so LOCUS_PROFILE=eco LOCUS_STATS=1 /calloc_test "$mode" || fail=1
if [ "${2:-}" = bench ]; then
  echo "=== fault cost after reuse (4 KiB pages)"
  /page_reuse_test bench 21 2048
  for prog in /timestep; do
    [ -x "$prog" ] || continue
    for cfg in "uma 0" "eco 0" "eco 1" "uma 0" "eco 0" "eco 1" "uma 0" "eco 0" "eco 1"; do
      set -- $cfg
      /usr/bin/time -f "TIME $prog profile=$1 reuse=$2 %e s maxrss %M kB" env LD_PRELOAD=/liblocus.so LOCUS_PROFILE=$1 LOCUS_PAGE_REUSE=$2 $prog ${TIMESTEP_ARGS:-} >/dev/null 2>/tmp/err || echo "FAILED $prog $cfg"
      grep TIME /tmp/err
    done
  done
fi
echo "=== guest tests: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
