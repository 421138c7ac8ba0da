#!/bin/sh
# Runs inside the QEMU guest (busybox sh, /init of tests/numa/guest/run.sh):
# the page-reuse tests against the kernel booted.
#   guest_tests.sh patched|stock [bench]
# Exit status 0 when every test passed.
mode=${1:-patched}
echo "=== kernel $(uname -r), mode $mode"
# 2 MiB pages where advised (locus advises its large blocks, the huge test
# its mappings): the tiny config's default, set in case it is not.
thp=/sys/kernel/mm/transparent_hugepage/enabled
if [ -w $thp ]; then
  grep -q '\[never\]' $thp && echo madvise >$thp
  echo "THP: $(cat $thp)"
fi
fail=0
/page_reuse_test "$mode" || fail=1
echo "=== calloc through locus (eco profile, LD_PRELOAD)"
# LOCUS_THP=on: the huge-tail check is about the mechanics (auto would give
# eco the same advice with page reuse, but only while huge pages pay).
LD_PRELOAD=/liblocus.so LOCUS_PROFILE=eco LOCUS_THP=on LOCUS_STATS=1 /calloc_test "$mode" || fail=1
if [ "${2:-}" = bench ]; then
  echo "=== fault cost after reuse (4 KiB pages, same kernel: flagged vs unflagged mapping)"
  /page_reuse_test bench 21 2048
  /page_reuse_test costs 11 2048
  echo "=== fault cost after reuse (2 MiB pages, same kernel: flagged vs unflagged mapping)"
  /page_reuse_test bench-huge 11 16
  /page_reuse_test costs-huge 11 16
  /page_reuse_test syscost 11 16
  # Workloads through locus: uma, eco, eco + page reuse, interleaved.
  for round in 1 2 3 4 5; do
    for prog in "/timestep --quick --steps 3" "/timestep --quick --steps 10" "/hera --quick --iters 150"; do
      set -- $prog
      [ -x "$1" ] || continue
      for cfg in "uma 0" "eco 0" "eco 1"; do
        prof=${cfg% *} reuse=${cfg#* }
        echo "RUN round=$round prog=$1$([ "$1" = /timestep ] && echo "-steps$4") profile=$prof reuse=$reuse"
        LD_PRELOAD=/liblocus.so LOCUS_PROFILE=$prof LOCUS_PAGE_REUSE=$reuse /page_reuse_test rss "$@" | grep -E "RESULT|MAXRSS|REUSE"
      done
    done
  done
fi
# The kernel must not have complained (bad page state, WARN, BUG, oops).
if dmesg >/tmp/dmesg 2>/dev/null; then
  if grep -E "BUG|WARNING|Bad page|Call Trace|general protection" /tmp/dmesg; then
    echo "FAIL dmesg: the kernel reported the problems above"; fail=1
  else
    echo "PASS dmesg (no BUG, WARNING, bad page state or oops)"
  fi
fi
if [ "$mode" = patched ]; then
  # What the mm review found (issue 27): each test in a process of its own.
  # offline before hwpoison (poisoned pages stay out of use until reboot);
  # the memcg test's oom kill prints a stack trace, counted below.
  dmesg -c >/dev/null 2>&1
  if [ -x /ksft_page_reuse ]; then
    echo "=== kselftest mm/page_reuse (patch 0004)"
    if /ksft_page_reuse; then echo "PASS kselftest page_reuse"; else echo "FAIL kselftest page_reuse"; fail=1; fi
  fi
  echo "=== review tests (uapi, per-vma opt-out, vmstat counters, THP reuse stats, userfaultfd, page_owner (debug kernel), memcg, cpuset, memory offline, hwpoison)"
  /page_reuse_mm_test uapi optout vmstat thpstat uffd pageowner memcg memcg_removed memcg_reclaim shrinker_bit cpuset offline hwpoison || fail=1
  if dmesg >/tmp/dmesg2 2>/dev/null; then
    ooms=$(grep -c "invoked oom-killer" /tmp/dmesg2)
    traces=$(grep -c "Call Trace" /tmp/dmesg2)
    if grep -E "BUG|WARNING|Bad page|general protection" /tmp/dmesg2 || [ "$traces" -gt "$ooms" ]; then
      echo "FAIL dmesg after the review tests ($traces stack traces, $ooms oom reports)"; fail=1
    else
      echo "PASS dmesg after the review tests (no BUG, WARNING, bad page state; $traces stack traces, all oom reports)"
    fi
    grep -E "page_reuse|Memory failure|Offlined|offlin" /tmp/dmesg2 | head -20
  fi
fi
echo "=== guest tests: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
