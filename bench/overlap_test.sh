#!/usr/bin/env bash
# Runs every ab_* workload (quick) under a deliberately broken allocator
# (overlap_malloc.c: consecutive small blocks overlap by one word) and checks
# that each one rejects it with check=fail and exit status 1: a broken
# allocator cannot win.  Usage: overlap_test.sh <bench bin dir> <liboverlap>
set -uo pipefail
bin=$1 lib=$2
fails=0
run() { # name, program and arguments
  local name=$1; shift
  local prog=$bin/bench_$1; shift
  if [ ! -x "$prog" ]; then echo "skip $name: $prog not built"; return; fi
  out=$(LD_PRELOAD=$lib timeout 120 "$prog" --quick "$@" 2>/dev/null); rc=$?
  if [ $rc -eq 1 ] && grep -q "check=fail" <<<"$out"; then
    echo "ok   $name: rejected the overlapping allocator ($(grep -o 'reason=[a-z]*' <<<"$out" | head -1))"
  else
    echo "FAIL $name: exit $rc, output: $out"; fails=$((fails + 1))
  fi
}
run ab_random_1t ab_random --threads 1
run ab_random_2t ab_random --threads 2
run ab_batch_2t ab_batch --threads 2
run ab_bulk1m_1t ab_batch --batch 1000000 --min 16 --max 256 --threads 1
run ab_prodcons ab_prodcons
run ab_exchange_2t ab_exchange --threads 2
run ab_lockstep ab_lockstep
run ab_larson ab_larson
run ab_churn ab_churn
run ab_cxx ab_cxx
run ab_omp ab_omp --threads 4
# and the same programs pass under the system allocator (no preload)
out=$("$bin/bench_ab_random" --quick --threads 1) && grep -q "check=ok" <<<"$out" ||
  { echo "FAIL: bench_ab_random fails under glibc: $out"; fails=$((fails + 1)); }
exit $((fails > 0))
